"""dsinfer.AsyncEngine: 64 concurrent streams from one event loop, 8 cancelled halfway (aborted in the engine,
their state freed), the others complete with the offline engine's tokens; the GIL is released while stepping."""
import asyncio
import sys
import threading
import time

import dsinfer
from dsinfer import SamplingParams
from test_pkg_offline import STRICT_WEATHER_TOOLS

N_STREAMS = 64
CANCELLED = set(range(3, N_STREAMS, 8))  # 8 streams
MAX_TOKENS = 12
PROMPTS = [f"def function_{i}(x):\n    return x * {i}" for i in range(N_STREAMS)]


async def _consume(engine, i, halfway):
    texts, last = [], None
    async for out in engine.generate(PROMPTS[i], SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                                    ignore_eos=True) if i not in CANCELLED else
                                     SamplingParams(temperature=0, max_tokens=4000, ignore_eos=True)):
        last = out
        texts.append(out.outputs[0].text if out.outputs else "")
        if i in CANCELLED and out.outputs and len(out.outputs[0].token_ids) >= MAX_TOKENS // 2:
            halfway[i].set()
    return last, texts


def _invariant(backend):
    """Engine options under which the streams' tokens may be compared with an offline batch of another shape: the
    CPU reference is batch-invariant as it is; CUDA's default kernels are not (the cancelled streams change the
    batch mid-run: greedy tokens differed at position 7 on an H200), --batch-invariant makes them so."""
    return {"batch_invariant": True} if backend == "cuda" else {}


async def _run(model_dir, backend):
    with dsinfer.AsyncEngine(model_dir, backend=backend, max_num_seqs=N_STREAMS, **_invariant(backend)) as engine:
        halfway = {i: asyncio.Event() for i in CANCELLED}
        tasks = [asyncio.create_task(_consume(engine, i, halfway)) for i in range(N_STREAMS)]
        for i in CANCELLED:
            await halfway[i].wait()
            tasks[i].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # The aborts reach the engine within a step; a cancelled request left running would hold its state for
        # 4000 tokens.
        stats = engine.stats()
        for _ in range(200):
            if stats.running_requests == 0:
                break
            await asyncio.sleep(0.05)
            stats = engine.stats()
        return results, stats


def test_64_streams_8_cancelled(model_dir, backend, llm):
    results, stats = asyncio.run(_run(model_dir, backend))
    if backend == "cuda":
        llm = dsinfer.LLM(model_dir, backend=backend, **_invariant(backend))
    offline = llm.generate([PROMPTS[i] for i in range(N_STREAMS) if i not in CANCELLED],
                           SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True), use_tqdm=False)
    expected = iter(offline)
    for i, r in enumerate(results):
        if i in CANCELLED:
            assert isinstance(r, asyncio.CancelledError), f"stream {i}: {r!r}"
            continue
        assert not isinstance(r, BaseException), f"stream {i}: {r!r}"
        last, texts = r
        want = next(expected).outputs[0]
        assert last.finished and last.outputs[0].finish_reason == "length"
        assert last.outputs[0].token_ids == want.token_ids and len(want.token_ids) == MAX_TOKENS
        assert last.outputs[0].text == want.text
        # streamed outputs are cumulative: each extends the one before, the last streamed one is the final text
        assert len(texts) >= 2 and all(b.startswith(a) for a, b in zip(texts, texts[1:]))
        assert texts[-2] == want.text or texts[-1] == want.text
    assert stats.running_requests == 0 and stats.waiting_requests == 0
    assert stats.state_slots_used == 0 and stats.state_blocks_used == 0 and stats.state_bytes_used == 0


def test_step_releases_the_gil(llm):
    """While a step runs on another thread, this thread runs Python. The switch interval is raised so that the
    stepping thread never loses the GIL by preemption: only a step that releases it lets the counter move."""
    long_prompt = " ".join(f"word{i}" for i in range(100))
    engine = llm.engine
    engine.submit('{"prompt": "%s", "max_tokens": 8, "temperature": 0}' % long_prompt)
    counter = [0]
    moved = []
    done = threading.Event()

    def stepper():
        while engine.has_unfinished():
            before = counter[0]
            engine.step()
            moved.append(counter[0] - before)
        engine.take_finished()
        done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    try:
        t = threading.Thread(target=stepper)
        t.start()
        while not done.is_set():
            counter[0] += 1
            time.sleep(0.001)  # without the GIL, so the stepper takes it between steps at once
        t.join()
    finally:
        sys.setswitchinterval(old)
    assert moved and max(moved) > 0, moved


def test_async_chat_streams_tool_calls(model_dir, backend, llm):
    conv = [{"role": "user", "content": "What is the weather in Paris?"}]
    sp = SamplingParams(temperature=0, max_tokens=200)
    kw = {"tools": STRICT_WEATHER_TOOLS, "tool_choice": "required", "chat_template_kwargs": {"thinking": False}}

    async def main():
        with dsinfer.AsyncEngine(model_dir, backend=backend) as engine:
            return [o async for o in engine.chat(conv, sp, **kw)]

    outs = asyncio.run(main())
    want = llm.chat(conv, sp, use_tqdm=False, **kw)[0].outputs[0]
    final, streamed = outs[-1].outputs[0], outs[-2].outputs[0]
    assert outs[0].outputs[0].token_ids != streamed.token_ids  # each streamed output is its own snapshot
    assert outs[-1].finished and final.token_ids == want.token_ids and final.tool_calls == want.tool_calls
    assert len(want.tool_calls) >= 1
    # the streamed pieces (cumulative) add up to the final calls
    assert [(t.name, t.arguments) for t in streamed.tool_calls] == [(t.name, t.arguments) for t in want.tool_calls]
    assert streamed.token_ids == want.token_ids


class _HeldPrepare:
    """The engine with prepare() held for bodies that carry a structured-output choice until `release` is set: a
    grammar that takes long to compile, without timing."""

    def __init__(self, engine):
        self._engine = engine
        self.entered = threading.Event()
        self.release = threading.Event()

    def prepare(self, body_json, chat):
        if '"choice"' in body_json:
            self.entered.set()
            self.release.wait(60)
        return self._engine.prepare(body_json, chat)

    def __getattr__(self, name):
        return getattr(self._engine, name)


async def _held_grammar_run(model_dir, backend):
    with dsinfer.AsyncEngine(model_dir, backend=backend, max_num_seqs=8) as engine:
        held = _HeldPrepare(engine._engine)
        engine._engine = held

        async def last(prompt, sp):
            out = None
            async for out in engine.generate(prompt, sp):
                pass
            return out

        constrained = asyncio.create_task(
            last("Answer:", SamplingParams(temperature=0, max_tokens=8, structured_outputs={"choice": ["yes", "no"]})))
        while not held.entered.is_set():
            await asyncio.sleep(0.01)
        plain = await asyncio.gather(*(last(PROMPTS[i], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
                                       for i in range(4)))
        still_compiling = not constrained.done()
        held.release.set()
        return plain, still_compiling, await constrained


def test_a_compiling_grammar_holds_only_its_own_stream(model_dir, backend):
    """AsyncEngine compiles a request's grammar off the thread that steps every stream: while one request's grammar
    is (held) compiling, other streams run to the end; then the constrained one completes inside its choice."""
    plain, still_compiling, constrained = asyncio.run(_held_grammar_run(model_dir, backend))
    assert all(o.finished and len(o.outputs[0].token_ids) == 6 for o in plain)
    assert still_compiling
    assert constrained.finished and constrained.outputs[0].text in ("yes", "no")
