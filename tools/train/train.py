#!/usr/bin/env python3
"""Steps 2 and 4 of tools/train/run_all.sh.

    python3 tools/train/train.py target   --work W --seconds S [--device cuda|cpu] [--batch B] [--seq T]
    python3 tools/train/train.py drafters --work W --seconds S [--device ...] [--batch B] [--seq T]

target: trains DeepseekV4ForCausalLM (arch.target_config) from transformers' initialisation on train.bin with
AdamW, bf16 autocast on GPU, cosine learning rate over the wall-clock budget, aux-loss-free expert balancing (the
router bias e_score_correction_bias moves by 1e-3 * sign(mean load - load) after every step); every eval interval
the held-out loss on fixed val.bin windows is logged (train_log.txt: step, tokens, seconds, lr, train loss,
held-out loss); stops at the budget or when the held-out loss has not improved for --patience evaluations; keeps the
best held-out state (work/target_hf, transformers save_pretrained, fp32).

drafters: loads the quantized-then-dequantized target (work/target_deq, written by export.py quantize-target: the
weights the release ships), freezes it, and trains the DSpark drafter and the MTP-1 module together on the same
target forwards (one forward per batch feeds both):
  DSpark  per paper §3.3: A anchors per sequence, anchor-first block of 5, loss 0.1*CE + 0.9*L1(p_draft - p_target)
          + 1.0*BCE(confidence logit, sum_v min(p_draft, p_target)) with position weights exp(-(k-1)/5); Markov
          predecessor = the true previous token (teacher forcing), anchor for slot 1.
  MTP-1   same CE / L1 mix for the token after next at every position.
Saves work/drafters.pt (fp32 state dicts).
Drafter retraining (tools/train/retrain.py): --init warm-starts both drafters from a drafters.pt-format file,
--pool trains on target-generated sequences (npz: seqs [N, S], prompt_len [N]; DSpark anchors are drawn from the
generated part, where speculation happens), --loss distill replaces the mix by
  0.5*CE(argmax p_target) + 0.5*KL(p_target || p_draft) + 0.5*L1 (+ the same confidence BCE for DSpark)
with the target run in fp32 (TF32) instead of bf16 autocast (docs/small_model.md, "Drafter retraining").
"""
import argparse, json, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch  # noqa: E402
import transformers  # noqa: E402


def pick_device(name):
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class Windows:
    def __init__(self, path, seq, seed):
        self.ids = np.fromfile(path, dtype=np.uint16)
        self.seq = seq
        self.rng = np.random.default_rng(seed)

    def batch(self, B, device):
        starts = self.rng.integers(0, len(self.ids) - self.seq - 1, size=B)
        x = np.stack([self.ids[s:s + self.seq + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(x).to(device)

    def fixed(self, n, device):
        n = max(1, min(n, (len(self.ids) - 1) // (self.seq + 1)))
        step = (len(self.ids) - self.seq - 1) // n
        x = np.stack([self.ids[i * step:i * step + self.seq + 1] for i in range(n)]).astype(np.int64)
        return torch.from_numpy(x).to(device)


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)


def lr_at(frac, peak, warm=0.03, floor=0.1):
    if frac < warm:
        return peak * frac / warm
    p = min(1.0, (frac - warm) / (1 - warm))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def param_groups(model, wd):
    decay, no = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "hc" not in n and "embed" not in n else no).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}]


@torch.no_grad()
def heldout_loss(model, val, device, bs):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, val.shape[0], bs):
        x = val[i:i + bs]
        with autocast(device):
            logits = model(x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def train_target(a):
    dev = pick_device(a.device)
    info = json.load(open(os.path.join(a.work, "data.json")))
    cfg = arch.target_config(info["vocab_size"])
    model = arch.make_target(cfg, a.seed).to(dev)
    model.train()
    routers = [m for m in model.modules() if isinstance(m, arch.mv4.DeepseekV4TopKRouter)]
    loads = {}

    def hook(mod, inp, out):
        loads[mod] = torch.bincount(out[2].reshape(-1), minlength=mod.num_experts)
    for r in routers:
        r.register_forward_hook(hook)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=(dev == "cuda"))
    data = Windows(os.path.join(a.work, "train.bin"), a.seq, a.seed)
    val = Windows(os.path.join(a.work, "val.bin"), a.seq, a.seed).fixed(a.val_windows, dev)
    log = open(os.path.join(a.work, "train_log.txt"), "w")
    log.write(f"# target: {arch.count_params(model)} parameters, batch {a.batch} x {a.seq} tokens, device {dev}\n")
    log.write("step\ttokens\tseconds\tlr\ttrain_loss\theldout_loss\n")
    t0 = time.time()
    step, best, best_state, bad, ema = 0, float("inf"), None, 0, None
    next_eval = 0.0
    while True:
        el = time.time() - t0
        frac = el / a.seconds
        if el >= next_eval or frac >= 1.0:
            vl = heldout_loss(model, val, dev, a.batch)
            line = f"{step}\t{step * a.batch * a.seq}\t{el:.1f}\t{lr_at(min(frac, 1), a.lr):.2e}\t" \
                   f"{(ema if ema is not None else float('nan')):.4f}\t{vl:.4f}"
            log.write(line + "\n"); log.flush(); print(line, flush=True)
            if vl < best - 1e-4:
                best, bad = vl, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                bad += 1
            next_eval = el + a.seconds * a.eval_every
            if frac >= 1.0 or bad >= a.patience:
                break
        for g in opt.param_groups:
            g["lr"] = lr_at(frac, a.lr)
        x = data.batch(a.batch, dev)
        with autocast(dev):
            logits = model(x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for r in routers:
                if r in loads:
                    ld = loads[r].float()
                    r.e_score_correction_bias.add_(1e-3 * torch.sign(ld.mean() - ld))
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        step += 1
    model.load_state_dict(best_state)
    model.to("cpu").save_pretrained(os.path.join(a.work, "target_hf"), safe_serialization=True)
    summary = {"steps": step, "tokens": step * a.batch * a.seq, "seconds": time.time() - t0,
               "best_heldout_loss": best, "params": arch.count_params(model), "batch": a.batch, "seq": a.seq,
               "stopped": "patience" if bad >= a.patience else "budget"}
    log.write("# " + json.dumps(summary) + "\n")
    json.dump(summary, open(os.path.join(a.work, "target_train.json"), "w"), indent=1)
    print(summary)


def load_deq_target(work, dev):
    m = transformers.DeepseekV4ForCausalLM.from_pretrained(os.path.join(work, "target_deq"), dtype=torch.float32)
    m.to(dev).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def tv_ce_losses(logits, p_t, labels, valid):
    """logits [..., V] draft, p_t [..., V] target probs, labels [...], valid [...] bool -> per-item (ce, l1, p_d)."""
    logp = F.log_softmax(logits.float(), -1)
    p_d = logp.exp()
    ce = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    l1 = (p_d - p_t).abs().sum(-1)
    return ce * valid, l1 * valid, p_d


def draft_loss(logits, p_t, labels, valid, mode):
    """Per-item drafter loss and (ce, l1, agreement, p_d). mix: 0.1*CE(corpus token) + 0.9*L1 (the original);
    distill: 0.5*CE(target argmax) + 0.5*KL(p_t || p_d) + 0.5*L1. agreement = argmax(p_d) == argmax(p_t)."""
    t_arg = p_t.argmax(-1)
    agree = (logits.argmax(-1) == t_arg).float() * valid
    if mode == "mix":
        ce, l1, p_d = tv_ce_losses(logits, p_t, labels, valid)
        return 0.1 * ce + 0.9 * l1, ce, l1, agree, p_d
    ce, l1, p_d = tv_ce_losses(logits, p_t, t_arg, valid)
    logp = torch.log(p_d.clamp(min=1e-30))
    kl = (p_t * (torch.log(p_t.clamp(min=1e-30)) - logp)).sum(-1) * valid
    return 0.5 * ce + 0.5 * kl + 0.5 * l1, ce, l1, agree, p_d


class Pool:
    """Target-generated sequences (retrain.py): batch() -> (ids [B, S], first anchor position [B])."""

    def __init__(self, path, seed):
        z = np.load(path)
        self.seqs, self.plen = z["seqs"].astype(np.int64), z["prompt_len"].astype(np.int64)
        self.rng = np.random.default_rng(seed)

    def batch(self, B, device):
        i = self.rng.integers(0, len(self.seqs), size=B)
        return torch.from_numpy(self.seqs[i]).to(device), torch.from_numpy(self.plen[i] - 1).to(device)


def sample_anchors(lo, S, A, dev):
    """A distinct anchor positions per row in [lo_b, S-2] (lo [B]); rows with fewer positions repeat some."""
    B = lo.shape[0]
    r = torch.rand(B, S, device=dev)
    pos = torch.arange(S, device=dev)[None]
    r = r.masked_fill((pos < lo[:, None].clamp(min=1)) | (pos > S - 2), 2.0)
    return r.argsort(dim=1)[:, :A].clamp(min=1, max=S - 2)


def train_drafters(a):
    dev = pick_device(a.device)
    info = json.load(open(os.path.join(a.work, "data.json")))
    target = load_deq_target(a.work, dev)
    tcfg = arch.target_config(info["vocab_size"])
    L = tcfg["num_hidden_layers"]
    layer_ids = [L - 3, L - 2, L - 1]
    ds = arch.DSpark(tcfg, layer_ids, info["noise_token_id"]).to(dev).train()
    mtp = arch.MTP1(tcfg).to(dev).train()
    init = torch.load(a.init, weights_only=False) if a.init else None
    if init:
        ds.load_state_dict(init["dspark"]); mtp.load_state_dict(init["mtp"])
    tap = arch.FeatureTap(target, layer_ids)
    embed, head = target.model.embed_tokens, target.lm_head
    params = list(ds.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW([{"params": list(ds.parameters()), "weight_decay": 0.0},
                             {"params": list(mtp.parameters()), "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), fused=(dev == "cuda"))
    pool = Pool(a.pool, a.seed + 7) if a.pool else None
    data = None if pool else Windows(os.path.join(a.work, "train.bin"), a.seq, a.seed + 7)
    # distill: the target's distributions in fp32 (TF32 matmuls), not bf16 autocast -- they are the labels
    t_ctx = (lambda: torch.autocast(dev, enabled=False)) if a.loss == "distill" else (lambda: autocast(dev))
    g, A = ds.block, a.anchors
    w = torch.exp(-torch.arange(g, dtype=torch.float32, device=dev) / g)  # exp(-(k-1)/gamma), k = 1..gamma
    log = open(os.path.join(a.work, "drafter_log.txt"), "w")
    log.write(f"# drafters: loss {a.loss}, data {'target-generated pool ' + a.pool if pool else 'corpus'}, "
              f"init {a.init or 'fresh'}, batch {a.batch}, anchors {A}, lr {a.lr}\n")
    log.write("step\tseconds\tdspark_ce\tdspark_l1\tdspark_conf_bce\tmtp_ce\tmtp_l1\tdspark_agree_k\tmtp_agree\n")
    t0, step = time.time(), 0
    while time.time() - t0 < a.seconds:
        frac = (time.time() - t0) / a.seconds
        for gr in opt.param_groups:
            gr["lr"] = lr_at(frac, a.lr)
        if pool:
            x, lo = pool.batch(a.batch, dev)
        else:
            x = data.batch(a.batch, dev)[:, :-1]
            lo = torch.ones(x.shape[0], dtype=torch.long, device=dev)
        B, S = x.shape
        with torch.no_grad(), t_ctx():
            tl = target(x, use_cache=False).logits.float()
            p_t_all = tl.softmax(-1)
            feats = arch.dspark_features(tap, layer_ids)
            x_last = tap.out[L - 1].float()
        # ---- DSpark
        anchors = sample_anchors(lo, S, A, dev)
        with autocast(dev):
            h = ds.backbone(embed, feats, x, anchors)  # [B, A, g, D]
        k = torch.arange(g, device=dev)
        tpos = anchors[:, :, None] + k  # position whose target distribution scores slot k
        valid = (tpos + 1 < S)
        tpos_c = tpos.clamp(max=S - 2)
        labels = x.gather(1, (tpos_c + 1).reshape(B, -1)).view(B, anchors.shape[1], g)
        prev = x.gather(1, tpos_c.reshape(B, -1)).view(B, anchors.shape[1], g)  # slot 1: anchor, k: token k-1
        p_t = p_t_all.gather(1, tpos_c.reshape(B, -1, 1).expand(-1, -1, p_t_all.shape[-1]))
        p_t = p_t.view(B, anchors.shape[1], g, -1)
        with autocast(dev):
            logits, conf = ds.head(head, h, prev)
        vf = valid.float()
        loss_i, ce, l1, agree, p_d = draft_loss(logits, p_t, labels, vf, a.loss)
        label_c = torch.minimum(p_d.detach(), p_t).sum(-1)
        bce = F.binary_cross_entropy_with_logits(conf, label_c, reduction="none") * vf
        norm = (vf * w).sum()
        ds_ce, ds_l1, ds_bce = (ce * w).sum() / norm, (l1 * w).sum() / norm, (bce * w).sum() / norm
        loss_ds = (loss_i * w).sum() / norm + 1.0 * ds_bce
        # ---- MTP-1: input (X_i, t_{i+1}) for i = 0..S-3 predicts t_{i+2}, teacher p_t at position i+1
        with autocast(dev):
            ml = mtp(embed, head, x_last[:, :S - 2], x[:, 1:S - 1])
        vm = torch.ones(B, S - 2, device=dev)
        m_loss, mce, ml1, m_agree, _ = draft_loss(ml, p_t_all[:, 1:S - 1], x[:, 2:S], vm, a.loss)
        loss_m = m_loss.mean()
        opt.zero_grad(set_to_none=True)
        (loss_ds + loss_m).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % a.log_every == 0:
            ag = (agree.sum((0, 1)) / vf.sum((0, 1)).clamp(min=1)).tolist()
            line = f"{step}\t{time.time() - t0:.1f}\t{ds_ce.item():.4f}\t{ds_l1.item():.4f}\t{ds_bce.item():.4f}\t" \
                   f"{mce.mean().item():.4f}\t{ml1.mean().item():.4f}\t{','.join(f'{v:.3f}' for v in ag)}\t" \
                   f"{m_agree.mean().item():.3f}"
            log.write(line + "\n"); log.flush(); print(line, flush=True)
        step += 1
    tap.remove()
    prior = init.get("history", []) + [{"steps": init["steps"], "seconds": init["seconds"]}] if init else []
    torch.save({"dspark": {k: v.cpu() for k, v in ds.state_dict().items()},
                "mtp": {k: v.cpu() for k, v in mtp.state_dict().items()},
                "dspark_args": {"target_layer_ids": layer_ids, "noise_id": info["noise_token_id"]},
                "params": {"dspark": arch.count_params(ds), "mtp": arch.count_params(mtp)},
                "steps": step, "seconds": time.time() - t0, "loss": a.loss, "history": prior},
               os.path.join(a.work, "drafters.pt"))
    print("drafters trained", step, "steps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["target", "drafters"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--val-windows", type=int, default=None)
    ap.add_argument("--eval-every", type=float, default=0.05, help="fraction of the budget between evaluations")
    ap.add_argument("--patience", type=int, default=4)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="drafters: warm start from this drafters.pt-format file")
    ap.add_argument("--pool", default=None, help="drafters: train on this target-generated pool (npz)")
    ap.add_argument("--loss", choices=["mix", "distill"], default="mix")
    a = ap.parse_args()
    gpu = pick_device(a.device) == "cuda"
    if a.what == "target":
        a.batch = a.batch or (48 if gpu else 4)
        a.seq = a.seq or (512 if gpu else 256)
        a.lr = a.lr or 2e-3
        a.val_windows = a.val_windows or (384 if gpu else 8)
        torch.backends.cuda.matmul.allow_tf32 = True
        train_target(a)
    else:
        a.batch = a.batch or (32 if gpu else 2)
        a.seq = a.seq or (512 if gpu else 256)
        a.lr = a.lr or 1e-3
        if not gpu:
            a.anchors = min(a.anchors, 8)
        train_drafters(a)


if __name__ == "__main__":
    main()
