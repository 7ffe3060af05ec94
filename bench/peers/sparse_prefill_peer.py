#!/usr/bin/env python3
"""FlashMLA's SM90 sparse prefill on exactly the lists `dsinfer_attention_fp8_bench --prefill-only --ab --dump DIR`
gave our split-block prefill kernel (issue 30: the peer of sparse_attention_prefill_split on the same inputs).

  sparse_prefill_peer.py DIR --flashmla-dir FLASHMLA [--ours LOG]

DIR holds prefill_q.bin (bf16 [2048, 64, 512]: every call's q), prefill_sinks.bin (fp32 [64]), prefill_win.bin and
prefill_ent.bin (the window and compressed caches: 584-byte MODEL1 rows in 37,440-byte blocks of 64, ops/kv_format),
per layer l prefill_l{l}_idx0 / len0 (window rows, 128 a token) and idx1 / len1 (compressed entries) for the 4,096
tokens, and prefill_out_l2c1.bin (our split op's bf16 output of layer 2's second chunk).

FlashMLA's sparse prefill reads bf16 rows, so both caches are dequantised here as our staging does (e4m3 x 2^(s - 127)
rounded once to bf16, the RoPE channels as stored) into one kv [4,096 + 1,024, 1, 512]; a token's list is its window
rows then its compressed entries (+ 4,096), -1 padded to a multiple of 128, with topk_length = both lengths. The
calls are the bench's: 4 layers x 2 chunks of 2,048 tokens, the same q, scale 512^-0.5, the sinks. Timing:
run_peers.py's time_us (a CUDA graph of the calls 4 times, median of 5 replays) over all 8 calls and per layer.
FlashMLA's output has no inverse RoPE of its last 64 dims (ours applies it in the epilogue), so the check compares
dims 0..447 of layer 2's second chunk: ||ours - FlashMLA|| / ||FlashMLA||, ~1e-3 expected (each side rounds to
bf16 once: 2^-8 at most a value). FLOPs: 131,072 a (token, key), as the bench counts them. --ours: the bench's log;
its RESULT lines give ours beside FlashMLA.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_peers import peer_script_args, time_us  # noqa: E402

T, CHUNK, H, D, W, NOPE = 4096, 2048, 64, 512, 128, 448
BLOCK, BLOCK_BYTES, DATA, SCALE = 64, 37440, 576, 8
BF16_PEAK = 781e12  # the bench's figure (bench/NOTES.md, session 15)


def e4m3_table():
    """fp32 value of each e4m3fn byte (0x7F / 0xFF NaN)."""
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        v = m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = np.nan if (b & 127) == 127 else (-v if b & 128 else v)
    return t


def bf16_bits(x):
    """Round-to-nearest-even fp32 -> bf16 bits (uint16), NaN kept NaN."""
    u = x.astype(np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def dequant(path, rows):
    """The staging's bf16 rows (as uint16 bits) of a MODEL1 cache: [rows, 512]: e4m3 x 2^(s - 127) rounded once to
    bf16, then the 64 bf16 RoPE channels as stored."""
    raw = np.fromfile(path, dtype=np.uint8)
    blocks = raw.size // BLOCK_BYTES
    raw = raw[:blocks * BLOCK_BYTES].reshape(blocks, BLOCK_BYTES)
    data = raw[:, :BLOCK * DATA].reshape(blocks, BLOCK, DATA)
    sc = raw[:, BLOCK * DATA:BLOCK * DATA + BLOCK * SCALE].reshape(blocks, BLOCK, SCALE)
    codes = e4m3_table()[data[..., :NOPE]].reshape(blocks, BLOCK, 7, 64)
    scale = np.ldexp(np.float32(1), sc[..., :7].astype(np.int32) - 127).astype(np.float32)
    nope = bf16_bits((codes * scale[..., None]).reshape(blocks, BLOCK, NOPE))
    rope = np.ascontiguousarray(data[..., NOPE:]).view(np.uint16)
    return np.concatenate([nope, rope], axis=-1).reshape(blocks * BLOCK, D)[:rows]


def token_lists(idx0, len0, idx1, len1, offset1):
    """FlashMLA's indices [tokens, topk] (window rows, then compressed entries + offset1, -1 padded to a multiple of
    128) and topk_length [tokens] from the bench's lists (idx0 [tokens, 128], idx1 [tokens, s1] or empty)."""
    n = len0.size
    s1 = idx1.size // n
    topk = (W + s1 + 127) // 128 * 128
    ind = np.full((n, topk), -1, dtype=np.int32)
    for t in range(n):
        a, b = int(len0[t]), int(len1[t]) if s1 else 0
        ind[t, :a] = idx0[t * W:t * W + a]
        if b:
            ind[t, a:a + b] = idx1[t * s1:t * s1 + b] + offset1
    return ind, (len0 + (len1 if s1 else 0)).astype(np.int32)


def main():
    a, flash_mla = peer_script_args(__doc__)
    import torch
    dev = "cuda"
    f = lambda name: os.path.join(a.dir, name)  # noqa: E731
    q = torch.from_numpy(np.fromfile(f("prefill_q.bin"), dtype=np.uint16).view(np.int16)).to(dev)
    q = q.view(torch.bfloat16).view(CHUNK, H, D)
    sinks = torch.from_numpy(np.fromfile(f("prefill_sinks.bin"), dtype=np.float32)).to(dev)
    kv = np.concatenate([dequant(f("prefill_win.bin"), T), dequant(f("prefill_ent.bin"), T // 4)])
    kv = torch.from_numpy(kv.view(np.int16)).to(dev).view(torch.bfloat16).view(-1, 1, D).contiguous()
    scale = D ** -0.5
    calls, layer_calls, keys, check = [], [], 0.0, None
    for li in range(4):
        i32 = lambda name: np.fromfile(f(f"prefill_l{li}_{name}.bin"), dtype=np.int32)  # noqa: E731
        ind, lengths = token_lists(i32("idx0"), i32("len0"), i32("idx1"), i32("len1"), T)
        topk = ind.shape[1]
        keys += float(lengths.astype(np.float64).sum())
        ind = torch.from_numpy(ind).to(dev)
        lengths = torch.from_numpy(lengths).to(dev)
        mine = []
        for c in range(2):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            ic, lc = ind[sl].view(CHUNK, 1, topk).contiguous(), lengths[sl].contiguous()

            def call(ic=ic, lc=lc):
                return flash_mla.flash_mla_sparse_fwd(q, kv, ic, scale, D, attn_sink=sinks, topk_length=lc)
            mine.append(call)
            if li == 2 and c == 1:
                check = call
        calls += mine
        layer_calls.append(mine)
    flops = keys * 131072.0
    print(f"prefill 4096 (2 chunks of 2048, 4 layers): {keys / T:.1f} keys a token, {flops / 1e9:.1f} GFLOP",
          flush=True)
    out = check()[0]
    ours = torch.from_numpy(np.fromfile(f("prefill_out_l2c1.bin"), dtype=np.uint16).view(np.int16)).to(dev)
    ours = ours.view(torch.bfloat16).view(CHUNK, H, D)
    ref = out.float()[..., :NOPE]
    err = float((ours.float()[..., :NOPE] - ref).norm() / ref.norm())
    nonfinite = int((~torch.isfinite(out.float())).sum())
    print(f"check (layer 2, second chunk, dims < 448): ||ours - FlashMLA|| / ||FlashMLA|| = {err:.3e}, "
          f"{nonfinite} non-finite in FlashMLA's", flush=True)
    print(f"RESULT peer_prefill check {err:.3e} nonfinite {nonfinite}", flush=True)
    total = time_us(calls) * len(calls)
    print(f"FlashMLA sparse prefill: {total / 1e3:.3f} ms, {flops / total / 1e6:.0f} TFLOP/s, "
          f"{100.0 * flops / (total * 1e-6) / BF16_PEAK:.1f} % of the BF16 peak", flush=True)
    print(f"RESULT peer_prefill total {total:.2f}", flush=True)
    per_layer = []
    for li, lc in enumerate(layer_calls):
        us = time_us(lc) * len(lc)
        per_layer.append(us)
        print(f"  layer {li}: FlashMLA {us:.1f} us", flush=True)
        print(f"RESULT peer_prefill layer{li} {us:.2f}", flush=True)
    if a.ours:
        b, layers = [], {}
        for line in open(a.ours):
            m = re.match(r"RESULT prefill B ([\d.]+)", line)
            if m:
                b.append(float(m.group(1)))
            m = re.match(r"RESULT prefill layer(\d) A ([\d.]+) B ([\d.]+)", line)
            if m:
                layers[int(m.group(1))] = float(m.group(3))
        if b:
            ob = min(b)
            print(f"\n| kernel | ms (4 layers) | TFLOP/s | % BF16 peak |\n|---|---|---|---|\n"
                  f"| FlashMLA sparse prefill | {total / 1e3:.3f} | {flops / total / 1e6:.0f} | "
                  f"{100.0 * flops / (total * 1e-6) / BF16_PEAK:.1f} |\n| ours (split op, staging included) | "
                  f"{ob / 1e3:.3f} | {flops / ob / 1e6:.0f} | {100.0 * flops / (ob * 1e-6) / BF16_PEAK:.1f} |")
            print(f"ours / FlashMLA: {ob / total:.2f}x the time")
        for li in sorted(layers):
            print(f"  layer {li}: ours {layers[li]:.1f} us, FlashMLA {per_layer[li]:.1f} us "
                  f"({layers[li] / per_layer[li]:.2f}x)")


if __name__ == "__main__":
    main()
