"""Request outputs in vLLM's shape (RequestOutput / CompletionOutput), built from the engine's results."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """A token's logprob; rank: its place among the top alternatives (1 = best), None when not among them."""

    logprob: float
    rank: Optional[int] = None


@dataclass
class ToolCall:
    """A tool call the model made (chat): id, function name and arguments (JSON object text)."""

    id: str
    name: str
    arguments: str


@dataclass
class CompletionOutput:
    """One sample of a request: text (chat: the answer content), token ids, logprobs (one dict per token:
    token id -> Logprob, the sampled token and its top alternatives; None unless asked for), finish_reason
    ("stop", "length", "tool_calls", "abort", "error"; None while streaming), reasoning_content and tool_calls."""

    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    cumulative_logprob: Optional[float] = None
    logprobs: Optional[List[Dict[int, Logprob]]] = None
    finish_reason: Optional[str] = None
    reasoning_content: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The output of one request: its prompt, one CompletionOutput per sample (n), whether it has finished,
    and error (non-empty when the engine failed the request mid-run)."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: Optional[List[int]]
    outputs: List[CompletionOutput]
    finished: bool
    num_prompt_tokens: int = 0
    error: str = ""


def logprobs_of(entries) -> List[Dict[int, Logprob]]:
    """Engine TokenLogprob entries -> one {token id: Logprob} dict per token (vLLM's layout)."""
    out: List[Dict[int, Logprob]] = []
    for e in entries:
        d: Dict[int, Logprob] = {}
        for rank, (tok, lp) in enumerate(e.top, start=1):
            d[tok] = Logprob(lp, rank)
        if e.token not in d:
            d[e.token] = Logprob(e.logprob, None)
        out.append(d)
    return out


def completion_of(c, want_logprobs: bool) -> CompletionOutput:
    """An engine Completion -> CompletionOutput."""
    lps = logprobs_of(c.logprobs) if want_logprobs else None
    cum = sum(e.logprob for e in c.logprobs) if want_logprobs else None
    calls = [ToolCall(t.id, t.name, t.arguments) for t in c.tool_calls]
    return CompletionOutput(c.index, c.text, list(c.token_ids), cum, lps, c.finish_reason, c.reasoning, calls)


def request_output_of(result, prompt: Optional[str], prompt_ids: Optional[List[int]],
                      want_logprobs: bool) -> RequestOutput:
    """An engine RequestResult -> a finished RequestOutput."""
    outs = sorted((completion_of(c, want_logprobs) for c in result.completions), key=lambda c: c.index)
    return RequestOutput(str(result.id), prompt, prompt_ids, outs, True, result.prompt_tokens, result.error)
