#!/usr/bin/env python3
"""Self-checks of the drafter-retraining pieces (CPU, ~1 minute):  python3 tools/train/test_retrain.py

- determinism.dense_moe computes the same function as transformers' sparse experts (rounding aside);
- fixed-shape evaluation (evaluate.Runner with fixed=(rows, length)): a prefix's logits are bitwise identical
  whatever follows it, whatever row it sits in and whatever the other rows hold -- the property that makes the
  greedy speculative runs equal to the target's greedy decode;
- train.draft_loss (distill) is ~0 for KL / L1 when the draft equals the target, train.sample_anchors stays in range;
- verify_export.py accepts an unchanged model and rejects one whose target tensor bytes changed.
"""
import json, os, shutil, struct, subprocess, sys, tempfile
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch  # noqa: E402
import determinism  # noqa: E402
import evaluate  # noqa: E402
import train  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "models", "dsv4-small")


def tiny_target():
    cfg = arch.target_config(512)
    m = arch.make_target(cfg, 0).eval()
    with torch.no_grad():  # non-trivial routing bias, as in a trained model
        for n, b in m.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    return m


def test_dense_moe_and_fixed_shapes():
    m = tiny_target()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(3, 512, (2, 40), generator=g)
    with torch.no_grad():
        sparse = m(x, use_cache=False).logits
        with determinism.dense_moe():
            dense = m(x, use_cache=False).logits
    err = (sparse - dense).abs().max().item()
    assert err < 1e-4 * max(1.0, sparse.abs().max().item()), err
    run = evaluate.Runner(m, None, None, [2, 3, 4], fixed=(3, 48))
    s = x[0, :30].tolist()
    _, a, _, _ = run.forward([s], "cpu", rows=[0])
    other = torch.randint(3, 512, (40,), generator=g).tolist()
    _, b, _, _ = run.forward([other, s + torch.randint(3, 512, (6,), generator=g).tolist()], "cpu", rows=[0, 2])
    assert torch.equal(a[0, :30], b[2, :30]), (a[0, :30] - b[2, :30]).abs().max()
    run.fixed = None  # the old evaluation: the same comparison usually differs by rounding (not asserted)
    _, a, _, _ = run.forward([s], "cpu")
    _, b, _, _ = run.forward([other, s + [5] * 6], "cpu")
    print("dense MoE max |diff| vs sparse", err, "; fixed-shape prefix logits bitwise equal; variable shapes: "
          f"max |diff| {(a[0, :30] - b[1, :30]).abs().max().item():.3g}")


def test_losses_and_anchors():
    p = torch.softmax(torch.randn(4, 7, 50), -1)
    loss, ce, l1, agree, _ = train.draft_loss(p.log(), p, torch.zeros(4, 7, dtype=torch.long), torch.ones(4, 7),
                                              "distill")
    assert l1.abs().max() < 1e-5 and agree.min() == 1
    assert torch.allclose(loss, 0.5 * ce + 0.5 * 0 + 0.5 * l1, atol=1e-5)
    lo = torch.tensor([1, 30, 60, 63])
    an = train.sample_anchors(lo, 64, 8, "cpu")
    assert an.min() >= 1 and an.max() <= 62 and (an[1] >= 30).all() and (an[0].unique().numel() == 8)
    print("losses and anchors ok")


def test_verify_export():
    with tempfile.TemporaryDirectory() as tmp:
        new = os.path.join(tmp, "model")
        shutil.copytree(MODEL, new, ignore=shutil.ignore_patterns("training"))
        v = [sys.executable, os.path.join(HERE, "verify_export.py"), "--base", MODEL, "--new", new]
        assert subprocess.run(v, capture_output=True).returncode == 0
        path = os.path.join(new, "model.safetensors")
        with open(path, "r+b") as f:  # flip one byte of the first target tensor
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
            name = next(k for k in sorted(hdr) if k != "__metadata__" and not k.startswith("mtp."))
            f.seek(8 + n + hdr[name]["data_offsets"][0])
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 1]))
        r = subprocess.run(v, capture_output=True, text=True)
        assert r.returncode == 1 and name in r.stdout, r.stdout
    print("verify_export ok")


if __name__ == "__main__":
    torch.manual_seed(0)
    test_dense_moe_and_fixed_shapes()
    test_losses_and_anchors()
    test_verify_export()
    print("all retrain checks passed")
