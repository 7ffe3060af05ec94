#!/usr/bin/env python3
"""Python offline generate (dsinfer.LLM) against `dsinfer generate` on the same batch (bench/NOTES.md).

Both run the same requests on the same engine settings: N greedy completions of fixed length (ignore_eos). The
CLI's time is the "wall" of its summary line (the step loop, from after the requests are queued to the last
result); Python's is the whole LLM.generate() call (request bodies, submission, the step loop, result objects),
so any cost the binding adds is inside it. Runs alternate, R rounds; medians are compared.

usage: bench/python_overhead.py [--binary build/cpu/dsinfer] [--model models/dsv4-small] [-n 32] [--max-tokens 64]
       [--rounds 3]
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


def cli_wall(binary, model, lines):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        p = subprocess.run([binary, "generate", "--model", model, "--input", inp, "--output", out],
                           capture_output=True, text=True, check=True)
        m = re.search(r"([0-9.]+) output tokens, ([0-9.]+) s wall", p.stderr)
        return float(m.group(2)), int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "cpu", "dsinfer"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "dsv4-small"))
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
    llm = dsinfer.LLM(a.model)
    llm.generate(prompts[:2], sp, use_tqdm=False)  # warm-up
    cli_times, py_times = [], []
    for r in range(a.rounds):
        t, toks = cli_wall(a.binary, a.model, lines)
        cli_times.append(t)
        t0 = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        py_times.append(time.perf_counter() - t0)
        assert sum(len(o.outputs[0].token_ids) for o in outs) == toks == a.n * a.max_tokens
        print(f"round {r}: cli {cli_times[-1]:.3f} s, python {py_times[-1]:.3f} s", flush=True)
    cli, py = statistics.median(cli_times), statistics.median(py_times)
    print(f"batch {a.n} x {a.max_tokens} tokens: cli median {cli:.3f} s, python median {py:.3f} s, "
          f"overhead {100 * (py - cli) / cli:+.2f} %")


if __name__ == "__main__":
    sys.exit(main())
