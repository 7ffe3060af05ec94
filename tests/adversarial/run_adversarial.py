#!/usr/bin/env python3
"""The adversarial suite: hostile inputs to `dsinfer generate`, `serve`, model directories and the CLI, each
answered with the right result or a clear error, never a wrong answer, a hang or a crash.

usage: run_adversarial.py --binary build/cpu/dsinfer --model models/dsv4-small [--only NAME] [--timeout S]

Every module tests/adversarial/cases_*.py (sorted by name) has run(ctx) -> [(case, outcome, detail)], outcome one
of "ok" (the right answer), "clean_error" (a clear error naming the problem, as intended), "wrong" (a wrong or
format-violating answer, or an unclear error), "hang" (past its per-case timeout), "crash" (signal, sanitizer
report, server died). A module that raises counts as one crash, with the traceback.

ctx = {"binary", "model" (absolute paths), "tmp" (a fresh folder per module), "server" (one shared
`dsinfer serve` on 127.0.0.1, started here: .url, .alive())}. --only NAME runs the modules whose name (without
"cases_") or file name contains NAME. Ends with the counts; exit 1 when wrong + hangs + crashes > 0.
"""
import argparse
import glob
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

OUTCOMES = ("ok", "clean_error", "wrong", "hang", "crash")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the case modules share advlib.py


class Server:
    """One `dsinfer serve` on a free port (--port 0: the port is read from its "listening on" line); its output
    goes to a log file in the run's temp folder."""

    def __init__(self, binary, model, tmp, extra_args=(), preexec_fn=None):
        self.port = 0
        self.url = ""
        self.log_path = os.path.join(tmp, f"serve-{len(os.listdir(tmp))}.log")
        self.log = open(self.log_path, "wb")
        cmd = [binary, "serve", "--model", model, "--port", "0", "--max-model-len", "1024", *extra_args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            if not self.alive():
                return False
            if not self.port:
                m = re.search(r"listening on http://[^\s]*:(\d+)", self.tail(100000))
                if not m:
                    time.sleep(0.1)
                    continue
                self.port = int(m.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.2)
        return False

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


def load_modules(only):
    mods = []
    for path in sorted(glob.glob(os.path.join(HERE, "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if only and only not in name:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        mods.append((name, mod, spec))
    return mods


def run_module(name, mod, spec, ctx):
    try:
        spec.loader.exec_module(mod)
        results = list(mod.run(ctx))
    except Exception:  # noqa: BLE001 - a module that raises is one crash
        return [(name, "crash", traceback.format_exc())]
    out = []
    for r in results:
        case, outcome, detail = r
        if outcome not in OUTCOMES:
            out.append((f"{name}:{case}", "wrong", f"unknown outcome {outcome!r}: {detail}"))
        else:
            out.append((f"{name}:{case}", outcome, detail))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    model = os.path.abspath(args.model)
    start = time.time()
    root = tempfile.mkdtemp(prefix="dsinfer-adversarial-")
    server = Server(binary, model, root)
    counts = {o: 0 for o in OUTCOMES}
    rows = []
    try:
        if not server.wait_ready():
            print(f"adversarial: the server did not start:\n{server.tail()}")
            return 1
        for name, mod, spec in load_modules(args.only):
            tmp = os.path.join(root, name)
            os.makedirs(tmp)
            ctx = {"binary": binary, "model": model, "tmp": tmp, "server": server}
            t0 = time.time()
            results = run_module(name, mod, spec, ctx)
            if not server.alive():
                results.append((f"{name}:server", "crash", "the shared server died:\n" + server.tail()))
            for case, outcome, detail in results:
                counts[outcome] += 1
                rows.append((case, outcome, detail))
                line = f"{outcome:12s} {case}"
                if outcome not in ("ok", "clean_error") or os.environ.get("ADVERSARIAL_VERBOSE"):
                    line += "\n    " + str(detail).replace("\n", "\n    ")[:4000]
                elif detail:
                    line += f"  ({str(detail).splitlines()[0][:150]})"
                print(line, flush=True)
            print(f"-- {name}: {len(results)} inputs in {time.time() - t0:.1f} s", flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    total = sum(counts.values())
    print(f"adversarial: {total} inputs, ok {counts['ok']}, clean errors {counts['clean_error']}, "
          f"wrong {counts['wrong']}, hangs {counts['hang']}, crashes {counts['crash']} "
          f"({time.time() - start:.0f} s)")
    return 1 if counts["wrong"] + counts["hang"] + counts["crash"] > 0 or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
