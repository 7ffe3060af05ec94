#!/usr/bin/env python3
"""Reads a kernel_trace.cpp CSV and prints the timeline of one CUDA graph replay: every kernel with its start
offset, duration, the gap or overlap against the end of the kernels before it, and a table of time by kernel name.

usage: timeline.py TRACE.csv [--graph ID] [--replay K]   (default: the graph with the most kernel records, its
       last complete replay; K counts from 0, negative from the end)
       timeline.py TRACE.csv --eager [--per N]   (the kernels launched outside graphs, e.g. prefill steps: time by
       kernel name summed over the whole trace, divided by N, the number of steps it ran)
       timeline.py TRACE.csv --gaps [--min-us U]   (the device's idle gaps of at least U us, no kernel on any stream:
       their count and spread, and with TRACE.csv.api.csv (DSINFER_KERNEL_TRACE_API=1) the host's runtime calls inside
       the gaps: time by call name, and one median gap's calls in order)
Names are demangled with c++filt when it is on the PATH; templates and namespaces are shortened.
"""
import argparse
import bisect
import collections
import csv
import re
import shutil
import subprocess
import sys


def demangle(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, out))


def short(name):
    name = re.sub(r"\(anonymous namespace\)::|dsinfer::|ops::|cuda::|detail::|^void ", "", name)
    name = re.sub(r"\(.*$", "", name)               # arguments
    return name[:70]


def eager_summary(rows, per):
    """Kernels outside graphs run one after another on their streams: a kernel's duration is its own cost."""
    names = demangle(sorted({r["name"] for r in rows}))
    by_name = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        n = short(names[r["name"]])
        by_name[n][0] += int(r["end_ns"]) - int(r["start_ns"])
        by_name[n][1] += 1
    total = sum(t for t, _ in by_name.values())
    print(f"{len(rows)} eager kernel records, {total / 1e6 / per:.3f} ms of kernel time per step (/ {per:g}); "
          "time by kernel (us per step, launches per step):")
    for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / 1e3 / per:10.1f} {c / per:7.1f}  {n}")


def gap_summary(rows, api_path, min_us):
    """Idle intervals of the whole device between kernels, and the runtime calls the host made inside them."""
    ks = sorted((int(r["start_ns"]), int(r["end_ns"])) for r in rows)
    gaps, busy_end = [], ks[0][1]
    for s, e in ks[1:]:
        if s - busy_end >= min_us * 1e3:
            gaps.append((busy_end, s))
        busy_end = max(busy_end, e)
    if not gaps:
        sys.exit(f"no idle gap of {min_us} us or more")
    lens = sorted((e - s) / 1e3 for s, e in gaps)
    span = (max(e for _, e in ks) - ks[0][0]) / 1e6
    print(f"{len(gaps)} idle gaps >= {min_us} us in {span:.1f} ms of trace: {sum(lens) / 1e3:.2f} ms idle; gap us "
          f"p10 {lens[len(lens) // 10]:.1f}, median {lens[len(lens) // 2]:.1f}, p90 {lens[9 * len(lens) // 10]:.1f}")
    try:
        calls = sorted((int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in csv.DictReader(open(api_path)))
    except FileNotFoundError:
        print(f"({api_path} not found: no host calls)")
        return
    starts = [c[0] for c in calls]
    by_name = collections.defaultdict(lambda: [0, 0])
    for gs, ge in gaps:
        for c in calls[max(bisect.bisect_left(starts, gs) - 1, 0):bisect.bisect_right(starts, ge)]:
            inside = min(c[1], ge) - max(c[0], gs)
            if inside > 0:
                n = re.sub(r" \d+ B$", "", c[2])  # copies grouped by kind
                by_name[n][0] += inside
                by_name[n][1] += 1
    print("runtime calls and device copies inside the gaps (us per gap, calls per gap):")
    for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / 1e3 / len(gaps):9.1f} {c / len(gaps):6.2f}  {n}")
    gs, ge = sorted(gaps, key=lambda g: g[1] - g[0])[len(gaps) // 2]
    print(f"a median gap ({(ge - gs) / 1e3:.1f} us): calls from 20 us before it to its end (offset from the gap's "
          "start, duration, us):")
    for c in calls[max(bisect.bisect_left(starts, gs - 20000), 0):bisect.bisect_right(starts, ge)]:
        print(f"{(c[0] - gs) / 1e3:9.1f} {(c[1] - c[0]) / 1e3:7.1f}  {c[2]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int, default=None)
    ap.add_argument("--replay", type=int, default=-1)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--per", type=float, default=1.0)
    ap.add_argument("--gaps", action="store_true")
    ap.add_argument("--min-us", type=float, default=20.0)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.trace)))
    if a.gaps:
        gap_summary(rows, a.trace + ".api.csv", a.min_us)
        return
    if a.eager:
        eager_summary([r for r in rows if int(r["graph"]) == 0], a.per)
        return
    by_graph = collections.defaultdict(list)
    for r in rows:
        if int(r["graph"]) != 0:
            by_graph[int(r["graph"])].append(r)
    if not by_graph:
        sys.exit("no kernels launched from CUDA graphs in the trace")
    gid = a.graph if a.graph is not None else max(by_graph, key=lambda g: len(by_graph[g]))
    ks = sorted(by_graph[gid], key=lambda r: int(r["start_ns"]))
    nodes = len({r["graph_node"] for r in ks})
    replays = [ks[i:i + nodes] for i in range(0, len(ks) - nodes + 1, nodes)]
    print(f"graph {gid}: {len(ks)} kernel records, {nodes} kernel nodes, {len(replays)} replays; "
          f"other graphs: {sorted((g, len(v)) for g, v in by_graph.items() if g != gid)}")
    rep = sorted(replays[a.replay], key=lambda r: int(r["start_ns"]))
    names = demangle(sorted({r["name"] for r in rep}))
    t0 = int(rep[0]["start_ns"])
    span = max(int(r["end_ns"]) for r in rep) - t0
    busy_end = t0
    idle = 0
    by_name = collections.defaultdict(lambda: [0, 0])
    print(f"replay {a.replay}: span {span / 1e3:.1f} us\n{'start us':>9} {'dur us':>7} {'gap us':>7} stream grid  name")
    for r in rep:
        s, e = int(r["start_ns"]), int(r["end_ns"])
        gap = s - busy_end  # > 0: nothing ran in between; < 0: overlap with earlier kernels
        if gap > 0:
            idle += gap
        busy_end = max(busy_end, e)
        n = short(names[r["name"]])
        by_name[n][0] += e - s
        by_name[n][1] += 1
        print(f"{(s - t0) / 1e3:9.1f} {(e - s) / 1e3:7.1f} {gap / 1e3:7.1f} {r['stream']:>6} "
              f"{r['grid_x']}x{r['grid_y']}x{r['grid_z']}  {n}")
    print(f"\nspan {span / 1e3:.1f} us, no kernel running {idle / 1e3:.1f} us; time by kernel (us, count):")
    for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / 1e3:9.1f} {c:5d}  {n}")


if __name__ == "__main__":
    main()
