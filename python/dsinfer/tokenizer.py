"""Tokenizer and apply_chat_template: the engine's tokenizer and chat template (equal to `dsinfer tokenize` /
`dsinfer render-chat --model DIR`)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _core
from .requests import as_conversations, chat_fields, to_json


class Tokenizer:
    """Tokenizer(path): a model directory (its tokenizer.json; chat templates then use the model's chat encoding
    and chat defaults) or a tokenizer.json file. ValueError naming the problem for a bad file."""

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str, got {type(path).__name__}")
        path = os.fspath(path)
        self.model_dir: Optional[str] = path if os.path.isdir(path) else None
        self.path = os.path.join(path, "tokenizer.json") if self.model_dir else path
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"tokenizer not found: {self.path}")
        self._tok = _core.Tokenizer(self.path)

    @property
    def vocab_size(self) -> int:
        return self._tok.vocab_size

    def encode(self, text: str, special_tokens: bool = True) -> List[int]:
        """Token ids of text (no BOS added); special_tokens=False reads special-token spellings as plain text."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._tok.encode(text, special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of token ids; ValueError naming the first id outside the vocabulary."""
        return self._tok.decode(list(ids), skip_special_tokens)

    def apply_chat_template(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
                            tokenize: bool = True, **kwargs: Any) -> Union[str, List[int]]:
        """The prompt the engine runs for this conversation: token ids (tokenize=True) or text."""
        return apply_chat_template(messages, model=self.model_dir, tokenizer=self.path, tools=tools,
                                   tokenize=tokenize, **kwargs)


def apply_chat_template(messages: List[Dict[str, Any]], *, model: Optional[str] = None,
                        tokenizer: Optional[str] = None, tools: Optional[List[Dict[str, Any]]] = None,
                        tool_choice: Any = None, chat_template_kwargs: Optional[Dict[str, Any]] = None,
                        response_format: Optional[Dict[str, Any]] = None,
                        tokenize: bool = False) -> Union[str, List[int]]:
    """Render one conversation with the DeepSeek-V4 / V4.1 chat encoding, exactly as `dsinfer render-chat --model
    model` does (the model's encoding and chat_defaults.json, its tokenizer.json for ids). Returns the prompt text,
    or its token ids with tokenize=True (needs model or tokenizer). ValueError naming the field for a bad
    conversation."""
    convs = as_conversations(messages)
    if len(convs) != 1:
        raise TypeError("apply_chat_template takes one conversation (a list of message dicts)")
    body: Dict[str, Any] = {"messages": convs[0], **chat_fields(tools, tool_choice, chat_template_kwargs)}
    if response_format is not None:
        body["response_format"] = response_format
    if model is not None and not os.path.isdir(model):
        raise FileNotFoundError(f"model directory not found: {model}")
    rendered = _core.render_chat(to_json(body), model or "", tokenizer or "")
    if not tokenize:
        return rendered.prompt
    if rendered.token_ids is None:
        raise ValueError("tokenize=True needs a tokenizer (model directory with tokenizer.json, or tokenizer=)")
    return list(rendered.token_ids)
