#!/usr/bin/env python3
"""The include stack of src/ (docs/architecture.md "Layout"): every folder has a layer, from LAYERS below (bottom
first), and an #include may only point to the same layer or down. Exit 1 listing every include that points up (a
back-arrow), every include cycle between folders (folders of one layer may include each other, but not both ways),
every banned include and every folder with no layer.

  check_includes.py [SRC]              check SRC (default: the src/ next to this script)
  check_includes.py --self-test [SRC]  plant a back-arrow and a cycle in temporary copies of SRC; exit 0 when the
                                       check fails on each, naming the planted include
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Bottom first. A file belongs to the longest entry that is a prefix of its folder (relative to src/), so
# "backends/cuda/runner" sits above "backends/cuda/step" although both are under backends/.
LAYERS = [
    "core",                       # Status, dtypes, small float codecs
    "cuda",                       # CUDA helpers: errors -> Status, device buffers
    "io",                         # safetensors, config.json
    "ops",                        # one op per folder (the folders of ops/ are one layer)
    "sampling",                   # sampling params, reference sampler, rows for the device sampler
    "tokenizer",
    "chat",                       # chat protocol and prompt encodings
    "cache",                      # state layout, block allocator, prefix cache
    "model",                      # tensor table, weights, CPU reference forward
    "parallel",                   # multi-GPU plumbing
    "scheduler",                  # BatchPlan, StepOutput, the Scheduler
    "structured",                 # structured outputs
    "speculative",                # drafters and the speculator
    "runner",                     # the ModelRunner contract
    "backends/cpu",
    "backends/cuda/weights",      # device weights in their storage formats, dummy weights
    "backends/cuda/step",         # step plan upload, decode graphs, op timer
    "backends/cuda/speculative",  # the GPU drafters
    "backends/cuda/runner",       # CudaRunner, CudaRunnerV41
    "backends/cuda/parallel",     # ParallelRunner, EPLB
    "perf",                       # cost model, bench
    "check",                      # reference and fidelity checks
    "engine",                     # the step loop and the runner factory (the one place naming the backends)
    "api",                        # the public API's implementation
    "server",                     # the HTTP server
]

# Includes a folder must not use although the layers would allow them: (folder prefix, included path).
BANNED = [
    ("speculative", "dsinfer/engine.h"),  # the speculative settings come down as plain data, not the public API
]

EXTS = {".h", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def layer_of(folder):
    best = None
    for i, name in enumerate(LAYERS):
        if folder == name or folder.startswith(name + "/"):
            if best is None or len(name) > len(LAYERS[best]):
                best = i
    return best


def scan(root):
    """(edges, problems): edges[(from folder, to folder)] = first 'file:line: #include' that makes it."""
    edges, problems, seen_unlayered = {}, [], set()
    for p in sorted(root.rglob("*")):
        if p.suffix not in EXTS or not p.is_file():
            continue
        folder = p.parent.relative_to(root).as_posix()
        src_layer = layer_of(folder)
        if src_layer is None:
            if folder not in seen_unlayered:
                seen_unlayered.add(folder)
                problems.append(f"{root / folder}: folder has no layer (add it to LAYERS in {Path(__file__).name})")
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            where = f"{p}:{line}: #include \"{inc}\""
            for prefix, banned in BANNED:
                if inc == banned and (folder == prefix or folder.startswith(prefix + "/")):
                    problems.append(f"{where}: {prefix}/ must not include {banned}")
            target = root / inc if (root / inc).is_file() else p.parent / inc
            if not target.is_file():
                continue  # a system, third-party or public (include/dsinfer) header
            to_folder = target.resolve().parent.relative_to(root.resolve()).as_posix()
            if to_folder == folder:
                continue
            to_layer = layer_of(to_folder)
            if to_layer is not None and to_layer > src_layer:
                problems.append(f"{where}: back-arrow, {folder} (layer {src_layer}) includes {to_folder} "
                                f"(layer {to_layer})")
            edges.setdefault((folder, to_folder), where)
    return edges, problems


def cycles(edges):
    """Strongly connected components of the folder graph with more than one folder (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(root):
    edges, problems = scan(root)
    for comp in cycles(edges):
        inside = [w for (a, b), w in sorted(edges.items()) if a in comp and b in comp]
        problems.append(f"include cycle between folders {', '.join(comp)}:\n    " + "\n    ".join(inside))
    for p in problems:
        print(p)
    print(f"check_includes: {len(problems)} problem(s) in {root}")
    return 1 if problems else 0


def self_test(root):
    """Plants a back-arrow, then a cycle between two folders of one layer, each in a fresh copy of src/; the check
    must fail on each and name the planted include."""
    plants = [
        # core is the bottom layer: any include of the engine from it points up.
        ("core/status.h", '#include "engine/engine.h"', "back-arrow"),
        # ops/ is one layer, so ops/rope -> ops/rmsnorm is allowed; both ways is a cycle.
        ("ops/rmsnorm/rmsnorm.h", '#include "ops/rope/rope.h"', "include cycle"),
        ("speculative/drafter.h", '#include "dsinfer/engine.h"', "must not include"),
    ]
    failures = 0
    for rel, line, expect in plants:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "src"
            shutil.copytree(root, copy)
            target = copy / rel
            if expect == "include cycle":
                # The other direction of the cycle, so that it exists whatever the tree holds today.
                other = copy / "ops/rope/rope.h"
                other.write_text('#include "ops/rmsnorm/rmsnorm.h"\n' + other.read_text())
            target.write_text(line + "\n" + target.read_text())
            r = subprocess.run([sys.executable, __file__, str(copy)], capture_output=True, text=True)
            if expect == "include cycle":
                named = expect in r.stdout and str(copy / rel) in r.stdout
            else:
                named = any(expect in l and str(copy / rel) in l for l in r.stdout.splitlines())
            ok = r.returncode == 1 and named
            print(f"{'ok' if ok else 'FAILED'}: planted {line!r} in {rel}: exit {r.returncode}, "
                  f"{'reported' if named else 'not reported'} as {expect}")
            if not ok:
                print(r.stdout)
                failures += 1
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    selftest = bool(args) and args[0] == "--self-test"
    if selftest:
        args = args[1:]
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent / "src")
    if not root.is_dir():
        print(f"check_includes: {root} is not a folder")
        return 2
    return self_test(root) if selftest else check(root)


if __name__ == "__main__":
    sys.exit(main())
