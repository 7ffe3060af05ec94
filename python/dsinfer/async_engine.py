"""AsyncEngine: streaming generation from asyncio (vLLM's AsyncLLM / SGLang's Engine, async side).

One worker thread owns the engine's step loop; each step runs with the GIL released, so the event loop keeps
running while the model computes. Requests go to the worker through a queue (the event loop never waits for a
step); token events come back to each request's asyncio.Queue with loop.call_soon_threadsafe. Cancelling the
task that iterates a stream (or leaving the `async for`) aborts the request in the engine, which frees its state.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from . import _core
from .engine_options import make_engine
from .outputs import CompletionOutput, RequestOutput, ToolCall, logprobs_of, request_output_of
from .requests import PromptType, as_conversations, chat_fields, prompt_body, to_json
from .sampling_params import SamplingParams


class _Stream:
    """One request's delivery target: its event loop and queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: "asyncio.Queue[Tuple[str, Any]]" = asyncio.Queue()

    def put(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, value))
        except RuntimeError:  # the loop has closed: nobody is listening
            pass


class AsyncEngine:
    """AsyncEngine(model_dir, backend="cpu", **engine_options): many concurrent streaming requests.

        async for out in engine.generate("Hello", SamplingParams(max_tokens=32)):
            print(out.outputs[0].text)   # cumulative text so far; out.finished on the last one

    Call shutdown() (or use `with AsyncEngine(...) as engine:`) to stop the worker thread.
    """

    def __init__(self, model: str, backend: str = "cpu", **engine_options: Any) -> None:
        self.model = model
        self._engine = make_engine(model, backend, engine_options)
        self._engine.set_streaming(True)
        self._cv = threading.Condition()
        self._submits: List[Tuple[str, _Stream, asyncio.Future]] = []
        self._aborts: List[int] = []
        self._streams: Dict[int, _Stream] = {}
        self._stopped = False
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._worker, name="dsinfer-engine", daemon=True)
        self._thread.start()

    # ---- public API ----
    async def generate(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None
                       ) -> AsyncIterator[RequestOutput]:
        """Stream one completion request: RequestOutputs with the text and tokens so far, the last one finished."""
        body, text, ids = prompt_body(prompt)
        sp = sampling_params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(sp).__name__}")
        body.update(sp.to_body())
        async for out in self._stream(body, text, ids, sp):
            yield out

    async def chat(self, messages: List[Dict[str, Any]], sampling_params: Optional[SamplingParams] = None,
                   tools: Optional[List[Dict[str, Any]]] = None, tool_choice: Any = None,
                   chat_template_kwargs: Optional[Dict[str, Any]] = None) -> AsyncIterator[RequestOutput]:
        """Stream one chat request (one conversation); content in text, plus reasoning_content and tool_calls."""
        convs = as_conversations(messages)
        if len(convs) != 1:
            raise TypeError("AsyncEngine.chat takes one conversation (a list of message dicts)")
        sp = sampling_params or SamplingParams()
        body = {"messages": convs[0], **chat_fields(tools, tool_choice, chat_template_kwargs), **sp.to_body()}
        async for out in self._stream(body, None, None, sp):
            yield out

    def stats(self) -> "_core.EngineStats":
        """The engine's load and state-memory use (waits for a running step to end)."""
        return self._engine.stats()

    def shutdown(self) -> None:
        """Stop the worker thread; unfinished requests are aborted."""
        with self._cv:
            self._stopped = True
            self._cv.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> "AsyncEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # ---- event-loop side ----
    async def _stream(self, body: Dict[str, Any], text: Optional[str], ids: Optional[List[int]],
                      sp: SamplingParams) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        stream = _Stream(loop)
        submitted: asyncio.Future = loop.create_future()
        body_json = to_json(body)
        # The grammar compiles on an executor thread, not on the thread that steps every stream: a request waits
        # for its own grammar only (ValueError naming the field for a bad request, as submit raises).
        await loop.run_in_executor(None, self._engine.prepare, body_json, "messages" in body)
        with self._cv:
            if self._error is not None:
                raise RuntimeError(f"the AsyncEngine's worker failed: {self._error}")
            if self._stopped:
                raise RuntimeError("the AsyncEngine has been shut down")
            self._submits.append((body_json, stream, submitted))
            self._cv.notify()
        rid = await submitted  # ValueError naming the field when the engine rejects the request
        partial = RequestOutput(str(rid), text, ids, [], False)
        want_lp = sp.logprobs is not None
        done = False
        try:
            while not done:
                kind, value = await stream.queue.get()
                if kind == "events":
                    _apply_events(partial, value, want_lp)
                    yield _snapshot(partial)
                elif kind == "result":
                    done = True
                    yield request_output_of(value, text, ids, want_lp)
                else:  # "error": the engine failed
                    done = True
                    raise value
        finally:
            if not done:  # cancelled or abandoned: free the request's state in the engine
                with self._cv:
                    self._aborts.append(rid)
                    self._cv.notify()

    # ---- worker thread ----
    def _take_work(self) -> Tuple[List[Tuple[str, _Stream, asyncio.Future]], List[int], bool]:
        with self._cv:
            while not (self._stopped or self._submits or self._aborts or self._engine_busy()):
                self._cv.wait()
            submits, aborts = self._submits, self._aborts
            self._submits, self._aborts = [], []
            return submits, aborts, self._stopped

    def _engine_busy(self) -> bool:
        return bool(self._streams) and self._engine.has_unfinished()

    def _worker(self) -> None:
        try:
            while True:
                submits, aborts, stopped = self._take_work()
                for body, stream, fut in submits:
                    self._submit(body, stream, fut)
                for rid in aborts + (list(self._streams) if stopped else []):
                    self._streams.pop(rid, None)
                    self._engine.abort(rid)
                if stopped:
                    self._engine.take_finished()
                    return
                if self._engine.has_unfinished():
                    self._step()
        except BaseException as e:  # a failed step: every open stream and every waiting submission gets the error
            with self._cv:
                self._error = e
                self._stopped = True
                pending, self._submits = self._submits, []
            for stream in self._streams.values():
                stream.put("error", e)
            self._streams.clear()
            for _, stream, fut in pending:
                stream.loop.call_soon_threadsafe(_set_exception, fut, RuntimeError(f"engine failed: {e}"))

    def _submit(self, body: str, stream: _Stream, fut: asyncio.Future) -> None:
        try:
            rid = self._engine.submit(body)
        except Exception as e:  # ValueError naming the field of a rejected request
            stream.loop.call_soon_threadsafe(_set_exception, fut, e)
            return
        self._streams[rid] = stream
        stream.loop.call_soon_threadsafe(self._deliver_id, fut, rid)

    def _deliver_id(self, fut: asyncio.Future, rid: int) -> None:
        """On the event loop: hand the request id to its stream, or abort it when the stream was cancelled while
        it waited for the id."""
        if not fut.done():
            fut.set_result(rid)
            return
        with self._cv:
            self._aborts.append(rid)
            self._cv.notify()

    def _step(self) -> None:
        events = self._engine.step()
        by_request: Dict[int, list] = {}
        for ev in events:
            by_request.setdefault(ev.request_id, []).append(ev)
        for rid, evs in by_request.items():
            stream = self._streams.get(rid)
            if stream is not None:
                stream.put("events", evs)
        for result in self._engine.take_finished():
            stream = self._streams.pop(result.id, None)
            if stream is not None:
                stream.put("result", result)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _snapshot(out: RequestOutput) -> RequestOutput:
    """A copy of the cumulative output to hand out (the stream keeps appending to its own)."""
    outs = [dataclasses.replace(c, token_ids=list(c.token_ids),
                                logprobs=None if c.logprobs is None else list(c.logprobs),
                                tool_calls=[dataclasses.replace(t) for t in c.tool_calls]) for c in out.outputs]
    return dataclasses.replace(out, outputs=outs)


def _apply_events(out: RequestOutput, events: list, want_logprobs: bool) -> None:
    """Append a step's token events to the cumulative outputs."""
    for ev in events:
        while len(out.outputs) <= ev.index:
            out.outputs.append(CompletionOutput(len(out.outputs), logprobs=[] if want_logprobs else None))
        c = out.outputs[ev.index]
        c.text += ev.text
        c.reasoning_content += ev.reasoning
        c.token_ids.extend(ev.token_ids)
        if want_logprobs and c.logprobs is not None:
            c.logprobs.extend(logprobs_of(ev.logprobs))
        for d in ev.tool_calls:  # a call's first piece has its id and name, later ones more of its arguments
            while d.index >= len(c.tool_calls):
                c.tool_calls.append(ToolCall(d.id, d.name, ""))
            c.tool_calls[d.index].arguments += d.arguments
        if ev.finished:
            c.finish_reason = ev.finish_reason
