"""Why greedy speculative runs could differ from each other and from the target's greedy decode, and the fix
(used by evaluate.py; docs/decisions.md 2026-12-01).

Every verify forward in evaluate.py is a full no-cache forward (no KV-cache path is involved), so the logits at a
position are a function of the tokens before it only -- up to rounding. fp32 rounding depends on the shapes of the
batch: the padded length and row count change the GEMM shapes (cuBLAS picks other kernels / split-K), and the
sparse MoE (transformers' default grouped_mm experts) groups the tokens routed to each expert, so an expert's GEMM
has as many rows as tokens went to it in the WHOLE batch (other prompts, pads, drafts). A DSpark run (verify 6 positions), an MTP-1 run (verify 2) and a plain
greedy decode therefore compute the same position with different shapes; the logits differ by rounding, and where
the target's top-2 logits are nearly tied (or a rounding difference flips a discrete choice inside the model: MoE
top-k routing, the Lightning Indexer's top-k), greedy decoding takes another token and the continuations diverge.

The fix: fixed-shape evaluation. Every target forward of a run has the same shape [all prompts, fixed padded length]
(each prompt keeps its row; finished prompts stay as rows) and the routed experts run densely (every token through
every expert, weight 0 where not routed), so every GEMM / reduction has the same shape in every forward and a
position's logits are a bitwise function of the tokens before it. The greedy outputs of DSpark, MTP-1 and the
target's own greedy decode (computed the same way) must then be identical; any difference is a bug.

check(): the proof -- the target's greedy decode computed twice with different batch shapes (prompt order reversed,
one longer extra row): variable shapes + sparse MoE (the old evaluation) vs fixed shapes + dense MoE; for every
prompt whose outputs differ, the position and the target's top-1/top-2 logit margin there.
"""
import contextlib
import torch
import torch.nn.functional as F
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mv4

_sparse_forward = mv4.DeepseekV4Experts.forward


def _dense_forward(self, hidden_states, top_k_index, top_k_weights):
    """DeepseekV4Experts.forward with every token through every expert (weight 0 where not routed): the GEMM shapes
    no longer depend on how many tokens of the batch went to each expert."""
    n, E = hidden_states.shape[0], self.num_experts
    w = torch.zeros(n, E + 1, dtype=top_k_weights.dtype, device=hidden_states.device)
    w.scatter_add_(1, top_k_index.clamp(max=E).long(), top_k_weights)  # index E (if any) = "no expert"
    final = torch.zeros_like(hidden_states)
    for e in range(E):
        cur = self._apply_gate(F.linear(hidden_states, self.gate_up_proj[e]))
        final = final + (F.linear(cur, self.down_proj[e]) * w[:, e, None]).to(final.dtype)
    return final


@contextlib.contextmanager
def dense_moe(enabled=True):
    mv4.DeepseekV4Experts.forward = _dense_forward if enabled else _sparse_forward
    try:
        yield
    finally:
        mv4.DeepseekV4Experts.forward = _sparse_forward


@torch.no_grad()
def target_greedy(run, prompts, n_new, dev, order=None, extra_row=None):
    """The target's greedy decode by full forwards (one token per step, all unfinished prompts batched), as a
    speculative run would compute it: run.fixed -> fixed shapes with each prompt in row order[i]; otherwise the
    unfinished prompts in `order`, plus `extra_row` (a longer sequence that only changes the batch shape).
    Returns (outputs, margins): margins[i][j] = top-1 minus top-2 logit where output token j was chosen."""
    order = list(range(len(prompts))) if order is None else order
    out = [[] for _ in prompts]
    margins = [[] for _ in prompts]
    active = [True] * len(prompts)
    while True:
        idx = [i for i in order if active[i] and len(out[i]) < n_new]
        if not idx:
            break
        seqs = [list(prompts[i]) + out[i] for i in idx]
        if run.fixed:
            _, lg, _, _ = run.forward(seqs, dev, rows=[order[i] for i in idx])
            rows = [order[i] for i in idx]
        else:
            extra = [extra_row] if extra_row is not None else []
            _, lg, _, _ = run.forward(seqs + extra, dev)
            rows = list(range(len(idx)))
        for r, i, s in zip(rows, idx, seqs):
            top = lg[r, len(s) - 1].topk(2)
            t = int(top.indices[0])
            out[i].append(t)
            margins[i].append(float(top.values[0] - top.values[1]))
            if t == 1:
                active[i] = False
    return out, margins


def compare(outs, ref, ref_margins, n_new):
    """outs vs the reference decode: identical count and, per differing prompt, (prompt, position, ref margin)."""
    same, diffs = 0, []
    for i, (o, r) in enumerate(zip(outs, ref)):
        o, r = o[:n_new], r[:n_new]
        if o == r:
            same += 1
            continue
        j = next((k for k in range(min(len(o), len(r))) if o[k] != r[k]), min(len(o), len(r)))
        diffs.append({"prompt": i, "position": j,
                      "ref_top2_margin": ref_margins[i][j] if j < len(ref_margins[i]) else None})
    return {"identical": f"{same}/{len(outs)}", "n_identical": same, "divergences": diffs}


def check(run, prompts, n_new, dev, spec=None, fixed_ref=None):
    """The proof (see the module doc): greedy decode in two batch shapes, variable vs fixed-shape evaluation.
    spec(kind) -> greedy outputs of a speculative run (evaluate.speculate); with it, the variable-shape mode also
    compares DSpark and MTP-1 runs with that mode's target decode (the old evaluation's situation; the fixed mode's
    comparison is evaluate.py's lossless_vs_target_greedy). fixed_ref: that decode (outputs, margins) if already
    computed in the fixed mode with the prompts in their own rows (saves one decode)."""
    n = len(prompts)
    rev = list(range(n))[::-1]
    longest = max(len(p) for p in prompts) + n_new + 7
    extra = (list(prompts[0]) * (longest // max(1, len(prompts[0])) + 1))[:longest]
    res = {}
    saved = run.fixed
    for mode in ("variable_shapes_sparse_moe", "fixed_shapes_dense_moe"):
        run.fixed = saved if mode.startswith("fixed") else None
        with dense_moe(run.fixed is not None):
            if run.fixed and fixed_ref is not None:
                a, ma = fixed_ref
            else:
                a, ma = target_greedy(run, prompts, n_new, dev)
            b, _ = target_greedy(run, prompts, n_new, dev, order=rev, extra_row=extra)
        res[mode] = compare(b, a, ma, n_new)
        if spec is not None and run.fixed is None:
            for kind in ("dspark", "mtp"):
                res[mode][f"{kind}_vs_target_decode"] = compare(spec(kind), a, ma, n_new)
    run.fixed = saved
    return res
