#!/usr/bin/env python3
"""Open-loop load test of a running `dsinfer serve` (standard library only).

Requests arrive as a Poisson process at each given rate (requests/s), independent of completions (open loop),
each a streaming /v1/completions call; per request it measures TTFT (send -> first text chunk) and TPOT (mean
gap between later chunks, one token each). Prints, per rate, throughput and TTFT / TPOT / end-to-end
percentiles. Loopback only: the URL must name 127.0.0.1 or localhost.

    dsinfer serve --model models/dsv4-small --port 8123 &
    python3 bench/serve_bench.py --url http://127.0.0.1:8123 --rates 4,16,64 --requests 200
"""
import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse

PROMPTS = ["def read_config(path):\n", "import os\nimport", "class Parser:\n    def __init__(self", "# Build the project\n",
           "The :command:`add_library` command", "for i in range(", "Returns the number of", "with open(path) as f:\n"]


def one_request(host, port, body, out):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out.append({"ok": False, "status": resp.status})
        return
    times, tokens = [], 0
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            times.append(time.perf_counter())
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    t1 = time.perf_counter()
    gaps = [b - a for a, b in zip(times, times[1:])]
    out.append({"ok": bool(times), "ttft": (times[0] - t0) if times else None, "tpot": statistics.mean(gaps) if gaps else None,
                "e2e": t1 - t0, "tokens": tokens})


def pct(v, q):
    v = sorted(x for x in v if x is not None)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] * 1e3 if v else float("nan")


def run_rate(host, port, rate, n, max_tokens, rng):
    out, threads = [], []
    t_start = time.perf_counter()
    next_t = t_start
    for i in range(n):
        next_t += rng.expovariate(rate)
        time.sleep(max(0.0, next_t - time.perf_counter()))
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0.8, "seed": i,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        th = threading.Thread(target=one_request, args=(host, port, body, out))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.perf_counter() - t_start
    ok = [r for r in out if r["ok"]]
    toks = sum(r["tokens"] for r in ok)
    print(f"rate {rate:6.1f} req/s: {len(ok)}/{n} ok, {wall:6.2f} s, {len(ok) / wall:6.2f} req/s done, "
          f"{toks / wall:8.1f} output tok/s | TTFT p50/p90/p99 {pct([r['ttft'] for r in ok], .5):7.1f}/"
          f"{pct([r['ttft'] for r in ok], .9):7.1f}/{pct([r['ttft'] for r in ok], .99):7.1f} ms | TPOT p50/p90/p99 "
          f"{pct([r['tpot'] for r in ok], .5):6.2f}/{pct([r['tpot'] for r in ok], .9):6.2f}/"
          f"{pct([r['tpot'] for r in ok], .99):6.2f} ms | e2e p50 {pct([r['e2e'] for r in ok], .5):8.1f} ms", flush=True)
    return len(ok) == n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--rates", default="4,16,64", help="comma list of arrival rates, requests/s")
    ap.add_argument("--requests", type=int, default=200, help="requests per rate")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("serve_bench: loopback servers only")
    rng = random.Random(a.seed)
    ok = all([run_rate(u.hostname, u.port or 80, float(r), a.requests, a.max_tokens, rng) for r in a.rates.split(",")])
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
