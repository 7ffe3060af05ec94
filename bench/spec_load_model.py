#!/usr/bin/env python3
"""A host-side model of the speculative engine's throughput under load (issue 32; bench/NOTES.md session 49).

Replays a workload through the engine's admission and rounds with times from a step cost profile (the engine's
cache file, `dsinfer-step-cost 1`: its "plain" and "round" lines, speculative/step_cost.h) and a per-request draft
acceptance, and prints each policy's output tokens per ms against plain decode steps:
  off     plain steps; prompts mixed into them (--off-prompt-ms each, at most --prompt-ms a step)
  all     every round verifies every draft (--speculative-cost-model off); prompts in steps of their own, admitted
          in groups of slots / 8 (SchedulerConfig::spec_admit_group), --prompt-ms each
  gate    draft where a round at the batch's mean acceptance beats a plain step by 5 % (SpecGate, its estimate known)
  drain   the gate, and with nothing waiting also for the slowest sequence (SpecGate::drain_pays, SeqAcceptance)
Each request accepts each next draft with its own probability (a Beta distribution, or the per-prompt accepted
lengths of a drafter training report), times --warmup-factor over its first --warmup output tokens (the shipped
drafter on the CPU engine, 48 prompts x 256 tokens: 2.10 tokens a round over the first 32 outputs against 3.0-3.4
later, first-draft acceptance 0.54 against 0.75-0.82: bench/NOTES.md session 49). Against session 48's GPU runs on
the shipped model (H100 profile): static 64 x 256 verifying every draft 0.73x off against 0.80 measured, 256
requests through 64 1.07x against 0.93-0.99 (8-14 % optimistic there). A model, not a measurement: use it to choose
what to measure.

usage: spec_load_model.py COST_FILE [--report report.json] [--slots 64] [--requests 1024] [--static-tokens 256]
"""
import argparse
import json
import random


def parse_cost(path):
    seqs, plain, rnd = [], [], []
    for line in open(path):
        w = line.split()
        if w and w[0] == "seqs":
            seqs.append(int(w[1]))
        elif w and w[0] == "plain":
            plain = [float(x) for x in w[1:]]
        elif w and w[0] == "round":
            rnd = [float(x) for x in w[1:]]
    if not (seqs and len(plain) == len(seqs) and len(rnd) == len(seqs)):
        raise SystemExit(f"{path}: needs seqs, plain and round lines of the same batch sizes")
    return seqs, plain, rnd


def interp(seqs, tab, n):
    if n <= seqs[0]:
        return tab[0]
    for i in range(1, len(seqs)):
        if n <= seqs[i]:
            f = (n - seqs[i - 1]) / (seqs[i] - seqs[i - 1])
            return tab[i - 1] + f * (tab[i] - tab[i - 1])
    return tab[-1]


def tokens(p, drafts):
    return sum(p ** j for j in range(drafts + 1))


def acceptance_of_length(a, drafts):
    lo, hi = 0.0, 0.999
    for _ in range(60):
        m = (lo + hi) / 2
        lo, hi = (m, hi) if tokens(m, drafts) < a else (lo, m)
    return lo


def simulate(reqs, a):
    seqs, plain, rnd = a.cost
    plain_ms = lambda n: interp(seqs, plain, n)
    round_ms = lambda n: interp(seqs, rnd, n)
    rng = random.Random(a.seed)
    out = {}
    for policy in ("off", "all", "gate", "drain"):
        queue, running, t, done = list(reqs), [], 0.0, 0
        group = 1 if policy == "off" else max(1, a.slots // 8)
        while queue or running:
            free = a.slots - len(running)
            if queue and free >= min(len(queue), group):
                k = min(free, len(queue))
                for _ in range(k):
                    p, m = queue.pop(0)
                    running.append({"p": p, "m": m, "out": 0, "acc": 0.0, "rej": 0.0})
                t += min(a.off_prompt_ms * k, a.prompt_ms) if policy == "off" else a.prompt_ms
            n = len(running)
            draft = policy == "all"
            if policy in ("gate", "drain"):
                mean = sum(tokens(s["p"], a.drafts) for s in running) / n
                draft = mean * plain_ms(n) / round_ms(n) >= 1.05
                if policy == "drain" and draft and not queue and n > 1:
                    run_p = 0.6
                    slowest = min((s["acc"] + 4 * run_p) / (s["acc"] + s["rej"] + 4) for s in running)
                    draft = tokens(slowest, a.drafts) * plain_ms(n) / round_ms(n) >= 1.05
            t += round_ms(n) if draft else plain_ms(n)
            for s in running:
                if not draft:
                    s["out"] += 1
                    continue
                p = s["p"] * (a.warmup_factor if s["out"] < a.warmup else 1.0)
                acc = 0
                while acc < a.drafts and rng.random() < p:
                    acc += 1
                s["acc"] += acc
                s["rej"] += 1 if acc < a.drafts else 0
                s["out"] += 1 + acc
            done += sum(s["m"] for s in running if s["out"] >= s["m"])
            running = [s for s in running if s["out"] < s["m"]]
        out[policy] = done / t
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cost_file")
    ap.add_argument("--report", help="a drafter training report.json: per-prompt greedy accepted lengths")
    ap.add_argument("--beta", type=float, nargs=2, default=(7.0, 3.0), help="Beta(a, b) of per-request acceptance")
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--static-tokens", type=int, default=256)
    ap.add_argument("--drafts", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=32)
    ap.add_argument("--warmup-factor", type=float, default=0.66)
    ap.add_argument("--prompt-ms", type=float, default=1.1)
    ap.add_argument("--off-prompt-ms", type=float, default=0.15)
    ap.add_argument("--round-scale", type=float, default=1.0,
                    help="scales each round's time beyond the plain step of its batch (what if rounds were cheaper)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    seqs, plain, rnd = parse_cost(a.cost_file)
    a.cost = (seqs, plain, [p + (r - p) * a.round_scale for p, r in zip(plain, rnd)])
    rng = random.Random(7)
    if a.report:
        lengths = json.load(open(a.report))["greedy"]["dspark_block5"]["mean_accepted_length_per_prompt"]
        ps = [acceptance_of_length(x, a.drafts) for x in lengths]
        draw = lambda: ps[rng.randrange(len(ps))]
    else:
        draw = lambda: min(0.95, max(0.2, rng.betavariate(*a.beta)))
    static = [(draw(), a.static_tokens) for _ in range(a.slots)]
    sustained = [(draw(), 64 + (i * 37) % 193) for i in range(a.requests)]
    for name, reqs in ((f"static {a.slots} x {a.static_tokens}", static),
                       (f"{a.requests} requests (64-256 tokens) through {a.slots}", sustained)):
        r = simulate(reqs, a)
        print(f"{name}: off {r['off']:.1f} tok/ms; " +
              ", ".join(f"{k} {r[k] / r['off']:.3f}x" for k in ("all", "gate", "drain")))


if __name__ == "__main__":
    main()
