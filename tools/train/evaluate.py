#!/usr/bin/env python3
"""Step 5 of tools/train/run_all.sh: held-out perplexity, speculative decoding measurements, calibration.

    python3 tools/train/evaluate.py --work W [--device cuda|cpu] [--n-prompts N] [--prompt-len P] [--new-tokens T]

Everything runs on the weights that are exported (target_deq, and the drafters after their FP8 / FP4 / BF16 round
trip). Speculative decoding is simulated exactly, batched over prompts: every round one target forward on
[committed tokens + anchor + drafts] gives the verification distributions and the context features for the next
round (the model is causal, right padding never changes real positions). DSpark drafts all 5 tokens of its block
(no scheduler truncation), MTP-1 one token. Verification is standard speculative sampling at temperature 1.0
(accept d_k with min(1, p/q), else emit a token from norm(max(0, p - q)); all accepted -> bonus from p) and exact
argmax matching for greedy.

Reported: per-position conditional acceptance (accepted_k / trials_k, a trial = all earlier drafts of the round
accepted), prefix survival (rounds whose first k drafts were all accepted / rounds), mean accepted length (tokens
emitted per round = accepted drafts + the target's correction or bonus token; the engine's `mean accepted length`
is the same quantity, tests/unit/test_spec_offline.cpp), also per prompt, and the evaluation prompts' token ids. Confidence head: logits c_k of
every round on the calibration prompts are fit with sequential temperature scaling (position k = 1..5 in order, the
temperature T_k minimises the ECE of the cumulative prefix survival prod_{i<=k} sigmoid(c_i / T_i) against the
observed prefix survival, earlier temperatures frozen; 121-point log grid on [1/8, 8]); ECE (20 equal-width bins,
count-weighted |mean prediction - observed frequency|) is reported on the evaluation prompts before and after.

Determinism (determinism.py): every target forward has one fixed shape [prompts, prompt + new + gamma + 1] with each
prompt in its own row, and the routed experts run densely, so a position's logits are a bitwise function of its
prefix. The greedy DSpark and MTP-1 outputs are compared with the target's own greedy decode computed the same way
(lossless_vs_target_greedy: must be identical), and determinism.check records the proof (variable vs fixed shapes).
--variable-shapes restores the old evaluation (unfinished prompts padded to the longest, sparse MoE).
"""
import argparse, json, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch  # noqa: E402
import determinism  # noqa: E402
import export  # noqa: E402
import train  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


class Runner:
    """Target forwards for the simulation. fixed = (rows, length): every forward has that shape (sequence k in row
    rows[k], the rest padding) and is run under determinism.dense_moe, so a position's logits are a bitwise
    function of the tokens before it (determinism.py); None: the unfinished sequences padded to the longest."""

    def __init__(self, target, ds, mtp, layer_ids, fixed=None):
        self.t, self.ds, self.mtp, self.layer_ids, self.fixed = target, ds, mtp, layer_ids, fixed
        self.L = target.config.num_hidden_layers
        self.tap = arch.FeatureTap(target, sorted(set(layer_ids + [self.L - 1])))
        self.embed, self.head = target.model.embed_tokens, target.lm_head

    @torch.no_grad()
    def forward(self, seqs, dev, rows=None):
        """-> (ids, logits, DSpark features, last layer streams); batch index = rows[k] (fixed) or k."""
        if self.fixed:
            R, n = self.fixed
            rows = list(range(len(seqs))) if rows is None else rows
        else:
            R, n, rows = len(seqs), max(len(s) for s in seqs), list(range(len(seqs)))
        x = torch.full((R, n), 1, dtype=torch.long, device=dev)
        for r, s in zip(rows, seqs):
            if len(s) > n:
                raise ValueError(f"sequence of {len(s)} tokens > fixed evaluation length {n}")
            x[r, :len(s)] = torch.tensor(s, device=dev)
        with determinism.dense_moe(self.fixed is not None):
            logits = self.t(x, use_cache=False).logits.float()
        return x, logits, arch.dspark_features(self.tap, self.layer_ids), self.tap.out[self.L - 1].float()


def sample(p, gen):
    return int(torch.multinomial(p, 1, generator=gen).item())


@torch.no_grad()
def speculate(run, prompts, kind, greedy, n_new, dev, seed):
    """Returns stats and the generated continuations. kind: 'dspark' or 'mtp'."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    gamma = run.ds.block if kind == "dspark" else 1
    seqs = [list(p) for p in prompts]
    x, logits, feats, xl = run.forward(seqs, dev)  # rows = prompt order in both modes
    out = [[] for _ in prompts]
    for i, s in enumerate(seqs):  # the first token comes from the prompt forward; it is the first anchor
        p = logits[i, len(s) - 1].softmax(-1)
        out[i].append(int(p.argmax()) if greedy else sample(p, gen))
    active = [out[i][-1] != 1 for i in range(len(prompts))]
    acc = np.zeros(gamma); trials = np.zeros(gamma); surv = np.zeros(gamma); rounds = 0; emitted = 0
    p_rounds = np.zeros(len(prompts)); p_emitted = np.zeros(len(prompts))  # per prompt (engine comparisons)
    conf_rows = []  # (confidence logits [gamma], survival [gamma]) per DSpark round
    while any(a and len(out[i]) < n_new for i, a in enumerate(active)):
        idx = [i for i, a in enumerate(active) if a and len(out[i]) < n_new]
        anchor_pos = [len(seqs[i]) + len(out[i]) - 1 for i in idx]  # position of the anchor token
        cur = [seqs[i] + out[i] for i in idx]
        ids = torch.full((len(idx), max(map(len, cur))), 1, dtype=torch.long, device=dev)
        for r, c in enumerate(cur):
            ids[r, :len(c)] = torch.tensor(c, device=dev)
        drafts, qs, confs = [], [], None
        if kind == "dspark":
            anc = torch.tensor(anchor_pos, device=dev)[:, None]
            f = feats[idx][:, :max(anchor_pos)]
            h = run.ds.backbone(run.embed, f, ids, anc)[:, 0]  # [R, g, D]
            prev = ids.gather(1, anc)[:, 0]
            cl = []
            for k in range(gamma):
                lg, c = run.ds.head(run.head, h[:, k], prev)
                q = lg.softmax(-1)
                d = q.argmax(-1) if greedy else torch.multinomial(q, 1, generator=gen)[:, 0]
                drafts.append(d); qs.append(q); cl.append(c); prev = d
            confs = torch.stack(cl, 1)
        else:
            S = max(anchor_pos)  # MTP inputs (X_i, t_{i+1}) for i < anchor: output at anchor-1 predicts anchor+1
            lg = run.mtp(run.embed, run.head, xl[idx][:, :S], ids[:, 1:S + 1])
            lg = lg[torch.arange(len(idx), device=dev), torch.tensor(anchor_pos, device=dev) - 1]
            q = lg.softmax(-1)
            d = q.argmax(-1) if greedy else torch.multinomial(q, 1, generator=gen)[:, 0]
            drafts.append(d); qs.append(q)
        D = torch.stack(drafts, 1)  # [R, gamma]
        ver = [cur[r] + D[r].tolist() for r in range(len(idx))]
        _, vlog, vfeats, vxl = run.forward(ver, dev, rows=idx)
        slot = idx if run.fixed else list(range(len(idx)))  # batch row of idx[r] in the verify forward
        for r, i in enumerate(idx):
            a0 = anchor_pos[r]
            n_acc, emit = 0, None
            for k in range(gamma):
                p = vlog[slot[r], a0 + k].softmax(-1)
                d = int(D[r, k])
                trials[k] += 1
                if greedy:
                    ok = d == int(p.argmax())
                else:
                    qd = float(qs[k][r, d])
                    ok = float(torch.rand(1, generator=gen, device=dev)) < min(1.0, float(p[d]) / max(qd, 1e-30))
                if ok:
                    acc[k] += 1; n_acc += 1
                else:
                    if greedy:
                        emit = int(p.argmax())
                    else:
                        res = (p - qs[k][r]).clamp(min=0)
                        emit = sample(res / res.sum(), gen) if res.sum() > 0 else sample(p, gen)
                    break
            if emit is None:
                p = vlog[slot[r], a0 + gamma].softmax(-1)
                emit = int(p.argmax()) if greedy else sample(p, gen)
            surv[:n_acc] += 1
            if confs is not None:
                s = np.zeros(gamma); s[:n_acc] = 1
                conf_rows.append((confs[r].cpu().numpy(), s))
            new = D[r, :n_acc].tolist() + [emit]
            rounds += 1; emitted += len(new)
            p_rounds[i] += 1; p_emitted[i] += len(new)
            for tkn in new:
                out[i].append(tkn)
                if tkn == 1:
                    active[i] = False
                    break
        # features of the verify forward are the next round's context (only committed positions are read)
        feats = torch.zeros(len(prompts), vfeats.shape[1], vfeats.shape[2], device=dev)
        xl = torch.zeros(len(prompts), *vxl.shape[1:], device=dev)
        for r, i in enumerate(idx):
            feats[i] = vfeats[slot[r]]; xl[i] = vxl[slot[r]]
    stats = {"rounds": rounds, "mean_accepted_length": emitted / max(1, rounds),
             "acceptance_per_position": (acc / np.maximum(trials, 1)).tolist(), "trials_per_position": trials.tolist(),
             "prefix_survival_per_position": (surv / max(1, rounds)).tolist(),
             "mean_accepted_length_per_prompt": (p_emitted / np.maximum(p_rounds, 1)).tolist()}
    return stats, out, conf_rows


def ece(pred, obs, bins=20):
    pred, obs = np.asarray(pred), np.asarray(obs)
    b = np.minimum((pred * bins).astype(int), bins - 1)
    e = 0.0
    for i in range(bins):
        m = b == i
        if m.any():
            e += m.mean() * abs(pred[m].mean() - obs[m].mean())
    return float(e)


def cum_survival(logits, temps):
    return np.cumprod(1 / (1 + np.exp(-logits / np.asarray(temps)[None])), axis=1)


def sts_fit(rows):
    lg = np.stack([r[0] for r in rows]); s = np.stack([r[1] for r in rows])
    g = lg.shape[1]
    temps = [1.0] * g
    grid = np.exp(np.linspace(math.log(1 / 8), math.log(8), 121))
    for k in range(g):
        best = None
        for T in grid:
            temps[k] = T
            e = ece(cum_survival(lg, temps)[:, k], s[:, k])
            if best is None or e < best[0]:
                best = (e, T)
        temps[k] = float(best[1])
    return temps


def ece_report(rows, temps):
    lg = np.stack([r[0] for r in rows]); s = np.stack([r[1] for r in rows])
    a = cum_survival(lg, temps)
    per = [ece(a[:, k], s[:, k]) for k in range(lg.shape[1])]
    return {"per_position": per, "mean": float(np.mean(per)), "n_rounds": int(lg.shape[0])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n-prompts", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variable-shapes", action="store_true", help="the old evaluation (not deterministic)")
    ap.add_argument("--skip-determinism-check", action="store_true")
    a = ap.parse_args()
    dev = train.pick_device(a.device)
    t0 = time.time()
    info = json.load(open(os.path.join(a.work, "data.json")))
    target = train.load_deq_target(a.work, dev)
    tcfg = arch.target_config(info["vocab_size"])
    _, _, ds, mtp, ck = export.drafter_tensors(a.work)  # drafters with exactly the exported (dequantized) weights
    ds.to(dev).eval(); mtp.to(dev).eval()
    tok = Tokenizer.from_file(os.path.join(a.work, "tokenizer.json"))
    res = {"params": {"target": arch.count_params(target), "target_active_per_token": None,
                      "dspark": ck["params"]["dspark"], "mtp1": ck["params"]["mtp"]},
           "drafter_training": {"steps": ck["steps"], "seconds": ck["seconds"], "loss": ck.get("loss", "mix"),
                                "history": ck.get("history", [])}}
    E, k, I, Dm = tcfg["n_routed_experts"], tcfg["num_experts_per_tok"], tcfg["moe_intermediate_size"], \
        tcfg["hidden_size"]
    res["params"]["target_active_per_token"] = res["params"]["target"] - tcfg["num_hidden_layers"] * (E - k) * 3 * I * Dm
    # held-out perplexity of the shipped (dequantized) model, fp32
    val = train.Windows(os.path.join(a.work, "val.bin"), 512 if dev == "cuda" else 256, 0).fixed(
        256 if dev == "cuda" else 8, dev)
    vl = train.heldout_loss(target, val, "cpu" if dev == "cpu" else "fp32", 16)
    res["heldout"] = {"loss": vl, "perplexity": math.exp(vl), "tokens": int(val[:, 1:].numel()),
                      "note": "fp32 forward of the dequantized exported weights"}
    res["target_training"] = json.load(open(os.path.join(a.work, "target_train.json")))
    res["target_training"]["heldout_perplexity_fp32_trained_weights_bf16_autocast"] = \
        math.exp(res["target_training"]["best_heldout_loss"])
    layer_ids = ck["dspark_args"]["target_layer_ids"]
    run = None  # built below, once the prompt count is known

    def prompt_ids(name):
        texts = json.load(open(os.path.join(a.work, f"prompts_{name}.json"), encoding="utf-8"))[:a.n_prompts]
        return [([0] + tok.encode(t).ids)[:a.prompt_len] for t in texts]
    calib, evalp = prompt_ids("calib"), prompt_ids("eval")
    fixed = None if a.variable_shapes else (max(len(calib), len(evalp)), a.prompt_len + a.new_tokens + ds.block + 1)
    run = Runner(target, ds, mtp, layer_ids, fixed)
    res["evaluation_shapes"] = "variable (old)" if fixed is None else \
        f"fixed [{fixed[0]} rows, {fixed[1]} tokens] + dense MoE (determinism.py)"
    res["n_prompts"] = {"calib": len(calib), "eval": len(evalp)}
    res["prompt_len"], res["new_tokens"] = a.prompt_len, a.new_tokens
    # The exact evaluation prompts (BOS included), so the engine can be measured on the same text
    # (dsinfer generate with {"prompt": ids, "max_tokens": new_tokens, "ignore_eos": true}, --speculative-cost-model off).
    res["eval_prompt_ids"] = evalp
    cal, fixed_ref = {}, None
    for mode, greedy in (("greedy", True), ("sample", False)):
        _, _, rows_c = speculate(run, calib, "dspark", greedy, a.new_tokens, dev, a.seed + 1)
        temps = sts_fit(rows_c)
        st_d, out_d, rows_e = speculate(run, evalp, "dspark", greedy, a.new_tokens, dev, a.seed + 2)
        st_m, out_m, _ = speculate(run, evalp, "mtp", greedy, a.new_tokens, dev, a.seed + 3)
        cal[mode] = {"temperatures": temps}
        res[mode] = {"dspark_block5": st_d, "mtp1": st_m,
                     "confidence_ece_cumulative_prefix_survival": {
                         "before": ece_report(rows_e, [1.0] * ds.block), "after": ece_report(rows_e, temps),
                         "sts_temperatures": temps, "calibration_rounds": len(rows_c)}}
        if greedy:  # a round appends up to 6 (DSpark) or 2 (MTP-1) tokens, so lengths overshoot new_tokens differently
            same = sum(int(x[:a.new_tokens] == y[:a.new_tokens]) for x, y in zip(out_d, out_m))
            res[mode]["greedy_outputs_identical_dspark_vs_mtp1"] = f"{same}/{len(out_d)}"
            ref, ref_m = determinism.target_greedy(run, evalp, a.new_tokens, dev)  # computed the same way
            fixed_ref = (ref, ref_m) if run.fixed else None
            res[mode]["lossless_vs_target_greedy"] = {
                "dspark": determinism.compare(out_d, ref, ref_m, a.new_tokens),
                "mtp1": determinism.compare(out_m, ref, ref_m, a.new_tokens)}
        res[mode]["samples"] = [{"prompt": tok.decode(evalp[i][1:]), "continuation": tok.decode(out_d[i])}
                                for i in range(min(4, len(evalp)))]
    if not a.skip_determinism_check and run.fixed:
        t1 = time.time()
        res["determinism_check"] = determinism.check(
            run, evalp, a.new_tokens, dev, lambda kind: speculate(run, evalp, kind, True, a.new_tokens, dev, 0)[1],
            fixed_ref)
        res["determinism_check"]["seconds"] = time.time() - t1
        print("determinism check", json.dumps(res["determinism_check"]))
    json.dump(cal, open(os.path.join(a.work, "calibration.json"), "w"), indent=1)
    res["eval_seconds"] = time.time() - t0
    json.dump(res, open(os.path.join(a.work, "eval.json"), "w"), indent=1, ensure_ascii=False)
    print(json.dumps({k: v for k, v in res.items() if k not in ("greedy", "sample")}, indent=1))
    for m in ("greedy", "sample"):
        print(m, json.dumps({k: res[m][k] for k in ("dspark_block5", "mtp1")}))


if __name__ == "__main__":
    main()
