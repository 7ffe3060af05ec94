"""Request bodies: prompts and conversations as the OpenAI request bodies the engine parses (the same bodies
`dsinfer generate` reads from a Batch file), with TypeError for inputs of the wrong type."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .sampling_params import SamplingParams

PromptType = Union[str, Sequence[int], Dict[str, Any]]


def _is_token_ids(p: Any) -> bool:
    return isinstance(p, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)


def prompt_body(prompt: PromptType) -> Tuple[Dict[str, Any], Optional[str], Optional[List[int]]]:
    """A completions prompt (text, token ids, or vLLM's {"prompt": ...} / {"prompt_token_ids": [...]}) ->
    (body, prompt text, prompt ids)."""
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            prompt = prompt["prompt_token_ids"]
            if not _is_token_ids(prompt):
                raise TypeError("prompt_token_ids must be a list of int")
        elif "prompt" in prompt:
            prompt = prompt["prompt"]
            if not isinstance(prompt, str):
                raise TypeError(f"a {{'prompt': ...}} prompt must hold a str, got {type(prompt).__name__}")
        else:
            raise TypeError("a dict prompt needs 'prompt' (text) or 'prompt_token_ids'")
    if isinstance(prompt, str):
        return {"prompt": prompt}, prompt, None
    if _is_token_ids(prompt):
        return {"prompt": list(prompt)}, None, list(prompt)
    raise TypeError(f"a prompt must be a str, a list of token ids or a dict, got {type(prompt).__name__}")


def as_prompt_list(prompts: Any) -> List[PromptType]:
    """One prompt or a list of prompts -> a list."""
    if isinstance(prompts, (str, dict)) or _is_token_ids(prompts) and len(prompts) > 0:
        return [prompts]
    if isinstance(prompts, (list, tuple)):
        return list(prompts)
    raise TypeError(f"prompts must be a str, token ids, a dict or a list of them, got {type(prompts).__name__}")


def params_list(params: Union[None, SamplingParams, Sequence[SamplingParams]], count: int) -> List[SamplingParams]:
    """None (defaults), one SamplingParams for all, or one per prompt."""
    if params is None:
        params = SamplingParams()
    if isinstance(params, SamplingParams):
        return [params] * count
    if isinstance(params, (list, tuple)):
        if len(params) != count:
            raise ValueError(f"{len(params)} sampling params for {count} prompts")
        for i, p in enumerate(params):
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}")
        return list(params)
    raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise TypeError(f"{where} must be a list of message dicts ({{'role': ..., 'content': ...}})")


def as_conversations(messages: Any) -> List[List[Dict[str, Any]]]:
    """One conversation (a list of message dicts) or a list of conversations -> a list of conversations."""
    if isinstance(messages, (list, tuple)) and messages and all(isinstance(m, (list, tuple)) for m in messages):
        for i, conv in enumerate(messages):
            _check_messages(conv, f"messages[{i}]")
        return [list(c) for c in messages]
    _check_messages(messages, "messages")
    return [list(messages)]


def chat_fields(tools: Optional[List[Dict[str, Any]]] = None, tool_choice: Any = None,
                chat_template_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """tools / tool_choice / chat_template_kwargs (thinking: bool, reasoning_effort) -> body fields."""
    body: Dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, (list, tuple)):
            raise TypeError(f"tools must be a list of tool dicts, got {type(tools).__name__}")
        body["tools"] = list(tools)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    for key, value in (chat_template_kwargs or {}).items():
        if key in ("thinking", "enable_thinking"):
            if not isinstance(value, bool):
                raise TypeError(f"chat_template_kwargs['{key}'] must be a bool, got {type(value).__name__}")
            body["thinking"] = {"type": "enabled" if value else "disabled"}
        elif key == "reasoning_effort":
            body["reasoning_effort"] = value
        else:
            raise ValueError(f"chat_template_kwargs: unknown key '{key}' (known: thinking, reasoning_effort)")
    return body


def to_json(body: Dict[str, Any]) -> str:
    """JSON text of a body; TypeError naming the value that is not JSON."""
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"request is not JSON-serializable: {e}") from None
