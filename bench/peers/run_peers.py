#!/usr/bin/env python3
"""Peers' kernels at our exact DeepSeek-V4-Flash shapes, next to ours (bench/peers/README.md).

  run_peers.py peers --out peers.json     time the peers that can run here (needs torch and a GPU)
  run_peers.py table --peers peers.json --gemm gemm.log --moe moe.log --attn attn.log --model-bench bench.log
                                          our times (parsed from our bench binaries' logs of the same device call)
                                          as a ratio to the best peer on the same shapes; a markdown table

Peers (never a dependency of the engine; wheels carried to the GPU machine by hand):
  DeepGEMM (sgl-deep-gemm 0.1.5.post1): fp8_gemm_nt (1x128 activation / 128x128 weight fp32 scales), the masked and
    contiguous grouped FP8 GEMMs (gate/up + down of the routed experts; the masked one also as wo_a's 8 groups),
    fp8_paged_mqa_logits (indexer scores).
  FlashMLA (sglang-kernel 0.4.5, sgl_kernel/flashmla_ops.abi3.so + flash_mla.py only): the V4 sparse decode over
    584-byte FP8 KV rows, the 128-token window plus the compressed entries (top-512 on CSA), attention sink.
  FlashInfer 0.7.2.post1: fp8_blockscale_gemm_sm90, cutlass_fused_moe (MXFP4 x FP8), radix_topk, when importable.
  torch.topk: the top-512 of the indexer scores when nothing better runs.
A peer that cannot run is recorded with its reason. Timing as in our benches: CUDA events around single calls after
warm-up, median of 25, inputs rotated over several sets (weights and state far beyond the 60 MB L2), random data.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time
import traceback

# V4-Flash shapes (configs/deepseek-v4-flash/config.json).
D, H, HD, ROPE, QR, E, K_TOP, I = 4096, 64, 512, 64, 1024, 256, 6, 2048
HI, DI, W, TOPK, POS = 64, 128, 128, 512, 4095
KV_ROW = 584  # 448 e4m3 NoPE + 64 bf16 RoPE dims + 7 UE8M0 scales padded to 8 bytes
DENSE = [("wq_a", 1024, 4096), ("wq_b", 32768, 1024), ("wkv", 512, 4096), ("wo_b", 4096, 8192),
         ("shared w1/w3", 2048, 4096), ("shared w2", 4096, 2048), ("idx wq_b", 8192, 1024)]
GEMM_M = [int(m) for m in os.environ.get("DSINFER_PEER_GEMM_M", "64,1024,4096").split(",")]  # rows of the dense peers
# Which dense shapes (names in DENSE; all when unset): issue 31 times wq_a / wq_b / wo_b at decode sizes.
GEMM_SHAPES = [n for n in os.environ.get("DSINFER_PEER_GEMM_SHAPES", "").split(",") if n]
MOE_T = [int(t) for t in os.environ.get("DSINFER_PEER_MOE_T", "64,4096").split(",")]  # tokens of the MoE peers
DECODE_B = [1, 64, 256]
WARM, RUNS = 3, 25


def warm_clocks(seconds=2):
    """Two seconds of GEMMs before any timing: the clocks idle at 345 MHz and the first small kernels would time the
    ramp."""
    import torch
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    end = time.time() + seconds
    while time.time() < end:
        x @ x
        torch.cuda.synchronize()
    del x


def peer_script_args(doc):
    """The FlashMLA peer scripts' command line (DIR --flashmla-dir F [--ours LOG]), then FlashMLA imported from F and
    the clocks warmed: (args, flash_mla)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("dir")
    ap.add_argument("--flashmla-dir", required=True)
    ap.add_argument("--ours", default="")
    a = ap.parse_args()
    sys.path.insert(0, a.flashmla_dir)
    from sgl_kernel import flash_mla
    warm_clocks()
    return a, flash_mla


def time_us(calls, warm=WARM, runs=RUNS):
    """Per-call time in us: a CUDA graph of every call in `calls` 4 times, replayed (the median of 5 replays after
    one), so that Python's launch overhead (40-70 us a call here) does not count against the peer; the median of
    `runs` single calls with events when the calls cannot be captured."""
    import torch
    for i in range(warm):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(4):
                for f in calls:
                    f()
        g.replay()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(5):
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3 / (4 * len(calls)))
        return statistics.median(ts)
    except Exception as e:  # noqa: BLE001 - not capturable: single calls
        print(f"graph capture failed ({reason(e)}): single calls", flush=True)
        torch.cuda.synchronize()
    return time_single_us(calls, warm, runs)


def time_single_us(calls, warm=WARM, runs=RUNS):
    """Median of `runs` single calls (CUDA events), rotating over `calls`, after `warm` warm-ups."""
    import torch
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(warm):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    ts = []
    for i in range(runs):
        f = calls[i % len(calls)]
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def reason(e):
    msg = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return msg[:300]


def fp8(t):
    import torch
    return t.clamp(-448, 448).to(torch.float8_e4m3fn)


def routing(T, seed):
    """Uniform random top-6 of 256 experts per token (as bench/moe_bench.cu): rows per expert."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.rand(T, E, generator=g).topk(K_TOP, dim=1).indices
    return torch.bincount(idx.flatten(), minlength=E)


def import_deepgemm(res):
    try:
        import deep_gemm as dg
        return dg
    except Exception as e:  # noqa: BLE001 - any import failure is the reason this peer cannot run
        res["unavailable"]["DeepGEMM"] = reason(e)
        return None


def peers_deepgemm_dense(res):
    import torch
    dg = import_deepgemm(res)
    if dg is None:
        return
    dev = "cuda"
    for name, N, Kd in DENSE:
        if GEMM_SHAPES and name not in GEMM_SHAPES:
            continue
        for M in GEMM_M:
            key = f"gemm|{name}|{M}"
            try:
                sets = []
                # Enough sets that one pass over them (what a graph replays) moves ~150 MB, far beyond the L2.
                nsets = max(2, min(64, math.ceil(150e6 / (N * Kd + M * Kd))))
                for _ in range(nsets):
                    x = fp8(torch.randn(M, Kd, device=dev))
                    xs = torch.rand(M, Kd // 128, device=dev) + 0.5
                    w = fp8(torch.randn(N, Kd, device=dev))
                    ws = torch.rand((N + 127) // 128, Kd // 128, device=dev) + 0.5
                    d = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
                    sets.append(lambda x=x, xs=xs, w=w, ws=ws, d=d: dg.fp8_gemm_nt((x, xs), (w, ws), d))
                res["peers"].setdefault(key, {})["DeepGEMM fp8_gemm_nt"] = time_us(sets)
                print(f"{key}: DeepGEMM fp8_gemm_nt {res['peers'][key]['DeepGEMM fp8_gemm_nt']:.2f} us", flush=True)
            except Exception as e:  # noqa: BLE001
                res["failed"][f"{key}|DeepGEMM"] = reason(e)


def peers_deepgemm_wo_a(res):
    """V4's grouped output projection wo_a (8 groups of 1,024 x 4,096) as DeepGEMM's masked grouped FP8 GEMM: x
    [8, M, 4,096] e4m3 with 1x128 scales, every group M rows (masked_m = M), bf16 out. Keys gemm|wo_a|M (M from
    DSINFER_PEER_GEMM_M), next to dsinfer_gemm_bench --grouped's PEERROW grouped lines. Written in session 15 and
    not yet run (DeepGEMM's wheels did not fit that device call beside the binaries)."""
    import torch
    dg = import_deepgemm(res)
    if dg is None:
        return
    dev, G, NG, KG = "cuda", 8, 1024, 4096
    fn = next((getattr(dg, n) for n in ("m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked")
               if hasattr(dg, n)), None)
    if fn is None:
        res["unavailable"]["DeepGEMM masked (wo_a)"] = "no masked grouped FP8 GEMM in this deep_gemm"
        return
    for M in GEMM_M:
        key = f"gemm|wo_a|{M}"
        try:
            m_max = int(math.ceil(M / 64) * 64)
            nsets = max(2, min(16, math.ceil(150e6 / (G * NG * KG + G * m_max * KG))))
            sets = []
            for _ in range(nsets):
                a = fp8(torch.randn(G, m_max, KG, device=dev))
                a_s = torch.rand(G, m_max, KG // 128, device=dev) + 0.5
                w = fp8(torch.randn(G, NG, KG, device=dev))
                w_s = torch.rand(G, NG // 128, KG // 128, device=dev) + 0.5
                d = torch.empty(G, m_max, NG, device=dev, dtype=torch.bfloat16)
                masked = torch.full((G,), M, dtype=torch.int32, device=dev)
                sets.append(lambda a=a, a_s=a_s, w=w, w_s=w_s, d=d, masked=masked: fn((a, a_s), (w, w_s), d, masked, M))
            res["peers"].setdefault(key, {})["DeepGEMM masked grouped"] = time_us(sets)
            print(f"{key}: DeepGEMM masked grouped {res['peers'][key]['DeepGEMM masked grouped']:.2f} us", flush=True)
        except Exception as e:  # noqa: BLE001
            res["failed"][f"{key}|DeepGEMM masked"] = reason(e)


def peers_deepgemm_grouped(res):
    import torch
    dg = import_deepgemm(res)
    if dg is None:
        return
    dev = "cuda"
    # Routed experts of one layer as FP8 x FP8 grouped GEMMs: gate/up [2I, D] then down [D, I] per expert.
    try:
        align = dg.get_mk_alignment_for_contiguous_layout()
    except Exception:  # noqa: BLE001 - older name
        align = 128
    w13 = fp8(torch.randn(E, 2 * I, D, device=dev))
    s13 = torch.rand(E, 2 * I // 128, D // 128, device=dev) + 0.5
    w2 = fp8(torch.randn(E, D, I, device=dev))
    s2 = torch.rand(E, D // 128, I // 128, device=dev) + 0.5
    for T in MOE_T:
        counts = routing(T, 1234 + T)
        key = f"moe|{T}"
        res["notes"][key] = f"{int((counts > 0).sum())} experts hit, max {int(counts.max())} rows"
        # Contiguous: each expert's rows padded to the alignment, a row -> expert map (-1 = padding).
        try:
            padded = [int(math.ceil(int(c) / align) * align) for c in counts]
            m_sum = sum(padded)
            layout = torch.full((m_sum,), -1, dtype=torch.int32)
            off = 0
            for e_, (c, p) in enumerate(zip(counts.tolist(), padded)):
                layout[off:off + c] = e_
                off += p
            layout = layout.to(dev)
            a1 = fp8(torch.randn(m_sum, D, device=dev))
            a1s = torch.rand(m_sum, D // 128, device=dev) + 0.5
            d1 = torch.empty(m_sum, 2 * I, device=dev, dtype=torch.bfloat16)
            a2 = fp8(torch.randn(m_sum, I, device=dev))
            a2s = torch.rand(m_sum, I // 128, device=dev) + 0.5
            d2 = torch.empty(m_sum, D, device=dev, dtype=torch.bfloat16)
            up = time_us([lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a1, a1s), (w13, s13), d1, layout)])
            down = time_us([lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a2, a2s), (w2, s2), d2, layout)])
            res["peers"].setdefault(key, {})["DeepGEMM grouped contiguous"] = up + down
            res["notes"][key + "|contiguous"] = f"gate/up {up:.1f} us + down {down:.1f} us, {m_sum} padded rows"
        except Exception as e:  # noqa: BLE001
            res["failed"][f"{key}|DeepGEMM contiguous"] = reason(e)
        # Masked: [experts, max rows, K] with the real row counts.
        try:
            m_max = int(math.ceil(max(int(counts.max()), 1) / 64) * 64)
            masked = counts.to(dtype=torch.int32, device=dev)
            expected = max(1, int(round(T * K_TOP / E)))
            a1 = fp8(torch.randn(E, m_max, D, device=dev))
            a1s = torch.rand(E, m_max, D // 128, device=dev) + 0.5
            d1 = torch.empty(E, m_max, 2 * I, device=dev, dtype=torch.bfloat16)
            a2 = fp8(torch.randn(E, m_max, I, device=dev))
            a2s = torch.rand(E, m_max, I // 128, device=dev) + 0.5
            d2 = torch.empty(E, m_max, D, device=dev, dtype=torch.bfloat16)
            fn = next(getattr(dg, n) for n in ("m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked",
                                                "m_grouped_fp8_fp4_gemm_nt_masked") if hasattr(dg, n))
            up = time_us([lambda: fn((a1, a1s), (w13, s13), d1, masked, expected)])
            down = time_us([lambda: fn((a2, a2s), (w2, s2), d2, masked, expected)])
            res["peers"].setdefault(key, {})["DeepGEMM grouped masked"] = up + down
            res["notes"][key + "|masked"] = f"gate/up {up:.1f} us + down {down:.1f} us, {m_max} rows per expert"
        except Exception as e:  # noqa: BLE001
            res["failed"][f"{key}|DeepGEMM masked"] = reason(e)
    del w13, s13, w2, s2
    torch.cuda.empty_cache()
    # The CSA indexer of one decode step: scores of the 1,024 compressed keys (4K context, ratio 4) for 64 heads of
    # 128 dims with per-head weights (FP8 keys + fp32 scale, 132 B rows), then the top-512 (torch.topk).
    for B in DECODE_B:
        key = f"topk|{B}"
        try:
            ctx, block = (POS + 1) // 4, 64
            nblk = ctx // block
            sets = []
            pool = max(1, min(256, 512 // B))
            for s_ in range(pool):
                q = fp8(torch.randn(B, 1, HI, DI, device=dev))
                kv = torch.randint(0, 0x78, (B * nblk, block, 1, DI + 4), device=dev, dtype=torch.uint8)
                wts = torch.randn(B, HI, device=dev)
                lens = torch.full((B, 1), ctx, device=dev, dtype=torch.int32)  # [batch, next_n]
                table = torch.arange(B * nblk, device=dev, dtype=torch.int32).view(B, nblk)
                meta = dg.get_paged_mqa_logits_metadata(lens, block, dg.get_num_sms())

                def call(q=q, kv=kv, wts=wts, lens=lens, table=table, meta=meta):
                    logits = dg.fp8_paged_mqa_logits(q, kv, wts, lens, table, meta, ctx, False)
                    return torch.topk(logits, TOPK, dim=-1)
                sets.append(call)
            res["peers"].setdefault(key, {})["DeepGEMM mqa_logits + torch.topk"] = time_us(sets)
        except Exception as e:  # noqa: BLE001
            res["failed"][f"{key}|DeepGEMM mqa_logits"] = reason(e)


def peers_topk_torch(res):
    import torch
    for B in DECODE_B:
        key = f"topk|{B}"
        sets = [lambda x=torch.randn(B, (POS + 1) // 4, device="cuda"): torch.topk(x, TOPK, dim=-1) for _ in range(4)]
        res["peers"].setdefault(key, {})["torch.topk (top-k alone)"] = time_us(sets)


def peers_flashmla(res):
    import torch
    try:
        sys.path.insert(0, res["flashmla_dir"])
        from sgl_kernel import flash_mla  # the two files unzipped from sglang-kernel 0.4.5
    except Exception as e:  # noqa: BLE001
        res["unavailable"]["FlashMLA"] = reason(e)
        return
    dev, block = "cuda", 64
    pool = 512
    # Window rings: 128 rows per sequence; compressed entries: 1,024 (CSA, ratio 4) or 32 (HCA, ratio 128).
    swa = torch.randint(0, 0x78, (pool * W // block, block, 1, KV_ROW), device=dev, dtype=torch.uint8)
    for kind, entries, topk in (("CSA", (POS + 1) // 4, TOPK), ("HCA", (POS + 1) // 128, (POS + 1) // 128)):
        ext = torch.randint(0, 0x78, (pool * entries // block, block, 1, KV_ROW), device=dev, dtype=torch.uint8)
        sink = torch.randn(H, device=dev, dtype=torch.float32)
        ext_k = max(64, int(math.ceil(topk / 64) * 64))  # the kernel's top-k block; the tail is -1
        for B in DECODE_B:
            key = f"attn|{kind}|{B}"
            err = None
            for dt in (torch.float8_e4m3fn, torch.uint8):
                try:
                    sets = []
                    for g in range(min(256, pool // B)):  # b1: 256 x 0.37 MB of KV rows, beyond the L2
                        seqs = torch.arange(g * B, (g + 1) * B, device=dev)
                        swa_idx = (seqs[:, None] * W + torch.arange(W, device=dev)[None, :]).int().view(B, 1, W)
                        sel = torch.stack([torch.randperm(entries, device=dev)[:topk].sort().values for _ in range(B)])
                        ext_idx = torch.full((B, 1, ext_k), -1, device=dev, dtype=torch.int32)
                        ext_idx[:, 0, :topk] = (seqs[:, None] * entries + sel).int()
                        q = torch.randn(B, 1, H, HD, device=dev, dtype=torch.bfloat16)
                        swa_len = torch.full((B,), W, device=dev, dtype=torch.int32)
                        ext_len = torch.full((B,), topk, device=dev, dtype=torch.int32)
                        meta = flash_mla.get_mla_metadata()[0]
                        kc, ec = swa.view(dt), ext.view(dt)

                        def call(q=q, swa_idx=swa_idx, ext_idx=ext_idx, swa_len=swa_len, ext_len=ext_len, meta=meta,
                                 kc=kc, ec=ec):
                            return flash_mla.flash_mla_with_kvcache(
                                q, kc, None, None, HD, meta, None, softmax_scale=HD ** -0.5, causal=False,
                                is_fp8_kvcache=True, indices=swa_idx, attn_sink=sink, extra_k_cache=ec,
                                extra_indices_in_kvcache=ext_idx, topk_length=swa_len, extra_topk_length=ext_len)
                        sets.append(call)
                    res["peers"].setdefault(key, {})["FlashMLA sparse decode"] = time_us(sets)
                    err = None
                    break
                except Exception as e:  # noqa: BLE001
                    err = e
            if err is not None:
                res["failed"][f"{key}|FlashMLA"] = reason(err)
        del ext
        torch.cuda.empty_cache()


def peers_flashinfer(res):
    try:
        import flashinfer  # noqa: F401
    except Exception as e:  # noqa: BLE001
        res["unavailable"]["FlashInfer"] = (
            "not on the GPU machine: " + reason(e) + ". flashinfer-python 0.7.2.post1 is a 62 MB wheel that needs "
            "cuda-tile, nccl4py, nvidia-cutlass-dsl and nvidia-cudnn-frontend and JIT-compiles its CUTLASS kernels "
            "(fp8_blockscale_gemm_sm90, cutlass_fused_moe) with nvcc at first use: more than a device call carries "
            "(64 MiB with the tree) and builds in its 10 minutes")
        return
    res["unavailable"]["FlashInfer"] = "importable, but not wired into this script yet"


def cmd_peers(args):
    import torch
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "peers": {}, "failed": {},
           "unavailable": {}, "notes": {}, "flashmla_dir": args.flashmla_dir}
    warm_clocks()
    # Most wanted first: a time limit that stops the call keeps what finished (the file is rewritten after each).
    for f in (peers_flashinfer, peers_flashmla, peers_topk_torch, peers_deepgemm_grouped, peers_deepgemm_wo_a,
              peers_deepgemm_dense):
        if args.only and f.__name__ not in args.only.split(","):
            continue
        try:
            f(res)
        except Exception as e:  # noqa: BLE001 - one peer's crash must not hide the others
            res["failed"][f.__name__] = reason(e)
            traceback.print_exc()
        torch.cuda.synchronize()
        print(f"{f.__name__}: done", flush=True)
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    print(json.dumps({k: res[k] for k in ("failed", "unavailable")}, indent=1))


def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def ours_from_logs(args):
    """Our times in us, keyed like the peers', from our bench binaries' logs."""
    ours, how = {}, {}
    for m in re.finditer(r"^PEERROW gemm (.+?) N=\d+ K=\d+ M=(\d+) runner_us=([-\d.]+) kernel_us=([-\d.]+)",
                         read(args.gemm), re.M):
        name, M, run, ker = m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4))
        if run > 0:
            ours[f"gemm|{name}|{M}"] = run
            how[f"gemm|{name}|{M}"] = "runner path (cuBLASLt block-scaled, x2)" + (
                f"; our kernel {ker:.1f}" if ker > 0 else "")
    moe = read(args.moe)
    for T in MOE_T:
        # Decode table: "T experts MB | with shared: floor exact (x) fast (x %) | routed only: floor exact (x) fast ..."
        m = re.search(rf"^\s*{T}\s+\d+\s+[\d.]+\s*\|.*\|\s*([\d.]+)\s+([\d.]+)\s+\(\s*[\d.]+x\)\s+([\d.]+)", moe, re.M)
        if m and T <= 1024:
            ours[f"moe|{T}"] = float(m.group(3))
            how[f"moe|{T}"] = "moe_cuda fast path, routed only (FP4 experts, fp32 in/out, permute + SwiGLU included)"
        g = re.search(rf"^grouped prefill GEMMs \(routed only\):\s+{T}\s+[\d.]+\s*\|\s*([\d.]+)\s+[\d.]+\s*\|\s*([\d.]+)"
                      rf"\s+[\d.]+\s*\|\s*([\d.]+)", moe, re.M)
        if g and T > 1024:
            ours[f"moe|{T}"] = float(g.group(3)) * 1e3
            how[f"moe|{T}"] = "moe_cuda grouped path, routed only (FP4 experts, fp32 in/out, permute + SwiGLU included)"
    seen = set()
    for m in re.finditer(r"^(CSA|HCA)\s+tc\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)(?:\s+\S+){4}\s+([\d.]+)",
                         read(args.attn), re.M):
        key = f"attn|{m.group(1)}|{m.group(2)}"
        if key in seen:
            continue  # the first tc row of a batch is the runner's split count
        seen.add(key)
        ours[key] = float(m.group(5))
        how[key] = (f"tensor-core kernel, {m.group(3)} splits, fp32 state rows (2,048 B); 20 calls back to back "
                    f"(single call with launch: {m.group(4)} us)")
    # indexer_topk of the model bench (one CSA layer among the 4): the decode cases, ms summed over layers.
    text = read(args.model_bench)
    for block in re.split(r"\n== ", text):
        hm = re.match(r"decode: (\d+) seqs", block)
        tm = re.search(r"^indexer_topk\s+([\d.]+)", block, re.M)
        if hm and tm:
            key = f"topk|{hm.group(1)}"
            ours[key] = float(tm.group(1)) * 1e3
            how[key] = "indexer_topk op of dsinfer bench (scores + top-512, the one CSA layer)"
    return ours, how


def cmd_table(args):
    res = json.loads(read(args.peers) or "{}")
    peers = res.get("peers", {})
    ours, how = ours_from_logs(args)
    keys = sorted(set(peers) | set(ours), key=lambda k: (k.split("|")[0], k))
    print(f"# peers on {res.get('device', '?')} (torch {res.get('torch', '?')}); ratio = ours / best peer "
          "(> 1: the peer is faster)\n")
    print("| kernel | shape | ours (us) | best peer | peer (us) | ratio |")
    print("|---|---|---|---|---|---|")
    for k in keys:
        parts = k.split("|")
        shape = {"gemm": lambda p: f"{p[1]}, M = {p[2]}", "moe": lambda p: f"routed experts, T = {p[1]}",
                 "attn": lambda p: f"{p[1]}, batch {p[2]}", "topk": lambda p: f"batch {p[1]}"}[parts[0]](parts)
        # Same work only: a peer that does part of the op ("alone") is listed below, not ranked.
        best = min(((p, t) for p, t in peers.get(k, {}).items() if "alone" not in p), key=lambda kv: kv[1],
                   default=None)
        o = ours.get(k)
        o_s = f"{o:.1f}" if o else "-"
        p_name, p_s = (best[0], f"{best[1]:.1f}") if best else ("-", "-")
        ratio = f"{o / best[1]:.2f}" if best and o else "-"
        print(f"| {parts[0]} | {shape} | {o_s} | {p_name} | {p_s} | {ratio} |")
    print("\nWhat each side runs:")
    for k in keys:
        if k in how:
            print(f"- ours {k}: {how[k]}")
        for p, t in sorted(peers.get(k, {}).items()):
            print(f"- peer {k}: {p} {t:.1f} us")
    for k, v in sorted(res.get("notes", {}).items()):
        print(f"- note {k}: {v}")
    for k, v in sorted(res.get("failed", {}).items()):
        print(f"- FAILED {k}: {v}")
    for k, v in sorted(res.get("unavailable", {}).items()):
        print(f"- UNAVAILABLE {k}: {v}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peers")
    p.add_argument("--out", required=True)
    p.add_argument("--flashmla-dir", default="", help="folder holding sgl_kernel/{flash_mla.py,flashmla_ops.abi3.so}")
    p.add_argument("--only", default="", help="comma-separated peer functions to run (e.g. peers_deepgemm_grouped)")
    t = sub.add_parser("table")
    for name in ("peers", "gemm", "moe", "attn", "model-bench"):
        t.add_argument(f"--{name}", default="")
    args = ap.parse_args()
    return cmd_peers(args) if args.cmd == "peers" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
