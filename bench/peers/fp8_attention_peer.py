#!/usr/bin/env python3
"""FlashMLA's sparse FP8 decode on exactly the inputs dsinfer_attention_fp8_bench used (its --dump folder).

  fp8_attention_peer.py DIR --flashmla-dir FLASHMLA [--ours LOG]

DIR holds win.bin / {CSA,HCA}_ent.bin (584-byte MODEL1 rows in 37,440-byte blocks of 64, as ops/kv_format writes
them), sinks.bin, and per kind and batch {kind}_{B}_q.bin (bf16), _idx0.bin (window rows), _idx1.bin (entry rows,
-1 padded to a multiple of 64) and _out0.bin (our fp32 output of group 0). The caches are handed to FlashMLA as
[blocks, 64, 1, 584] views with a block stride of 37,440 bytes (FlashMLA tests/quant.py's MODEL1 layout), so the
comparison of group 0's outputs (||ours - FlashMLA|| / ||FlashMLA||) checks our byte layout and semantics, and the
timing (run_peers.py's time_us: a CUDA graph of every group's call 4 times, median of 5 replays) is on the same
bytes. --ours: the bench's log; its RESULT lines give the ratio table.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_peers import peer_script_args, time_us  # noqa: E402

H, D, W, POOL, BLOCK, BLOCK_BYTES, ROW = 64, 512, 128, 512, 64, 37440, 584
KINDS = {"CSA": (1024, 512), "HCA": (32, 32)}


def cache_view(torch, path, dev):
    raw = torch.from_numpy(np.fromfile(path, dtype=np.uint8)).to(dev)
    blocks = raw.numel() // BLOCK_BYTES
    return raw.view(blocks, BLOCK_BYTES)[:, :BLOCK * ROW].view(blocks, BLOCK, 1, ROW)


def main():
    a, flash_mla = peer_script_args(__doc__)
    import torch
    dev = "cuda"
    win = cache_view(torch, os.path.join(a.dir, "win.bin"), dev)
    sinks = torch.from_numpy(np.fromfile(os.path.join(a.dir, "sinks.bin"), dtype=np.float32)).to(dev)
    ours = {}
    if a.ours:
        for line in open(a.ours):
            m = re.match(r"RESULT (\w+) (\d+) ([\d.]+) ([\d.]+) (\d+)", line)
            if m:
                ours[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)), int(m.group(5)))
    rows = []
    for kind, (entries, topk) in KINDS.items():
        ent_path = os.path.join(a.dir, f"{kind}_ent.bin")
        if not os.path.exists(ent_path):
            continue
        ent = cache_view(torch, ent_path, dev)
        for B in (1, 64, 256):
            pre = os.path.join(a.dir, f"{kind}_{B}_")
            if not os.path.exists(pre + "q.bin"):
                continue
            G = min(256, POOL // B)
            q = torch.from_numpy(np.fromfile(pre + "q.bin", dtype=np.uint16).view(np.int16)).to(dev)
            q = q.view(torch.bfloat16).view(G, B, 1, H, D)
            idx0 = torch.from_numpy(np.fromfile(pre + "idx0.bin", dtype=np.int32)).to(dev).view(G, B, 1, W)
            ext_k = max(64, (topk + 63) // 64 * 64)
            idx1 = torch.from_numpy(np.fromfile(pre + "idx1.bin", dtype=np.int32)).to(dev).view(G, B, 1, ext_k)
            swa_len = torch.full((B,), W, device=dev, dtype=torch.int32)
            ext_len = torch.full((B,), topk, device=dev, dtype=torch.int32)
            err, us, note = float("nan"), float("nan"), ""
            for dt in (torch.float8_e4m3fn, torch.uint8):
                try:
                    kc, ec = win.view(dt), ent.view(dt)
                    calls = []
                    for g in range(G):
                        meta = flash_mla.get_mla_metadata()[0]

                        def call(g=g, meta=meta, kc=kc, ec=ec):
                            return flash_mla.flash_mla_with_kvcache(
                                q[g], kc, None, None, D, meta, None, softmax_scale=D ** -0.5, causal=False,
                                is_fp8_kvcache=True, indices=idx0[g], attn_sink=sinks, extra_k_cache=ec,
                                extra_indices_in_kvcache=idx1[g], topk_length=swa_len, extra_topk_length=ext_len)
                        calls.append(call)
                    out = calls[0]()
                    out = out[0] if isinstance(out, (tuple, list)) else out
                    mine = torch.from_numpy(np.fromfile(pre + "out0.bin", dtype=np.float32)).to(dev)
                    ref = out.float().reshape(-1)
                    err = float((mine - ref).norm() / ref.norm())
                    us = time_us(calls)
                    note = ""
                    break
                except Exception as e:  # noqa: BLE001
                    note = f"{type(e).__name__}: {str(e)[:200]}"
            o = ours.get((kind, B))
            rows.append((kind, B, us, err, o, note))
            print(f"{kind} B={B}: FlashMLA {us:.1f} us, ||ours - FlashMLA|| / ||FlashMLA|| = {err:.2e} {note}",
                  flush=True)
    print("\n| layer | batch | FlashMLA us | ours us (q fp32) | ours us (q bf16) | splits | FlashMLA / ours (bf16 q) "
          "| output diff |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, B, us, err, o, note in rows:
        if o:
            print(f"| {kind} | {B} | {us:.1f} | {o[0]:.1f} | {o[1]:.1f} | {o[2]} | {us / o[1]:.2f}x | {err:.1e} |")
        else:
            print(f"| {kind} | {B} | {us:.1f} | - | - | - | - | {err:.1e} |")


if __name__ == "__main__":
    main()
