#!/usr/bin/env python3
"""Where and why two greedy `dsinfer generate` runs differ (issue 32's lossless check).

Usage: spec_divergence.py REFERENCE.out.jsonl OTHER.out.jsonl [LABEL]

Both runs must have asked for completions logprobs (`"logprobs": N` in every body, N >= 2). For each request whose
tokens differ it prints the first differing position j, the two runs' tokens there, each run's own top-2 margin at j
(lp1 - lp2 of its top list: a logit difference, since logprobs of one row share the normaliser), the teacher-forced
margin sum (ref's lp(a) - lp(b) plus other's lp(b) - lp(a), with a = ref's token and b = other's: the change of one
logit difference between the runs; tests/gpu/test_spec_gpu.cpp's rule) and the largest |difference| of the chosen
token's logprob over the positions before j (same prefix in both runs: how much the other run's step shapes moved
the logits where it did not change the token). For requests that agree, the largest such |difference| over all
positions is summarised, and the count of positions where the two logprobs are bit-equal.
"""
import json
import math
import sys


def load(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        ch = r["response"]["body"]["choices"][0]
        lp = ch.get("logprobs") or {}
        out[r["custom_id"]] = (lp.get("tokens", []), lp.get("token_logprobs", []), lp.get("top_logprobs", []),
                               ch.get("text", ""))
    return out


def lp_of(top, tok_lp, tok, chosen):
    if tok == chosen:
        return tok_lp
    return top.get(tok, -math.inf)


def top2(top):
    v = sorted(top.values(), reverse=True)
    return v[0] - v[1] if len(v) >= 2 else math.inf


def main():
    ref, other = load(sys.argv[1]), load(sys.argv[2])
    label = sys.argv[3] if len(sys.argv) > 3 else sys.argv[2]
    same = 0
    worst_same = 0.0
    exact_pos = total_pos = 0
    lines = []
    sums = []
    for cid in sorted(ref, key=lambda c: int(c.lstrip("r")) if c.lstrip("r").isdigit() else c):
        if cid not in other:
            lines.append(f"  {cid}: missing from {label}")
            continue
        ta, la, pa, _ = ref[cid]
        tb, lb, pb, _ = other[cid]
        j = 0
        while j < len(ta) and j < len(tb) and ta[j] == tb[j]:
            j += 1
        before = [abs(la[i] - lb[i]) for i in range(j)]
        exact_pos += sum(1 for d in before if d == 0.0)
        total_pos += len(before)
        moved = max(before, default=0.0)
        if j == len(ta) and j == len(tb):
            same += 1
            worst_same = max(worst_same, moved)
            continue
        if j >= len(ta) or j >= len(tb):
            lines.append(f"  {cid}: lengths {len(ta)} vs {len(tb)} (one a prefix of the other)")
            continue
        a, b = ta[j], tb[j]
        m_ref = lp_of(pa[j], la[j], a, a) - lp_of(pa[j], la[j], b, a)
        m_oth = lp_of(pb[j], lb[j], b, b) - lp_of(pb[j], lb[j], a, b)
        s = m_ref + m_oth
        sums.append(s)
        lines.append(f"  {cid}: first difference at token {j} ({a!r} vs {b!r}); top-2 margin ref {top2(pa[j]):.4f}, "
                     f"{label} {top2(pb[j]):.4f}; margin sum {s:.4f} (ref {m_ref:.4f} + {label} {m_oth:.4f}); "
                     f"max |dlogprob| before it {moved:.2e}")
    n = len(ref)
    print(f"{label} vs {sys.argv[1].split('/')[-1]}: identical {same}/{n}; chosen-token logprob bit-equal at "
          f"{exact_pos}/{total_pos} shared-prefix positions; max |dlogprob| over identical requests {worst_same:.2e}")
    for line in lines:
        print(line)
    if sums:
        print(f"  margin sums sorted: {' '.join(f'{s:.4f}' for s in sorted(sums))}")


if __name__ == "__main__":
    main()
