#!/usr/bin/env python3
"""Slowloris against `dsinfer serve`: 200 connections that send their request header one byte at a time, plus 40
real requests. Every real request must be answered within 2x its unloaded latency (measured first, request by
request, on the same server). The slow connections are counted by how they end (408 from the request deadline,
closed, still open).

usage: slowloris_bench.py --binary build/cpu/dsinfer [--model models/dsv4-small] [--slow 200] [--real 40]
                          [--byte-every 1.0] [--request-timeout 10] [--max-tokens 16] [--repeat 3]
Each real request is sent --repeat times in a row in each phase and its latency is the fastest of them (on a shared
machine one send can be slowed by anything; the fastest is the service time); every send's status must be 200.
Prints one line per real request and a summary; exit 1 when a real request took more than 2x its unloaded time.
"""
import argparse
import json
import os
import re
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(binary, model, request_timeout, log_path):
    log = open(log_path, "wb")
    cmd = [binary, "serve", "--model", model, "--port", "0", "--max-model-len", "1024",
           "--request-timeout", str(request_timeout)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    end = time.time() + 120
    while time.time() < end:
        with open(log_path, "rb") as f:
            m = re.search(rb"listening on http://[^\s]*:(\d+)", f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit("the server did not start: " + open(log_path, "rb").read().decode(errors="replace")[-2000:])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def real_request(port, i, max_tokens):
    body = json.dumps({"prompt": f"def function_{i}(x):\n", "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
        status = r.status
    return time.perf_counter() - t0, status


class Slowloris(threading.Thread):
    """n connections, each sending its header one byte per `every` seconds, from one thread with a selector."""

    def __init__(self, port, n, every):
        super().__init__(daemon=True)
        self.port, self.n, self.every = port, n, every
        self.stop_flag = threading.Event()
        self.ended = {"408": 0, "other_status": 0, "closed": 0}
        self.opened = 0

    def run(self):
        header = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"X-Padding: " + b"p" * 4000 + b"\r\n")
        socks = {}
        sel = selectors.DefaultSelector()
        for _ in range(self.n):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                continue
            s.setblocking(False)
            socks[s] = 0
            sel.register(s, selectors.EVENT_READ)
            self.opened += 1
        next_send = time.time()
        while not self.stop_flag.is_set() and socks:
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 408") or data.startswith(b"HTTP/1.0 408"):
                    self.ended["408"] += 1
                elif data:
                    self.ended["other_status"] += 1
                else:
                    self.ended["closed"] += 1
                sel.unregister(s)
                s.close()
                del socks[s]
            if time.time() >= next_send:
                next_send += self.every
                for s in list(socks):
                    pos = socks[s]
                    if pos < len(header):
                        try:
                            s.send(header[pos:pos + 1])
                            socks[s] = pos + 1
                        except OSError:
                            pass
        self.still_open = len(socks)
        for s in socks:
            s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "dsv4-small"))
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--real", type=int, default=40)
    ap.add_argument("--byte-every", type=float, default=1.0)
    ap.add_argument("--request-timeout", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    log_path = "/tmp/slowloris_serve.log"
    proc, port = start_server(os.path.abspath(args.binary), os.path.abspath(args.model), args.request_timeout, log_path)
    try:
        real_request(port, -1, args.max_tokens)  # warm-up
        def timed(i):
            runs = [real_request(port, i, args.max_tokens) for _ in range(args.repeat)]
            return min(r[0] for r in runs), max(r[0] for r in runs), [r[1] for r in runs]

        unloaded, unloaded_max = [], []
        for i in range(args.real):
            fastest, slowest, _ = timed(i)
            unloaded.append(fastest)
            unloaded_max.append(slowest)
        attack = Slowloris(port, args.slow, args.byte_every)
        attack.start()
        time.sleep(1.0)  # all slow connections open and trickling
        cpu0 = cpu_seconds(proc.pid)
        time.sleep(2.0)  # the slowloris alone: what it costs the server
        attack_cpu = cpu_seconds(proc.pid) - cpu0
        loaded, loaded_max, statuses = [], [], []
        for i in range(args.real):
            fastest, slowest, sts = timed(i)
            loaded.append(fastest)
            loaded_max.append(slowest)
            statuses += sts
        # Let the request deadline catch the slow senders.
        time.sleep(max(0.0, args.request_timeout + 3 - 3.0 - args.repeat * sum(loaded)))
        attack.stop_flag.set()
        attack.join()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    worst = 0.0
    for i, (u, l) in enumerate(zip(unloaded, loaded)):
        worst = max(worst, l / u)
        print(f"request {i:2d}: unloaded {u * 1000:7.1f} ms (slowest {unloaded_max[i] * 1000:7.1f}), under slowloris "
              f"{l * 1000:7.1f} ms (slowest {loaded_max[i] * 1000:7.1f}), ratio {l / u:5.2f}")
    print(f"slowloris: {attack.opened} slow connections (one header byte per {args.byte_every} s), "
          f"{args.real} real requests (fastest of {args.repeat}; {len(statuses)} sends, "
          f"{sum(s == 200 for s in statuses)} answered 200): unloaded median {statistics.median(unloaded) * 1000:.1f} ms, "
          f"loaded median {statistics.median(loaded) * 1000:.1f} ms, worst ratio {worst:.2f} (limit 2.00), "
          f"worst loaded / unloaded median {max(loaded) / statistics.median(unloaded):.2f}; "
          f"server CPU during 2 s of slowloris alone {attack_cpu:.3f} s; "
          f"slow connections ended: 408 {attack.ended['408']}, other {attack.ended['other_status']}, "
          f"closed {attack.ended['closed']}, still open {attack.still_open}")
    return 0 if worst <= 2.0 and all(s == 200 for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
