"""SamplingParams and StructuredOutputsParams: vLLM's names and defaults, turned into OpenAI request body fields.

The engine validates every value (range, combination) and names the field in its ValueError; this module only
checks the Python types, raising TypeError naming the field.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

_NUMBER_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_INT_FIELDS = ("n", "top_k", "min_tokens")
_OPTIONAL_INT_FIELDS = ("seed", "max_tokens", "logprobs")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class StructuredOutputsParams:
    """A constraint on the generated text (vLLM's StructuredOutputsParams); give exactly one of json, regex,
    choice, grammar, json_object, structural_tag. json: a JSON Schema (dict or JSON text)."""

    json: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    structural_tag: Optional[Union[str, Dict[str, Any]]] = None
    disable_any_whitespace: bool = False

    def to_body(self) -> Dict[str, Any]:
        body = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if not self.disable_any_whitespace:
            body.pop("disable_any_whitespace")
        return body


@dataclass
class SamplingParams:
    """Sampling and stopping controls of one request (vLLM's SamplingParams; same names and defaults).

    temperature 0 is greedy. seed makes sampling reproducible (same seed, same tokens as `dsinfer generate`).
    logprobs=k returns each sampled token's logprob and its k best alternatives (k = 0: the sampled token only).
    structured_outputs constrains the output (JSON Schema, regex, choice, grammar, ...).
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    logit_bias: Optional[Dict[int, float]] = None
    structured_outputs: Optional[Union[StructuredOutputsParams, Dict[str, Any]]] = None
    extra_args: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _NUMBER_FIELDS:
            if not _is_number(getattr(self, name)):
                raise TypeError(f"SamplingParams.{name} must be a number, got {type(getattr(self, name)).__name__}")
        for name in _INT_FIELDS:
            if not _is_int(getattr(self, name)):
                raise TypeError(f"SamplingParams.{name} must be an int, got {type(getattr(self, name)).__name__}")
        for name in _OPTIONAL_INT_FIELDS:
            v = getattr(self, name)
            if v is not None and not _is_int(v):
                raise TypeError(f"SamplingParams.{name} must be an int or None, got {type(v).__name__}")
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"SamplingParams.ignore_eos must be a bool, got {type(self.ignore_eos).__name__}")
        if self.stop is not None and not isinstance(self.stop, (str, list)):
            raise TypeError(f"SamplingParams.stop must be a str or a list of str, got {type(self.stop).__name__}")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs,
                                                                   (StructuredOutputsParams, dict)):
            raise TypeError("SamplingParams.structured_outputs must be a StructuredOutputsParams or a dict, got "
                            f"{type(self.structured_outputs).__name__}")

    def to_body(self) -> Dict[str, Any]:
        """The OpenAI / vLLM request body fields of these parameters."""
        body: Dict[str, Any] = {
            "n": self.n, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
            "min_p": self.min_p, "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty, "repetition_penalty": self.repetition_penalty,
            "min_tokens": self.min_tokens, "ignore_eos": self.ignore_eos, "return_token_ids": True,
        }
        optional = {"seed": self.seed, "max_tokens": self.max_tokens, "logprobs": self.logprobs,
                    "stop_token_ids": self.stop_token_ids}
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.stop is not None:
            body["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        if self.logit_bias:
            body["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        so = self.structured_outputs
        if so is not None:
            body["structured_outputs"] = so.to_body() if isinstance(so, StructuredOutputsParams) else dict(so)
        body.update(self.extra_args)
        return body
