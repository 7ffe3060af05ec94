#!/usr/bin/env python3
"""Prefill/decode disaggregation behind vllm-router on 127.0.0.1 (docs/fleet.md "P/D").

Starts one `dsinfer serve --role prefill`, one `--role decode` and vllm-router `--vllm-pd-disaggregation` in front of
them, plus one plain server (`--role both`, no prefix caching) as the reference, and sends N greedy chat requests
(K shared system prompts, a distinct user turn each). The router sends each request to the prefill worker with
max_tokens 1 and kv_transfer_params {do_remote_decode: true}, then to the decode worker with the prefill answer's
kv_transfer_params; the decode worker pulls the prompt's state (over TCP, or UCX with --kv-transfer-backend ucx)
and resumes from it. Per phase it reports:
  - answered / clean errors / hangs, and whether every answer equals the reference server's (text, finish reason,
    token counts): it must, on every request;
  - bytes per sequence: the pulled state (blob), the wire bytes (chunk framing included), and the state layout's
    prediction: blocks(P') x state_block_bytes + state_slot_bytes (+ the blob's header and token ids), from the
    decode worker's /get_server_info; P' = the whole blocks the decoder did not compute;
  - the TTFT split: prefill (the prefill worker's engine time for the prompt), transfer (the pull, then the import),
    first decode (the decode worker's engine time from submit to its first token), and the client's latency.
Phases (fresh workers each):
  pd           no fault: every request resumes from the pulled state
  truncate     the prefill worker sends only the first 4 KiB of each state (--kv-transfer-fault truncate:4096)
  corrupt      it flips one bit in each state's first chunk (corrupt:100000): the chunk's CRC-32C fails
  stall        it accepts the pull and never answers: the decoder's timeout (--kv-transfer-timeout 2) ends it
  decode_dies  the decode worker is SIGKILLed after a third of the answers: later requests must end with a clean
               HTTP error (none may hang) and the prefill worker must drop the states nobody pulls (its TTL, 3 s)
In truncate / corrupt / stall every request must still be answered, identically, by a local prefill.

  python3 tools/pd_bench.py --dsinfer build/cpu/dsinfer --router build/test-venv/bin/vllm-router --requests 32
  python3 tools/pd_bench.py --kv-transfer-backend ucx   # the same phases with the state over UCX
  python3 tools/pd_bench.py --router direct --serve-args "--backend cuda --batch-invariant" --phases pd
      (no router binary, e.g. on the GPU machine: the bench sends the router's two legs itself, as vllm-router
      --vllm-pd-disaggregation does; every server gets --serve-args)
Exit status: 0 when every check held, 1 when one failed, 77 when the router binary is missing, or UCX when asked
for cannot be loaded (skip).
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet_bench import RouterProcess, free_port, http, percentile, poll, system_prompts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOB_HEADER = 48 + 4  # cache/state_blob.h: fixed header, trailing CRC-32C (the token ids are 4 bytes each on top)


class Worker:
    def __init__(self, args, name, role, log_dir, extra=()):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "w")
        cmd = [args.dsinfer, "serve", "--model", args.model, "--port", "0", "--max-model-len", str(args.max_model_len),
               "--role", role, *shlex.split(args.serve_args), *extra]
        if role != "both":
            cmd += ["--kv-transfer-backend", args.kv_transfer_backend]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, start_new_session=True)
        self.port = None

    def wait_listening(self, deadline_s):
        def port():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            with open(self.log_path) as f:
                m = re.search(r"listening on http://[^:]+:(\d+)", f.read())
            return int(m.group(1)) if m else None
        self.port = poll(f"{self.log_path} to listen", port, deadline_s)
        poll(f"{self.name} /health", lambda: http("GET", self.url() + "/health", timeout=2)[0] == 200, deadline_s)

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        status, text = http("GET", self.url() + "/metrics", timeout=5)
        if status != 200:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self, sig=signal.SIGINT):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class PdRouter(RouterProcess):
    def __init__(self, args, prefill, decode, log_dir):
        self.port = free_port()
        cmd = [args.router, "--host", "127.0.0.1", "--port", str(self.port), "--vllm-pd-disaggregation",
               "--prefill", prefill.url(), "--decode", decode.url(), "--policy", "round_robin",
               "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
               "--request-timeout-secs", str(int(args.client_timeout)), "--log-level", "warning",
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        super().__init__(cmd, os.path.join(log_dir, "router.log"), "/health")


class DirectRouter:
    """--router direct: the two legs vllm-router --vllm-pd-disaggregation sends (read from its traffic), sent here."""

    def __init__(self, args, prefill, decode):
        self.args, self.prefill, self.decode = args, prefill, decode

    def chat(self, body):
        first = dict(body, max_tokens=1, min_tokens=1, stream=False,
                     kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                         "remote_block_ids": None, "remote_host": None, "remote_port": None})
        status, out = http("POST", self.prefill.url() + "/v1/chat/completions", first, timeout=self.args.client_timeout)
        if status != 200 or not isinstance(out, dict):
            return status, out
        second = dict(body, kv_transfer_params=out.get("kv_transfer_params"))
        return http("POST", self.decode.url() + "/v1/chat/completions", second, timeout=self.args.client_timeout)

    def stop(self):
        pass


def bodies(args):
    prompts = system_prompts(args.system_prompts, args.prompt_sentences)
    users = ["hello", "what can you do", "summarize your rules", "give me one tip"]
    model = os.path.basename(args.model.rstrip("/"))
    return [{"model": model, "max_tokens": args.max_tokens, "temperature": 0,
             "messages": [{"role": "system", "content": prompts[i % len(prompts)]},
                          {"role": "user", "content": f"{users[(i // len(prompts)) % len(users)]} (request {i})"}]}
            for i in range(args.requests)]


def answer_of(out):
    c = out["choices"][0]
    return {"content": c["message"].get("content"), "reasoning": c["message"].get("reasoning_content"),
            "finish_reason": c["finish_reason"], "completion_tokens": out["usage"]["completion_tokens"],
            "prompt_tokens": out["usage"]["prompt_tokens"]}


def reference(args, work, log_dir):
    """The plain server's answers (one request at a time), the comparison for every phase."""
    ref = Worker(args, "reference", "both", log_dir)
    try:
        ref.wait_listening(args.start_deadline)
        out = []
        for b in work:
            t0 = time.monotonic()
            status, o = http("POST", ref.url() + "/v1/chat/completions", b, timeout=args.client_timeout)
            if status != 200:
                raise RuntimeError(f"reference server: HTTP {status}: {str(o)[:200]}")
            out.append((answer_of(o), time.monotonic() - t0))
        return out
    finally:
        ref.stop()


def run_phase(args, name, work, ref, log_dir):
    phase_dir = os.path.join(log_dir, name)
    os.makedirs(phase_dir, exist_ok=True)
    fault = {"truncate": "truncate:4096", "corrupt": "corrupt:100000", "stall": "stall"}.get(name)
    prefill = Worker(args, "prefill", "prefill", phase_dir,
                     [*(["--kv-transfer-fault", fault] if fault else []), "--kv-transfer-ttl", "3"])
    decode = Worker(args, "decode", "decode", phase_dir, ["--kv-transfer-timeout", "2"])
    router = None
    try:
        prefill.wait_listening(args.start_deadline)
        decode.wait_listening(args.start_deadline)
        _, info = http("GET", decode.url() + "/get_server_info")
        if args.router == "direct":
            router = DirectRouter(args, prefill, decode)
        else:
            router = PdRouter(args, prefill, decode, phase_dir)
            router.wait_ready(args.start_deadline)
        results = [None] * len(work)
        lock = threading.Lock()
        answered = [0]
        kill_at = len(work) // 3 if name == "decode_dies" else None

        def one(i):
            t0 = time.monotonic()
            if args.router == "direct":
                status, out = router.chat(work[i])
            else:
                status, out = http("POST", router.url() + "/v1/chat/completions", work[i], timeout=args.client_timeout)
            dt = time.monotonic() - t0
            ok = status == 200 and isinstance(out, dict) and bool(out.get("choices"))
            kind = "answered" if ok else ("clean_error" if status else
                                          ("hang" if "timed out" in str(out).lower() else "transport_error"))
            results[i] = {"kind": kind, "status": status, "latency_s": dt, "pd": out.get("dsinfer_pd") if ok else None,
                          "same": ok and answer_of(out) == ref[i][0], "detail": None if ok else str(out)[:200]}
            with lock:
                answered[0] += ok
                fire = kill_at is not None and answered[0] == kill_at
            if fire:
                decode.proc.send_signal(signal.SIGKILL)

        t_start = time.monotonic()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(one, range(len(work))))
        wall = time.monotonic() - t_start
        held_after = None
        if name == "decode_dies":  # the states nobody pulled must go once their TTL passed
            held_after = poll("the prefill worker to drop unpulled states",
                              lambda: (prefill.metric("dsinfer_kv_transfer_held") == 0) and "0", args.start_deadline)
        return summarize(name, fault, results, info, ref, wall, held_after)
    finally:
        if router:
            router.stop()
        prefill.stop()
        decode.stop()


def summarize(name, fault, results, info, ref, wall, held_after):
    counts = {k: sum(1 for x in results if x["kind"] == k) for k in ("answered", "clean_error", "transport_error", "hang")}
    pds = [x["pd"] for x in results if x["pd"]]
    resumed = [p for p in pds if p.get("resumed")]
    bs, bb, sb = info["state_block_size"], info["state_block_bytes"], info["state_slot_bytes"]
    predicted = [p["state_tokens"] // bs * bb + sb + BLOB_HEADER + 4 * p["state_tokens"] for p in resumed]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {"phase": name, "fault": fault, "requests": len(results), **counts,
            "layout": {"block_size": bs, "block_bytes": bb, "slot_bytes": sb},
            "identical": sum(1 for x in results if x["same"]),
            "resumed": len(resumed), "fallbacks": sorted({p["fallback"][:90] for p in pds if p.get("fallback")})[:3],
            "errors": sorted({x["detail"] for x in results if x["detail"]})[:3],
            "state_tokens_mean": mean([p["state_tokens"] for p in resumed]),
            "state_bytes_mean": mean([p["state_bytes"] for p in resumed]),
            "predicted_bytes_mean": mean(predicted),
            "bytes_match_prediction": all(p["state_bytes"] == q for p, q in zip(resumed, predicted)),
            "wire_bytes_mean": mean([p["wire_bytes"] for p in resumed]),
            "prefill_s_p50": percentile([p["prefill_s"] for p in pds if p["prefill_s"] >= 0], 0.5),
            "transfer_s_p50": percentile([p["transfer_s"] for p in pds], 0.5),
            "import_s_p50": percentile([p["import_s"] for p in resumed], 0.5),
            "first_decode_s_p50": percentile([p["first_decode_s"] for p in pds], 0.5),
            "latency_p50_s": percentile([x["latency_s"] for x in results if x["kind"] == "answered"], 0.5),
            "reference_latency_p50_s": percentile([r[1] for r in ref], 0.5),
            "wall_s": wall, "held_after_ttl": held_after}


def checks(res):
    bad = []
    if res["hang"] or res["transport_error"]:
        bad.append(f"{res['hang']} hung, {res['transport_error']} without an HTTP answer")
    if res["phase"] != "decode_dies":
        if res["answered"] != res["requests"]:
            bad.append(f"{res['requests'] - res['answered']} not answered: {res['errors']}")
        if res["identical"] != res["answered"]:
            bad.append(f"{res['answered'] - res['identical']} answers differ from the single server's")
    if res["phase"] == "pd":
        if res["resumed"] != res["requests"]:
            bad.append(f"only {res['resumed']} of {res['requests']} resumed from the pulled state: {res['fallbacks']}")
        if not res["bytes_match_prediction"]:
            bad.append("a state's bytes differ from the state layout's prediction")
    elif res["phase"] != "decode_dies" and res["resumed"]:
        bad.append(f"{res['resumed']} resumed from a faulty transfer")
    if res["phase"] == "decode_dies":
        if res["identical"] != res["answered"]:
            bad.append("an answer differs from the single server's")
        if res["answered"] == res["requests"]:
            bad.append("every request was answered although the only decode worker was killed")
    return bad


def ucx_loadable():
    import ctypes
    try:
        ctypes.CDLL(os.environ.get("DSINFER_UCX_LIBRARY") or "libucp.so.0")
        return True
    except OSError:
        return False


def fmt(x, spec=".3f"):
    return "n/a" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsinfer", default=os.path.join(ROOT, "build/cpu/dsinfer"))
    ap.add_argument("--router", default=os.path.join(ROOT, "build/test-venv/bin/vllm-router"),
                    help="vllm-router's binary, or 'direct' (this script sends the router's two legs)")
    ap.add_argument("--serve-args", default="", help="more flags for every server (e.g. '--backend cuda')")
    ap.add_argument("--model", default=os.path.join(ROOT, "models/dsv4-small"))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--system-prompts", type=int, default=4)
    ap.add_argument("--prompt-sentences", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--phases", default="pd,truncate,corrupt,stall,decode_dies")
    ap.add_argument("--client-timeout", type=float, default=120.0, help="a request without an answer by then hung")
    ap.add_argument("--start-deadline", type=float, default=60.0)
    ap.add_argument("--kv-transfer-backend", default="tcp", choices=["tcp", "ucx"],
                    help="the P/D workers' state transport")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.router == "direct" and "decode_dies" in args.phases.split(","):
        ap.error("--router direct has no decode_dies phase (a router turns the dead worker into HTTP errors)")
    if args.router != "direct" and not (os.path.isfile(args.router) and os.access(args.router, os.X_OK)):
        print(f"pd_bench: SKIPPED: router binary {args.router} not found (pip install vllm-router)")
        return 77
    if args.kv_transfer_backend == "ucx" and not ucx_loadable():
        print("pd_bench: SKIPPED: --kv-transfer-backend ucx, but libucp.so.0 cannot be loaded (Debian: libucx0)")
        return 77
    log_dir = args.log_dir or os.path.join(ROOT, "build", "pd-logs")
    os.makedirs(log_dir, exist_ok=True)
    work = bodies(args)
    ref = reference(args, work, log_dir)
    results, failed = [], False
    for name in args.phases.split(","):
        res = run_phase(args, name, work, ref, log_dir)
        res["failed_checks"] = checks(res)
        failed |= bool(res["failed_checks"])
        results.append(res)
        print(f"{name:11s} answered={res['answered']}/{res['requests']} identical={res['identical']} "
              f"resumed={res['resumed']} clean_errors={res['clean_error']} hangs={res['hang']} "
              f"state_tokens={fmt(res['state_tokens_mean'], '.0f')} bytes={fmt(res['state_bytes_mean'], '.0f')} "
              f"predicted={fmt(res['predicted_bytes_mean'], '.0f')} wire={fmt(res['wire_bytes_mean'], '.0f')} "
              f"prefill={fmt(res['prefill_s_p50'])}s transfer={fmt(res['transfer_s_p50'])}s "
              f"import={fmt(res['import_s_p50'])}s first_decode={fmt(res['first_decode_s_p50'])}s "
              f"latency={fmt(res['latency_p50_s'])}s (single {fmt(res['reference_latency_p50_s'])}s) "
              f"wall={res['wall_s']:.1f}s" + (f" fallbacks={res['fallbacks']}" if res["fallbacks"] else "")
              + ("" if not res["failed_checks"] else f"  FAILED: {'; '.join(res['failed_checks'])}"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if results:
        print(f"state layout (decode worker's /get_server_info): {results[0]['layout']}")
    print(f"pd_bench ({args.kv_transfer_backend}): " + ("FAILED" if failed else "all checks held") +
          f" (logs under {log_dir})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
