#!/usr/bin/env python3
"""Self-checks of arch.py (CPU, seconds):  python3 tools/train/test_arch.py
1. layer_forward (explicit-mask re-implementation) equals transformers' DeepseekV4DecoderLayer on a causal
   sliding-window mask; 2. DSpark's block output for an anchor does not depend on context at or after the anchor
   nor on other blocks; 3. MTP1 is causal."""
import sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import arch
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mv4


def main():
    torch.manual_seed(0)
    tcfg = arch.target_config(512)
    tcfg.update(sliding_window=8)
    core = arch._Core(arch.drafter_config(tcfg, 1), 1)
    with torch.no_grad():  # make sinks / hc / norms non-trivial
        for n, p in core.named_parameters():
            p.add_(torch.randn_like(p) * 0.05)
    layer = core.layers[0].eval()
    B, S, D = 2, 20, tcfg["hidden_size"]
    X = torch.randn(B, S, 4, D)
    pos = torch.arange(S)[None].expand(B, -1)
    cos, sin = core.rotary(X, pos, layer_type="main")
    mask = arch.causal_sliding_mask(S, 8, X.device)
    ref = layer(X, position_embeddings={"main": (cos, sin), "compress": (cos, sin)}, position_ids=pos,
                attention_mask=mask.expand(B, -1, -1, -1), input_ids=None)
    mine = arch.layer_forward(layer, X, cos, sin, mask)
    err = (ref - mine).abs().max().item()
    print("layer_forward vs transformers layer: max abs err", err)
    assert err < 1e-4

    V = 512
    embed = torch.nn.Embedding(V, D)
    head = torch.nn.Linear(D, V, bias=False)
    ds = arch.DSpark(tcfg, [0, 1], noise_id=V - 1).eval()
    S = 30
    feats = torch.randn(1, S, 2 * D)
    ids = torch.randint(0, V, (1, S))
    anchors = torch.tensor([[10, 20]])
    with torch.no_grad():
        h1 = ds.backbone(embed, feats, ids, anchors)
        f2 = feats.clone(); f2[:, 10:] += 1.0  # context at/after anchor 10 changes
        h2 = ds.backbone(embed, f2, ids, anchors)
        ids3 = ids.clone(); ids3[0, 20] = (ids3[0, 20] + 1) % V  # anchor token of block 2 changes
        h3 = ds.backbone(embed, feats, ids3, anchors)
    e_a = (h1[:, 0] - h2[:, 0]).abs().max().item()
    e_b = (h1[:, 0] - h3[:, 0]).abs().max().item()
    e_c = (h1[:, 1] - h3[:, 1]).abs().max().item()
    print("dspark block 1 vs future context", e_a, "vs other block", e_b, "(both 0); block 2 changes", e_c)
    assert e_a < 1e-5 and e_b < 1e-5 and e_c > 1e-3

    mtp = arch.MTP1(tcfg).eval()
    xm = torch.randn(1, S, 4, D)
    nid = torch.randint(0, V, (1, S))
    with torch.no_grad():
        l1 = mtp(embed, head, xm, nid)
        xm2 = xm.clone(); xm2[:, 15:] += 1
        l2 = mtp(embed, head, xm2, nid)
    e = (l1[:, :15] - l2[:, :15]).abs().max().item()
    print("mtp causal (MoE row-subset float noise only)", e)
    assert e < 1e-5
    print("OK")


if __name__ == "__main__":
    main()
