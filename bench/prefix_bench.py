#!/usr/bin/env python3
"""Multi-turn chat prefix-caching benchmark through `dsinfer generate --input` (OpenAI Batch JSONL).

N conversations share one system prompt; conversation c's turn t resends the system prompt and the whole history
(user turns and fixed synthetic assistant replies, token ids) plus a new user turn. All turns go in one batch, so
turn t is admitted while earlier turns of its conversation still run: the engine's admission waits for, then
reuses, the blocks they computed. Runs the batch with caching off / exact / bounded and prints prefill tokens
saved, TTFT and wall time from the generate summary.

Host tier: a mode with a "+host" suffix (e.g. exact+host) adds --prefix-cache-host-bytes; with a small
--state-memory-gb and --order turn (every conversation's turn t before any turn t+1) the blocks of a conversation
are evicted from the state memory before its next turn, so only the host tier can bring them back.

  python3 bench/prefix_bench.py --dsinfer build/cuda/dsinfer --model models/dsv4-small --conversations 64 --turns 4 \
      --backend cuda [--batch-invariant]
"""
import argparse
import json
import os
import random
import re
import subprocess
import tempfile


def build_requests(conversations, turns, sys_len, turn_len, reply_len, max_tokens, vocab, order="conv"):
    rng = random.Random(7)
    tok = lambda n: [rng.randrange(2, vocab) for _ in range(n)]
    system = tok(sys_len)
    lines = []
    for c in range(conversations):
        history = list(system)
        for t in range(turns):
            history += tok(turn_len)  # the user's turn
            body = {"prompt": list(history), "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
            lines.append({"custom_id": f"c{c}-t{t}", "method": "POST", "url": "/v1/completions", "body": body})
            history += tok(reply_len)  # the assistant's reply, resent next turn
    if order == "turn":  # all first turns, then all second turns, ...
        lines.sort(key=lambda l: int(l["custom_id"].split("-t")[1]))
    return lines


def run(args, mode, path):
    out = path + f".{mode}.out"
    cmd = [args.dsinfer, "generate", "--model", args.model, "--backend", args.backend, "--input", path, "--output", out,
           "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs)]
    if args.state_memory_gb > 0:
        cmd += ["--state-memory-gb", str(args.state_memory_gb)]
    base = mode.split("+")[0]
    if base != "off":
        cmd += ["--enable-prefix-caching", base]
        if args.snapshot_memory_gb > 0:
            cmd += ["--prefix-snapshot-memory-gb", str(args.snapshot_memory_gb)]
    if mode.endswith("+host"):
        cmd += ["--prefix-cache-host-bytes", args.host_bytes]
    if args.batch_invariant:
        cmd += ["--batch-invariant"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    err = p.stderr
    wall = float(re.search(r"([\d.]+) s wall", err).group(1))
    ttft = re.search(r"TTFT p50/p90/p99 (\S+)", err).group(1)
    hit = re.search(r"(\d+) of (\d+) tokens hit \((\d+) exact hits, (\d+) bounded\), (\d+) replayed", err)
    host = re.search(r"host tier: (\d+) blocks \((\d+) tokens\) restored by hits, (\d+) spilled, (\d+) dropped, "
                     r"([\d.]+) MiB to host, ([\d.]+) MiB to device", err)
    return wall, ttft, hit.groups() if hit else None, host.groups() if host else None


def outputs(path):
    """custom_id -> the choices' texts of one run's output file."""
    res = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            res[r["custom_id"]] = [c.get("text") for c in ((r.get("response") or {}).get("body") or {}).get("choices", [])]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsinfer", default="build/cuda/dsinfer")
    ap.add_argument("--model", default="models/dsv4-small")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-tokens", type=int, default=300)
    ap.add_argument("--turn-tokens", type=int, default=40)
    ap.add_argument("--reply-tokens", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=3000)
    ap.add_argument("--modes", default="off,exact,bounded", help="comma-separated; a +host suffix adds the host tier")
    ap.add_argument("--order", choices=["conv", "turn"], default="conv", help="request order: by conversation or turn")
    ap.add_argument("--state-memory-gb", type=float, default=0, help="0: the engine's default")
    ap.add_argument("--snapshot-memory-gb", type=float, default=0, help="0: the engine's default")
    ap.add_argument("--host-bytes", default="4GiB", help="--prefix-cache-host-bytes of the +host modes")
    ap.add_argument("--report-only", action="store_true", help="report exact-mode output differences, do not fail")
    ap.add_argument("--batch-invariant", action="store_true",
                    help="pass --batch-invariant to every run (GPU: exact mode must then match caching off)")
    args = ap.parse_args()
    lines = build_requests(args.conversations, args.turns, args.system_tokens, args.turn_tokens, args.reply_tokens,
                           args.max_tokens, args.vocab, args.order)
    prompt_tokens = sum(len(l["body"]["prompt"]) for l in lines)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "requests.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(l) + "\n" for l in lines)
        print(f"{len(lines)} requests ({args.conversations} conversations x {args.turns} turns), {prompt_tokens} prompt tokens, "
              f"backend {args.backend}{', batch-invariant' if args.batch_invariant else ''}")
        print(f"{'mode':12} {'wall s':>8} {'TTFT p50/p90/p99 ms':>24} {'hit tokens':>11} {'saved %':>8} {'exact':>6} "
              f"{'bounded':>8} {'replayed':>9} {'host hit blk/tok':>17} {'spills':>7} {'MiB D2H/H2D':>13}")
        for mode in args.modes.split(","):
            wall, ttft, hit, host = run(args, mode, path)
            h = hit or ("0", str(prompt_tokens), "0", "0", "0")
            saved = 100.0 * int(h[0]) / max(prompt_tokens, 1)
            ht = f"{host[0]}/{host[1]}" if host else "-"
            spills = host[2] if host else "-"
            mib = f"{host[4]}/{host[5]}" if host else "-"
            print(f"{mode:12} {wall:8.2f} {ttft:>24} {h[0]:>11} {saved:8.1f} {h[2]:>6} {h[3]:>8} {h[4]:>9} {ht:>17} "
                  f"{spills:>7} {mib:>13}")
        # Exact mode must reproduce the uncached outputs (greedy requests); bounded mode is reported, not required.
        modes = args.modes.split(",")
        if "off" in modes:
            ref = outputs(path + ".off.out")
            for mode in (m for m in modes if m != "off"):
                got = outputs(path + f".{mode}.out")
                same = sum(got.get(k) == v for k, v in ref.items())
                print(f"{mode}: {same}/{len(ref)} requests with outputs identical to caching off")
                if mode.split("+")[0] == "exact" and same != len(ref) and not args.report_only:
                    # On the GPU this also happens when kernels are not batch-invariant (a hit changes the batch
                    # composition and chunk sizes, hence GEMM launch shapes and attention splits): bench/NOTES.md;
                    # with --batch-invariant it must not.
                    raise SystemExit("exact prefix caching changed outputs")


if __name__ == "__main__":
    main()
