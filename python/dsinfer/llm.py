"""LLM: offline batch generation and chat (vLLM's LLM class) on the C++ engine."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from . import _core
from .engine_options import make_engine
from .outputs import RequestOutput, request_output_of
from .requests import (PromptType, as_conversations, as_prompt_list, chat_fields, params_list, prompt_body,
                       to_json)
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # the progress bar is optional
    _tqdm = None


class LLM:
    """An engine for offline inference: LLM(model_dir, backend="cpu" | "cuda", **engine_options).

    engine_options are EngineOptions fields (vLLM names): max_num_seqs, max_num_batched_tokens, max_model_len,
    seed, numerics, state_memory_gb, speculative, enable_prefix_caching, batch_invariant, sampling, gpus, ...
    (dsinfer.engine_option_names()). The same requests give the same outputs as `dsinfer generate` with the
    same engine flags.
    """

    def __init__(self, model: str, backend: str = "cpu", **engine_options: Any) -> None:
        self.model = model
        self._engine = make_engine(model, backend, engine_options)
        self._tokenizer: Optional[Tokenizer] = None

    @property
    def engine(self) -> "_core.Engine":
        """The C++ engine (dsinfer._core.Engine)."""
        return self._engine

    def get_tokenizer(self) -> Tokenizer:
        """The model directory's tokenizer (with its chat template)."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.model)
        return self._tokenizer

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
                 use_tqdm: bool = True) -> List[RequestOutput]:
        """Completions for prompts (text, token ids, {"prompt": ...} / {"prompt_token_ids": ...}, or a list of
        them), one RequestOutput per prompt in order."""
        plist = as_prompt_list(prompts)
        params = params_list(sampling_params, len(plist))
        items = []
        for p, sp in zip(plist, params):
            body, text, ids = prompt_body(p)
            body.update(sp.to_body())
            items.append((body, text, ids, sp))
        return self._run(items, use_tqdm)

    def chat(self, messages: Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]],
             sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
             use_tqdm: bool = True, tools: Optional[List[Dict[str, Any]]] = None, tool_choice: Any = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Chat completions: one conversation (a list of OpenAI message dicts) or a list of them. tools: OpenAI
        tool definitions; chat_template_kwargs: {"thinking": bool, "reasoning_effort": ...} (default: the model
        directory's chat_defaults.json). Outputs carry content as text, reasoning_content and tool_calls."""
        convs = as_conversations(messages)
        params = params_list(sampling_params, len(convs))
        extra = chat_fields(tools, tool_choice, chat_template_kwargs)
        items = []
        for conv, sp in zip(convs, params):
            body = {"messages": conv, **extra}
            body.update(sp.to_body())
            items.append((body, None, None, sp))
        return self._run(items, use_tqdm)

    def _submit_all(self, items) -> Dict[int, int]:
        """Queue every request; on a rejected one, abort those already queued and raise naming its index."""
        index_of: Dict[int, int] = {}
        for i, (body, _, _, _) in enumerate(items):
            try:
                index_of[self._engine.submit(to_json(body))] = i
            except (ValueError, TypeError) as e:
                for rid in index_of:
                    self._engine.abort(rid)
                self._engine.take_finished()
                where = f"request {i}: " if len(items) > 1 else ""
                raise type(e)(f"{where}{e}") from None
        return index_of

    def _run(self, items, use_tqdm: bool) -> List[RequestOutput]:
        index_of = self._submit_all(items)
        outputs: List[Optional[RequestOutput]] = [None] * len(items)
        bar = _tqdm(total=len(items), desc="dsinfer", unit="req") if use_tqdm and _tqdm and items else None
        try:
            while self._engine.has_unfinished():
                # Many steps per call (until a request finishes, or 50 ms): the Python loop costs per call, not per
                # step (bench/NOTES.md, issue 33 on the H200).
                for r in self._engine.run_steps(0.05):
                    i = index_of[r.id]
                    _, text, ids, sp = items[i]
                    outputs[i] = request_output_of(r, text, ids, sp.logprobs is not None)
                    if bar:
                        bar.update(1)
        except BaseException:
            for rid, i in index_of.items():  # interrupted (KeyboardInterrupt, a failed step): free the rest
                if outputs[i] is None:
                    self._engine.abort(rid)
            self._engine.take_finished()
            raise
        finally:
            if bar:
                bar.close()
        return [o for o in outputs if o is not None]

    def stats(self) -> "_core.EngineStats":
        """The engine's load and state-memory use now."""
        return self._engine.stats()
