#!/usr/bin/env python3
"""A fleet of `dsinfer serve` replicas behind vllm-router (or SGLang's gateway, `--router .../smg`) on 127.0.0.1
(docs/fleet.md).

Starts R CPU replicas of a model (prefix caching on, each on an ephemeral port) and vllm-router in front of them,
sends N chat requests that share K system prompts from C client threads, and reports per phase:
  - answered (HTTP 200 with a choice), clean errors (an HTTP error status), hangs (no answer within the client
    timeout: must be 0) and transport errors;
  - the prefix-cache hit rate over the replicas (hit tokens / queried tokens, from their /metrics);
  - p50 / p99 end-to-end latency of the answered requests.
Phases (each on fresh replicas, so every phase starts with cold caches):
  round_robin   router --policy round_robin
  cache_aware   router --policy cache_aware
  kill          cache_aware; one replica is SIGKILLed once a third of the requests are answered: its requests in
                flight must fail cleanly or be retried by the router, none may hang
  drain         cache_aware; one replica gets SIGTERM at the same point: it drains (new requests 503 -> the router
                retries them elsewhere, its requests in flight finish), so every request must be answered
Every wait has a deadline; no sleep is used to synchronize (readiness is polled).

  python3 tools/fleet_bench.py --dsinfer build/cpu/dsinfer --router .venv-router/bin/vllm-router --requests 500
Exit status: 0 when every check held, 1 when one failed, 77 when the router binary is missing (skip).
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def http(method, url, body=None, timeout=10.0):
    """(status, parsed JSON or text); status 0 with the error text when no HTTP answer came."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        status = e.code
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return 0, f"{type(e).__name__}: {e}"
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def poll(what, fn, deadline_s):
    """Calls fn() until it returns a true value or the deadline passes (then raises, naming `what`)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        threading.Event().wait(0.1)  # a polling interval, not a synchronization
    raise RuntimeError(f"timed out after {deadline_s:.0f} s waiting for {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_sglang(router):
    """SGLang's gateway (smg / sglang-router / amg): it takes the same flags after `launch`, logs at "warn", and
    reads /get_load as a list of DP ranks (serve --get-load-format sglang)."""
    return os.path.basename(router) in ("smg", "sglang-router", "amg")


class Replica:
    def __init__(self, args, index, log_dir):
        self.log_path = os.path.join(log_dir, f"replica{index}.log")
        self.log = open(self.log_path, "w")
        cmd = [args.dsinfer, "serve", "--model", args.model, "--port", "0", "--enable-prefix-caching",
               "--prefix-snapshot-memory-gb", str(args.snapshot_gb), "--max-model-len", str(args.max_model_len),
               "--drain-timeout", "60", "--drain-grace", "2",  # grace > the router's 1 s health interval
               "--get-load-format", "sglang" if is_sglang(args.router) else "vllm"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, start_new_session=True)
        self.port = None

    def wait_listening(self, deadline_s):
        def port():
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica exited with {self.proc.returncode}; see {self.log_path}")
            with open(self.log_path) as f:
                m = re.search(r"listening on http://[^:]+:(\d+)", f.read())
            return int(m.group(1)) if m else None
        self.port = poll(f"{self.log_path} to listen", port, deadline_s)
        poll("replica /health", lambda: http("GET", self.url() + "/health", timeout=2)[0] == 200, deadline_s)

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def prefix_counters(self):
        status, text = http("GET", self.url() + "/metrics", timeout=5)
        if status != 200:
            return None
        out = {}
        for line in text.splitlines():
            for key in ("dsinfer_prefix_cache_hit_tokens_total", "dsinfer_prefix_cache_queried_tokens_total"):
                if line.startswith(key + " "):
                    out[key] = float(line.split()[1])
        return out

    def stop(self, sig=signal.SIGTERM, deadline_s=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(deadline_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class RouterProcess:
    """A router binary on a free loopback port, its output in log_path; ready when GET ready_path answers 200."""

    def __init__(self, cmd, log_path, ready_path):
        self.log_path = log_path
        self.ready_path = ready_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, start_new_session=True)

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, deadline_s):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"router exited with {self.proc.returncode}; see {self.log_path}")
            return http("GET", self.url() + self.ready_path, timeout=2)[0] == 200
        poll(f"the router to serve {self.ready_path}", ready, deadline_s)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class Router(RouterProcess):
    def __init__(self, args, policy, workers, log_dir):
        self.port = free_port()
        sglang = is_sglang(args.router)
        cmd = [args.router, *(["launch"] if sglang else []), "--host", "127.0.0.1", "--port", str(self.port),
               "--policy", policy,
               "--worker-urls", *[w.url() for w in workers],
               "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
               "--health-failure-threshold", "1", "--request-timeout-secs", str(int(args.client_timeout)),
               # A retry re-runs the policy, and cache_aware picks the same worker again: one failure (the 503 of a
               # draining replica, a refused connection) must open that worker's circuit so the retry goes
               # elsewhere before the next health check marks it down (docs/fleet.md).
               "--cb-failure-threshold", "1",
               "--retry-max-retries", "3", "--retry-initial-backoff-ms", "50",
               "--log-level", "warn" if sglang else "warning",
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        super().__init__(cmd, os.path.join(log_dir, f"router_{policy}.log"), "/v1/models")


def system_prompts(k, sentences):
    topics = ["billing", "shipping", "returns", "warranty", "accounts", "security", "travel", "cooking",
              "gardening", "music", "physics", "history", "chess", "hiking", "painting", "finance"]
    out = []
    for i in range(k):
        t = topics[i % len(topics)]
        body = " ".join(f"Rule {j} of the {t} desk (edition {i}): answer in one short sentence about {t}."
                        for j in range(sentences))
        out.append(f"You are assistant number {i} of the {t} desk. {body}")
    return out


def requests_for(n, prompts):
    users = ["hello", "what can you do", "summarize your rules", "give me one tip", "who are you", "thanks",
             "what is rule 3", "help me please"]
    # Interleaved, so that every system prompt recurs throughout the run.
    return [(i % len(prompts), f"{users[(i // len(prompts)) % len(users)]} (request {i})") for i in range(n)]


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run_phase(args, name, policy, fault, log_dir):
    phase_dir = os.path.join(log_dir, name)
    os.makedirs(phase_dir, exist_ok=True)
    replicas = [Replica(args, i, phase_dir) for i in range(args.replicas)]
    router = None
    try:
        for r in replicas:
            r.wait_listening(args.start_deadline)
        router = Router(args, policy, replicas, phase_dir)
        router.wait_ready(args.start_deadline)
        prompts = system_prompts(args.system_prompts, args.prompt_sentences)
        work = requests_for(args.requests, prompts)
        results = [None] * len(work)
        answered = [0]
        lock = threading.Lock()
        fault_at = len(work) // 3 if fault else None
        fault_fired = threading.Event()
        victim = replicas[-1]
        victim_counters = {}

        def one(i):
            sp, user = work[i]
            body = {"model": os.path.basename(args.model.rstrip("/")), "max_tokens": args.max_tokens,
                    "temperature": 0, "messages": [{"role": "system", "content": prompts[sp]},
                                                   {"role": "user", "content": user}]}
            t0 = time.monotonic()
            status, out = http("POST", router.url() + "/v1/chat/completions", body, timeout=args.client_timeout)
            dt = time.monotonic() - t0
            ok = status == 200 and isinstance(out, dict) and bool(out.get("choices"))
            if status == 0:
                kind = "hang" if "timed out" in str(out).lower() else "transport_error"
            else:
                kind = "answered" if ok else "clean_error"
            results[i] = {"kind": kind, "status": status, "latency_s": dt,
                          "detail": None if ok else str(out)[:200]}
            with lock:
                answered[0] += ok
                fire = fault_at is not None and answered[0] >= fault_at and not fault_fired.is_set()
                if fire:
                    fault_fired.set()
            if fire:
                c = victim.prefix_counters()  # its cache counters die with it
                if c:
                    victim_counters.update(c)
                victim.proc.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGTERM)

        t_start = time.monotonic()
        pool = ThreadPoolExecutor(args.concurrency)
        try:
            list(pool.map(one, range(len(work))))
        finally:  # on an exception (SIGTERM): requests not yet sent are dropped, the `finally` below stops the fleet
            pool.shutdown(wait=False, cancel_futures=True)
        wall = time.monotonic() - t_start
        hit = queried = 0.0
        for r in replicas:
            c = r.prefix_counters() or (victim_counters if r is victim else {})
            hit += c.get("dsinfer_prefix_cache_hit_tokens_total", 0)
            queried += c.get("dsinfer_prefix_cache_queried_tokens_total", 0)
        lat = [x["latency_s"] for x in results if x["kind"] == "answered"]
        counts = {k: sum(1 for x in results if x["kind"] == k)
                  for k in ("answered", "clean_error", "transport_error", "hang")}
        victim_exit = None
        if fault:
            try:
                victim_exit = victim.proc.wait(args.start_deadline)
            except subprocess.TimeoutExpired:
                victim_exit = "still running"
        return {"phase": name, "policy": policy, "fault": fault, "requests": len(work), **counts,
                "errors": sorted({x["detail"] for x in results if x["detail"]})[:5],
                "prefix_hit_rate": hit / queried if queried else None, "hit_tokens": hit, "queried_tokens": queried,
                "p50_s": percentile(lat, 0.5), "p99_s": percentile(lat, 0.99), "wall_s": wall,
                "victim_exit": victim_exit}
    finally:
        if router:
            router.stop()
        for r in replicas:
            r.stop()


def checks(res, args):
    """The phase's failed checks (empty: all held)."""
    bad = []
    if res["hang"]:
        bad.append(f"{res['hang']} request(s) hung")
    if res["transport_error"]:
        bad.append(f"{res['transport_error']} request(s) got no HTTP answer from the router")
    if res["fault"] in (None, "drain") and res["answered"] != res["requests"]:
        bad.append(f"{res['requests'] - res['answered']} request(s) not answered: {res['errors']}")
    # Killed: the requests it held (and any the router sends it before its health check notices) may fail, each
    # with an HTTP error; the fleet keeps serving the rest.
    if res["fault"] == "kill" and res["answered"] < res["requests"] // 3:
        bad.append(f"only {res['answered']} of {res['requests']} answered after one replica of several was killed")
    if res["fault"] == "drain" and res["victim_exit"] != 0:
        bad.append(f"the drained replica exited with {res['victim_exit']} (want 0)")
    # Hits are certain only when every (system prompt, replica) pair recurs (pigeonhole, with room for overlap).
    enough = res["requests"] >= 3 * args.replicas * args.system_prompts
    if res["policy"] == "cache_aware" and enough and not res["hit_tokens"]:
        bad.append("no prefix-cache hits behind the cache-aware router")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsinfer", default=os.path.join(ROOT, "build/cpu/dsinfer"))
    ap.add_argument("--router", default=os.path.join(ROOT, ".venv-router/bin/vllm-router"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/dsv4-small"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--system-prompts", type=int, default=16)
    ap.add_argument("--prompt-sentences", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=1024)
    # Exact prefix hits need a slot snapshot; one is taken at every block boundary of a prompt (~30 of ~130 KB for
    # a 475-token prompt on dsv4-small). The default pool (a quarter of the state memory, 6.5 MB here) holds fewer
    # than two prompts; 0.03 GB holds about eight: a third to a half of the 16 prompts, as a fleet's cache would.
    ap.add_argument("--snapshot-gb", type=float, default=0.03, help="--prefix-snapshot-memory-gb of each replica")
    ap.add_argument("--phases", default="round_robin,cache_aware,kill,drain")
    ap.add_argument("--client-timeout", type=float, default=120.0, help="a request without an answer by then hung")
    ap.add_argument("--start-deadline", type=float, default=60.0)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    # SIGTERM / SIGINT end the run through the phases' `finally`, which stops the replicas and the router.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not (os.path.isfile(args.router) and os.access(args.router, os.X_OK)):
        print(f"fleet_bench: SKIPPED: router binary {args.router} not found (pip install vllm-router)")
        return 77
    log_dir = args.log_dir or os.path.join(ROOT, "build", "fleet-logs")
    os.makedirs(log_dir, exist_ok=True)
    phases = {"round_robin": ("round_robin", None), "cache_aware": ("cache_aware", None),
              "kill": ("cache_aware", "kill"), "drain": ("cache_aware", "drain")}
    results, failed = [], False
    for name in args.phases.split(","):
        policy, fault = phases[name]
        res = run_phase(args, name, policy, fault, log_dir)
        bad = checks(res, args)
        res["failed_checks"] = bad
        failed |= bool(bad)
        results.append(res)
        rate = "n/a" if res["prefix_hit_rate"] is None else f"{res['prefix_hit_rate']:.3f}"
        p50 = "n/a" if res["p50_s"] is None else f"{res['p50_s']:.3f}"
        p99 = "n/a" if res["p99_s"] is None else f"{res['p99_s']:.3f}"
        print(f"{name:12s} policy={policy:11s} answered={res['answered']}/{res['requests']} "
              f"clean_errors={res['clean_error']} transport={res['transport_error']} hangs={res['hang']} "
              f"hit_rate={rate} p50={p50}s p99={p99}s wall={res['wall_s']:.1f}s"
              + (f" victim_exit={res['victim_exit']}" if res["fault"] else "")
              + ("" if not bad else f"  FAILED: {'; '.join(bad)}"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("fleet_bench: " + ("FAILED" if failed else "all checks held") + f" (logs under {log_dir})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
