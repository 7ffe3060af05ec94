#!/usr/bin/env python3
"""Reference outputs of the shipped drafters (DSpark and MTP-1) computed by PyTorch on the CPU, for the C++ parity
test tests/unit/test_spec_drafter.cpp.

    python3 tools/train/dump_drafter_reference.py --model models/dsv4-small --out tests/fixtures/dspark-reference.safetensors

The target (transformers DeepseekV4ForCausalLM) and both drafters (arch.DSpark, arch.MTP1) are built from exactly
the exported checkpoint: every official tensor is dequantized (FP8 e4m3 + E8M0 128x128 block scales, FP4 e2m1 +
E8M0 1x32 scales, BF16) to fp32 and loaded through transformers' own checkpoint conversion, as export.py does.
For each case (prompt ids, anchor position a): the target runs on ids[:a] (features of positions < a), the DSpark
block anchored at ids[a] gives per slot the draft logits and the confidence logit (drafts chosen by argmax,
teacher-free: x_k = argmax of slot k), and MTP-1 gives the logits of the token at a + 1 (its output at a - 1).
Written tensors (F32 / I64): case.{i}.input_ids [a+1], case.{i}.dspark_tokens [g], case.{i}.dspark_logits [g, V],
case.{i}.dspark_conf [g], case.{i}.mtp1_logits [V].
"""
import argparse, json, os, sys, tempfile
import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch  # noqa: E402
import transformers  # noqa: E402

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])


class Official:
    """Dequantizing reader of one official-format safetensors file."""

    def __init__(self, path):
        self.f = safe_open(path, framework="pt")
        self.names = set(self.f.keys())

    def get(self, name):
        t = self.f.get_tensor(name)
        base = name[:-len(".weight")] if name.endswith(".weight") else name
        if t.dtype == torch.float8_e4m3fn:
            e = self.f.get_tensor(base + ".scale").view(torch.uint8).float() - 127
            s = (2.0 ** e).repeat_interleave(128, 0)[:t.shape[0]].repeat_interleave(128, 1)[:, :t.shape[1]]
            return t.float() * s
        if t.dtype == torch.int8 and ".experts." in name:
            codes = t.view(torch.uint8)
            lo, hi = (codes & 15).long(), (codes >> 4).long()
            v = torch.stack([E2M1[lo], E2M1[hi]], -1).reshape(t.shape[0], t.shape[1] * 2)
            e = self.f.get_tensor(base + ".scale").view(torch.uint8).float() - 127
            return v * (2.0 ** e).repeat_interleave(32, 1)
        return t.float() if t.dtype.is_floating_point else t


def load_hf(cfg_kwargs, lookup):
    """A DeepseekV4ForCausalLM whose every saved tensor `k` is lookup(official_name(k)) (None: keep init)."""
    m = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**cfg_kwargs)).float()
    with tempfile.TemporaryDirectory() as tmp:
        m.save_pretrained(tmp, safe_serialization=True)
        from safetensors.torch import load_file
        saved = load_file(os.path.join(tmp, "model.safetensors"))
        out = {}
        for k, v in saved.items():
            t = lookup(arch.gf.official_name(k))
            out[k] = (t if t is not None else v).contiguous()
        save_file(out, os.path.join(tmp, "model.safetensors"))
        return transformers.DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()


def core_lookup(ck, prefix, n_layers, shared):
    last = f"{prefix}{n_layers - 1}."

    def f(on):
        if on in ("embed.weight", "head.weight"):
            return shared.get(on)
        if on.startswith("layers."):
            return ck.get(prefix + on[len("layers."):])
        return ck.get(last + on)  # hc_head_* / norm.weight
    return f


def set_core(core, m):
    core.layers.load_state_dict(m.model.layers.state_dict())
    core.hc_head.load_state_dict(m.model.hc_head.state_dict())
    core.norm.load_state_dict(m.model.norm.state_dict())


def load_shipped(model_dir):
    """(official config, target config kwargs, target, DSpark, MTP1) with exactly the dequantized checkpoint weights."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tcfg = arch.target_config(cfg["vocab_size"])
    main_ck = Official(os.path.join(model_dir, "model.safetensors"))
    target = load_hf(tcfg, lambda on: main_ck.get(on) if on in main_ck.names else None)
    for p in target.parameters():
        p.requires_grad_(False)
    layer_ids, g = cfg["dspark_target_layer_ids"], cfg["dspark_block_size"]
    ds = arch.DSpark(tcfg, layer_ids, cfg["dspark_noise_token_id"], n_layers=cfg["num_nextn_predict_layers"],
                     block=g, rank=cfg["dspark_markov_rank"])
    set_core(ds.core, load_hf(ds.cfg_kwargs, core_lookup(main_ck, "mtp.", cfg["num_nextn_predict_layers"], main_ck)))
    last = f"mtp.{cfg['num_nextn_predict_layers'] - 1}."
    with torch.no_grad():
        ds.main_proj.weight.copy_(main_ck.get("mtp.0.main_proj.weight"))
        ds.main_norm.weight.copy_(main_ck.get("mtp.0.main_norm.weight"))
        ds.markov_embed.weight.copy_(main_ck.get(last + "markov_head.embed.weight"))
        ds.markov_head.weight.copy_(main_ck.get(last + "markov_head.head.weight"))
        ds.confidence.weight.copy_(main_ck.get(last + "confidence_head.weight"))
        ds.confidence.bias.copy_(main_ck.get(last + "confidence_head.bias"))
    mtp_ck = Official(os.path.join(model_dir, cfg.get("mtp1_file", "mtp1/model.safetensors")))
    mtp = arch.MTP1(tcfg)
    set_core(mtp.core, load_hf(mtp.cfg_kwargs, core_lookup(mtp_ck, "mtp.", 1, main_ck)))
    with torch.no_grad():
        for n in ("e_proj", "h_proj"):
            getattr(mtp, n).weight.copy_(mtp_ck.get(f"mtp.0.{n}.weight"))
        for n in ("enorm", "hnorm"):
            getattr(mtp, n).weight.copy_(mtp_ck.get(f"mtp.0.{n}.weight"))
    ds.eval(); mtp.eval()
    return cfg, tcfg, target, ds, mtp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg, tcfg, target, ds, mtp = load_shipped(a.model)
    layer_ids, g = cfg["dspark_target_layer_ids"], cfg["dspark_block_size"]

    # Cases: held-out-like text from this repository's docs, tokenized; anchors inside and past the 64 window.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "tools", "train", "arch.py"), encoding="utf-8").read()
    ids = [0] + tok.encode(text).ids
    cases = [(ids[:30], 23), (ids[200:300], 90), (ids[400:480], 41)]
    tap = arch.FeatureTap(target, sorted(set(layer_ids + [tcfg["num_hidden_layers"] - 1])))
    out = {}
    with torch.no_grad():
        for i, (seq, anchor) in enumerate(cases):
            x = torch.tensor([seq[:anchor + 1]])
            target(x[:, :anchor], use_cache=False)
            feats = arch.dspark_features(tap, layer_ids)  # [1, anchor, m*D]
            xl = tap.out[tcfg["num_hidden_layers"] - 1].float()
            h = ds.backbone(target.model.embed_tokens, feats, x, torch.tensor([[anchor]]))[:, 0]  # [1, g, D]
            prev = x[:, anchor]
            toks, lgs, cfs = [], [], []
            for k in range(g):
                lg, c = ds.head(target.lm_head, h[:, k], prev)
                prev = lg.argmax(-1)
                toks.append(int(prev)); lgs.append(lg[0]); cfs.append(float(c))
            ml = mtp(target.model.embed_tokens, target.lm_head, xl, x[:, 1:anchor + 1])[0, anchor - 1]
            out[f"case.{i}.input_ids"] = x[0].to(torch.int64)
            out[f"case.{i}.dspark_tokens"] = torch.tensor(toks, dtype=torch.int64)
            out[f"case.{i}.dspark_logits"] = torch.stack(lgs).float()
            out[f"case.{i}.dspark_conf"] = torch.tensor(cfs, dtype=torch.float32)
            out[f"case.{i}.mtp1_logits"] = ml.float()
            # the C++ test also requires its argmax to equal each draft token: report the top-2 margins (a margin
            # below ~1e-3 is at the mercy of the two forwards' rounding)
            margins = [float(v[0] - v[1]) for v in (torch.stack(lgs).topk(2, -1).values)]
            print(f"case {i}: anchor {anchor}, dspark drafts {toks}, conf {[round(c, 3) for c in cfs]}, "
                  f"mtp1 argmax {int(ml.argmax())}, draft top-2 margins {[round(m, 4) for m in margins]}")
    save_file({k: v.contiguous() for k, v in out.items()}, a.out,
              metadata={"generator": "tools/train/dump_drafter_reference.py", "model": os.path.basename(a.model)})


if __name__ == "__main__":
    main()
