#!/usr/bin/env python3
"""Python offline generate (dsinfer.LLM) against `dsinfer generate` on the same batch (bench/NOTES.md).

Both run the same requests on the same engine settings: N greedy completions of fixed length (ignore_eos). The
CLI's time is the "wall" of its summary line (the step loop, from after the requests are queued to the last
result); Python's is the whole LLM.generate() call (request bodies, submission, the step loop, result objects),
so any cost the binding adds is inside it. Runs alternate, R rounds; medians and minima are compared.

usage: bench/python_overhead.py [--binary build/cpu/dsinfer] [--model models/dsv4-small] [--backend cpu|cuda] [-n 32]
       [--max-tokens 64] [--rounds 3]
Prints each round, then per side the median, minimum and maximum, and the per-round overhead (python / cli - 1 of
the same round: the two runs of a round are adjacent in time) with its median and spread.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli_wall(binary, model, backend, lines):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        p = subprocess.run([binary, "generate", "--model", model, "--backend", backend, "--input", inp,
                            "--output", out],
                           capture_output=True, text=True, check=True)
        m = re.search(r"([0-9.]+) output tokens, ([0-9.]+) s wall", p.stderr)
        return float(m.group(2)), int(m.group(1))


class _TimedEngine:
    """The engine with its step() and submit() timed (submit: the request's parse and tokenization, which the CLI
    does before its wall starts)."""

    def __init__(self, engine):
        self.engine, self.step_s, self.steps, self.submit_s = engine, 0.0, 0, 0.0

    def step(self):
        t0 = time.perf_counter()
        out = self.engine.step()
        self.step_s += time.perf_counter() - t0
        self.steps += 1
        return out

    def run_steps(self, max_seconds):  # LLM.generate's loop: several steps per call, in C++
        t0 = time.perf_counter()
        out = self.engine.run_steps(max_seconds)
        self.step_s += time.perf_counter() - t0
        self.steps += 1
        return out

    def submit(self, body):
        t0 = time.perf_counter()
        out = self.engine.submit(body)
        self.submit_s += time.perf_counter() - t0
        return out

    def __getattr__(self, name):
        return getattr(self.engine, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "cpu", "dsinfer"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "dsv4-small"))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import dsinfer

    prompts = [f"def function_{i}(x):\n    return x * {i}\n" for i in range(a.n)]
    body = {"max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True}
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": {"prompt": p, **body}}
             for i, p in enumerate(prompts)]
    sp = dsinfer.SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
    llm = dsinfer.LLM(a.model, backend=a.backend)
    llm.generate(prompts[:2], sp, use_tqdm=False)  # warm-up
    cli_times, py_times = [], []
    for r in range(a.rounds):
        t, toks = cli_wall(a.binary, a.model, a.backend, lines)
        cli_times.append(t)
        t0 = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        py_times.append(time.perf_counter() - t0)
        assert sum(len(o.outputs[0].token_ids) for o in outs) == toks == a.n * a.max_tokens
        print(f"round {r}: cli {cli_times[-1]:.3f} s, python {py_times[-1]:.3f} s", flush=True)
    # Load-independent: the time generate() spends outside the engine's steps (bodies, submission, the Python step
    # loop, result objects), measured by timing every step of one more run.
    timed = _TimedEngine(llm._engine)
    llm._engine = timed
    t0 = time.perf_counter()
    llm.generate(prompts, sp, use_tqdm=False)
    total = time.perf_counter() - t0
    print(f"python outside engine steps: {1e3 * (total - timed.step_s):.1f} ms of {total:.3f} s "
          f"({100 * (total - timed.step_s) / total:.2f} %, {timed.steps} step calls); of it Engine.submit (parse + "
          f"tokenize, before the CLI's wall) {1e3 * timed.submit_s:.1f} ms, the rest (bodies, step loop, results) "
          f"{1e3 * (total - timed.step_s - timed.submit_s):.1f} ms "
          f"({100 * (total - timed.step_s - timed.submit_s) / total:.2f} %)")
    # The machine may be shared: the median and the minimum (the least disturbed run) of each side.
    for name, f in (("median", statistics.median), ("min", min), ("max", max)):
        cli, py = f(cli_times), f(py_times)
        print(f"batch {a.n} x {a.max_tokens} tokens ({a.backend}): cli {name} {cli:.3f} s, python {name} {py:.3f} s, "
              f"overhead {100 * (py - cli) / cli:+.2f} %")
    per_round = sorted(100 * (p / c - 1) for p, c in zip(py_times, cli_times))
    print(f"per-round overhead ({a.backend}, {a.rounds} rounds): median {statistics.median(per_round):+.2f} %, "
          f"range {per_round[0]:+.2f} % .. {per_round[-1]:+.2f} %")


if __name__ == "__main__":
    sys.exit(main())
