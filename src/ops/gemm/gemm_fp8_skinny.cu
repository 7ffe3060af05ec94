// FP8 skinny GEMM on Hopper's wgmma for decode sizes (parameters, token layout and numerics: gemm_fp8_skinny_launch.h;
// plan: gemm_plan.h plan_gemm_fp8_skinny; docs/kernels.md "FP8 skinny wgmma kernel").
//
// CTA = 384 threads. Warpgroup 0 produces: its warp 0 walks the CTA's (item, 128-k block) stages; per stage it waits
// for the slot's `empty` mbarrier, lane 0 arms the slot's `full` mbarrier with the TMA bytes and issues the weight box
// (64 * wg_rows rows x 128 k, 128-byte swizzle) and one activation box per token unit (terms * tok rows x 128 k), and
// every lane cp.asyncs a share of the units' token scales (counted on `full` by cp.async.mbarrier.arrive.noinc).
// Warpgroups 1 and 2 consume (setmaxnreg up): 64 weight rows each (wg_rows 2: rows 0-63 / 64-127 of the tile, one
// token unit; wg_rows 1: the tile's 64 rows, token units 0 / 1), per stage four m64nNk32 wgmmas (N = terms * tok,
// both terms in one accumulator, columns [term 1 tokens | term 2 tokens]), wait, then the promotion
// f[token] = fma(P_term2, w_scale * s2, fma(P_term1, w_scale * s1, f[token])) (the scales are powers of two for E8M0
// weights, so each product of scales is exact), then release the slot. Split-K (splits > 1, one output tile per
// cluster): every CTA leaves its fp32 partial tile in shared memory (over the dead ring) and, after a cluster barrier,
// sums a share of the tile over the cluster's CTAs in rank order through distributed shared memory (no atomics, no
// workspace); splits == 1: persistent, a CTA walks items blockIdx.x, + gridDim.x, ... and stores from registers.
// Both kernels are programmatic dependent launches (cuda/pdl.h, where pdl_enabled()): each waits before touching
// memory an earlier kernel writes; the GEMM's CTAs start during the quantization and prefetch their first weight
// stages into L2 and load their first item's weight scales before that wait.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/func_smem.h"
#include "cuda/pdl.cuh"
#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_fp8_skinny_wgmma.cuh"
#include "ops/gemm/gemm_lt_quant.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace cg = cooperative_groups;
namespace lt = dsinfer::ops::gemm_lt;
namespace sm90 = dsinfer::cuda::sm90;

constexpr int kThreads = 384;
// setmaxnreg: the launch gives 168 a thread (65,536 / 384 rounded down to 8); the producer warpgroup gives up to 56,
// the consumers take 224 (128 x 56 + 256 x 224 = 64,512 <= 65,536).
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
constexpr int kQuantWarps = 8;

// ---- 1. activation quantization (the cuBLASLt engine's warp step, gemm_lt_quant.cuh) ----

// Warp w owns (token m, block b) = (w % tokens, w / tokens) of the padded tokens (units * tok) and the
// groups * K / 128 blocks; lane l channels [4l, 4l + 4) of the block. Padded tokens: zero codes, scale 0.
__global__ void __launch_bounds__(32 * kQuantWarps) gemm_fp8sk_quant_kernel(const Fp8SkinnyArgs a, const Fp8SkinnyParams p) {
  dsinfer::cuda::pdl_wait_then_release();  // x is the previous kernel's output
  const int64_t warp = int64_t(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  const int64_t tokens = int64_t(p.units) * p.tok, kbg = a.K / lt::kActBlock, kt = a.groups * a.K;
  const int64_t rows = fp8sk_rows(p);
  if (warp >= tokens * a.groups * kbg) return;
  const int64_t m = warp % tokens, b = warp / tokens;
  const int64_t col = b * lt::kActBlock + 4 * lane;
  if (m >= a.M) {
    for (int t = 0; t < p.terms; ++t) {
      const int64_t r = fp8sk_row(m, t, p.terms, p.tok);
      *reinterpret_cast<uint32_t*>(a.q + r * kt + col) = 0u;
      if (lane == 0) a.s[b * rows + r] = 0.0f;
    }
    return;
  }
  const float* xb = a.x + m * a.ldx + (b / kbg) * a.x_gstride + (b % kbg) * lt::kActBlock + 4 * lane;
  float v[4];
  lt::load_lane4(xb, a.x_vec, v);
  float sc = 0.0f;
  const uint32_t word = lt::quantize_warp(v, sc);
  const int64_t r0 = fp8sk_row(m, 0, p.terms, p.tok);
  *reinterpret_cast<uint32_t*>(a.q + r0 * kt + col) = word;
  if (lane == 0) a.s[b * rows + r0] = sc;
  if (p.terms < 2) return;  // uniform
  float res[4];
  lt::residual4(v, word, sc, res);
  float sc2 = 0.0f;
  const uint32_t word2 = lt::quantize_warp(res, sc2);
  const int64_t r1 = fp8sk_row(m, 1, p.terms, p.tok);
  *reinterpret_cast<uint32_t*>(a.q + r1 * kt + col) = word2;
  if (lane == 0) a.s[b * rows + r1] = sc2;
}

// ---- 2. the GEMM ----

// K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart (the layout TMA writes).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return sm90::wgmma_desc(addr, 16, 1024) | (uint64_t(1) << 62);
}
// The descriptor d with `units` 16-byte units added to its start address, in the low word alone (the callers' sums
// stay within the field's 14 bits, so nothing carries into the fields above).
__device__ __forceinline__ uint64_t desc_add(uint64_t d, uint32_t units) {
  return (d & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(d) + units);
}
// The box at (c0, c1) of a 2-D tensor map into L2 only (no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_l2(const void* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Shared-memory loads by address (the pointers into the 1024-aligned dynamic buffer are generic to the compiler).
__device__ __forceinline__ float2 lds2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ float lds1(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The weight scale of 128-row block `rb` and 128-k block `kb`.
__device__ __forceinline__ float weight_scale(const Fp8SkinnyArgs& a, int64_t rb, int64_t kb) {
  const int64_t j = rb * (a.K / 128) + kb;
  return a.scale_e8m0
             ? small_float::from_bits(small_float::e8m0_f32_bits(static_cast<const uint8_t*>(a.wscale)[j]))
             : static_cast<const float*>(a.wscale)[j];
}

// One item = weight row tile x token tile.
struct Item {
  int64_t row0;    // first weight row of the CTA tile (over groups * N rows)
  int64_t group;   // its group
  int64_t unit0;   // first token unit of the token tile
};
__device__ __forceinline__ Item item_of(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, int64_t it) {
  const int halves = 2 / p.wg_rows;
  const int64_t rt = it / p.token_tiles, tt = it % p.token_tiles;
  const int64_t row0 = rt * 64 * p.wg_rows;
  return {row0, a.groups > 1 ? row0 / a.N : 0, tt * halves};
}

// The output of accumulator element i of f-group j of consumer thread (wg, t): y[token][row] (+)= v.
__device__ __forceinline__ void store_out(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, const Item& it, int wg,
                                          int t, int j, int i, float v, int tok) {
  const int row_off = p.wg_rows == 2 ? 64 * wg : 0, half = p.wg_rows == 2 ? 0 : wg;
  const int64_t m = fp8sk_out_token(it.unit0, half, tok, t, j, i);
  const int64_t n = fp8sk_out_row(it.row0, row_off, t, i) - it.group * a.N;
  if (m >= a.M || n >= a.N) return;
  float* yp = a.y + it.group * a.y_gstride + m * a.ldy + n;
  *yp = a.accumulate ? *yp + v : v;
}

// A consumer thread's weight scales of one item: 128-k blocks kb0 + t + 128 j of its 128-row block (j < kFp8SkWsRegs).
__device__ __forceinline__ void load_item_scales(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, int64_t it,
                                                 int row_off, int64_t kb0, int64_t kb1, int t,
                                                 float (&ws)[kFp8SkWsRegs]) {
  if (it >= p.items) return;
  const int64_t rb = (item_of(a, p, it).row0 + row_off) / 128;
#pragma unroll
  for (int j = 0; j < kFp8SkWsRegs; ++j) {
    const int64_t kb = kb0 + t + 128 * j;
    if (kb < kb1) ws[j] = weight_scale(a, rb, kb);
  }
}

// One CTA's view of the ring and of its share of the work (gemm_fp8sk_kernel sets it up once).
struct SkCta {
  uint8_t* smem;     // the 1024-aligned ring: S stages of `stage` bytes, then full[S], empty[S], the weight scales
  uint32_t smem0, bar0;
  float* wsc;        // [2][kb_per_split] weight scales, one row per consumer warpgroup
  int S, halves, sw, sx, stage, split;
  int64_t cluster, clusters, kb0, kb1, rows_q;
};

// A position in the ring, advanced one stage at a time: its slot and that slot's mbarrier parity (a wrap flips it).
// Kept as a running cursor because slot = n % S and parity = n / S of a 64-bit stage count cost a 64-bit division on
// every stage, in the chain every consumer waits on (ncu, session 31: ~40 of the loop's ~230 instructions).
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next(int S) {
    if (++slot == S) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

// Warp 0 of the producer warpgroup: per (item, 128-k block) stage the weight box and the units' activation boxes by
// TMA and the token scales by cp.async, all counted on the slot's `full` mbarrier.
template <int TOK, int TERMS>
__device__ __forceinline__ void produce(const CUtensorMap& wmap, const CUtensorMap& xmap, const Fp8SkinnyArgs& a,
                                        const Fp8SkinnyParams& p, const SkCta& c) {
  constexpr int NCOL = TERMS * TOK;
  const int S = c.S, halves = c.halves, sw = c.sw, sx = c.sx, stage = c.stage;
  const uint32_t smem0 = c.smem0, bar0 = c.bar0;
  const int64_t cluster = c.cluster, clusters = c.clusters, kb0 = c.kb0, kb1 = c.kb1, rows_q = c.rows_q;
  const int lane = int(threadIdx.x);
  const int chunks = halves * NCOL / 4;  // 16-byte pieces of the stage's token scales
  RingPos pos;
  for (int64_t it = cluster; it < p.items; it += clusters) {
    const Item item = item_of(a, p, it);
    for (int64_t kb = kb0; kb < kb1; ++kb, pos.next(S)) {
      const int s = pos.slot;
      const uint32_t full = bar0 + 8 * s, empty = bar0 + 8 * (S + s), base = smem0 + uint32_t(s * stage);
      sm90::mbar_wait(empty, pos.phase ^ 1u);
      const int64_t kx = item.group * a.K + kb * 128;  // column of the quantized activations
      if (lane == 0) {
        sm90::mbar_arrive_expect_tx(full, uint32_t(sw + sx));
        sm90::tma_load_2d(base, &wmap, int(kb * 128), int(item.row0), full);
        for (int h = 0; h < halves; ++h)
          sm90::tma_load_2d(base + uint32_t(sw + h * NCOL * 128), &xmap, int(kx),
                            int((item.unit0 + h) * NCOL), full);
      }
      const float* srow = a.s + (kx / 128) * rows_q + item.unit0 * NCOL;  // halves units are contiguous
      for (int q = lane; q < chunks; q += 32)
        sm90::cp_async16(base + uint32_t(sw + sx + 16 * q), srow + 4 * q, true);
      sm90::mbar_arrive_cp_async(full);
    }
  }
}

// Consumer warpgroup `warpgroup` (1 or 2): per item the stages' wgmmas and the fp32 promotion, then the item's
// outputs (splits == 1) or its partial tile into the dead ring (splits > 1). The item's weight scales are loaded one
// item ahead into registers (the first item's before the PDL wait: the weight is no kernel's output), so that no item
// starts behind a global load.
template <int TOK, int TERMS>
__device__ __forceinline__ void consume(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, const SkCta& c,
                                        int warpgroup) {
  constexpr int NCOL = TERMS * TOK;  // wgmma N
  constexpr int ND = NCOL / 2;       // block accumulator floats per thread
  constexpr int NF = TOK / 2;        // promoted accumulator floats per thread (both terms of a token in one)
  constexpr int NJ = TOK / 8;        // 8-token column groups per term
  const int S = c.S, sw = c.sw, sx = c.sx, stage = c.stage;
  uint8_t* const smem = c.smem;
  const uint32_t smem0 = c.smem0, bar0 = c.bar0;
  float* const wsc = c.wsc;
  const int64_t cluster = c.cluster, clusters = c.clusters, kb0 = c.kb0, kb1 = c.kb1;
  const int wg = warpgroup - 1, t = int(threadIdx.x) % 128, lane = t % 32;
  const int row_off = p.wg_rows == 2 ? 64 * wg : 0, half = p.wg_rows == 2 ? 0 : wg;
  const int bar_id = 2 + wg;
  float* my_wsc = wsc + wg * p.kb_per_split;
  float ws_next[kFp8SkWsRegs];
  load_item_scales(a, p, cluster, row_off, kb0, kb1, t, ws_next);
  // Every thread waits for the quantization (and, through it, every earlier kernel) before touching x's codes, the
  // scales or y (cuda/pdl.h's rule).
  dsinfer::cuda::pdl_wait_then_release();
  // The wgmma descriptors of slot 0; slot s's are these plus s * stage / 16 (the start address field counts 16-byte
  // units and no sum leaves its 14 bits: shared memory ends below 2^18), the k step's plus 2 (32 bytes).
  const uint64_t da0 = sw128_desc(smem0 + uint32_t(row_off * 128));
  const uint64_t db0 = sw128_desc(smem0 + uint32_t(sw + half * NCOL * 128));
  RingPos pos;
  for (int64_t it = cluster; it < p.items; it += clusters) {
    const Item item = item_of(a, p, it);
    sm90::named_sync(bar_id, 128);  // the previous item's promotions have read my_wsc
#pragma unroll
    for (int j = 0; j < kFp8SkWsRegs; ++j)
      if (kb0 + t + 128 * j < kb1) my_wsc[t + 128 * j] = ws_next[j];
    sm90::named_sync(bar_id, 128);
    load_item_scales(a, p, it + clusters, row_off, kb0, kb1, t, ws_next);
    float f[NF];
#pragma unroll
    for (int i = 0; i < NF; ++i) f[i] = 0.0f;
    // The stage at ring position q: wait for its slot, issue its four wgmmas into d, commit.
    auto issue = [&](float (&d)[ND], const RingPos& q) {
      sm90::mbar_wait(bar0 + 8 * q.slot, q.phase);
      const uint32_t off = uint32_t(q.slot * stage) >> 4;
      fence_acc(d);
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        fp8sk::Wgmma<NCOL>::run(d, desc_add(da0, off + 2 * ks), desc_add(db0, off + 2 * ks), ks > 0 ? 1 : 0);
      sm90::wgmma_commit();
    };
    // The finished block sums d of the stage at ring position q (128-k block kb) promoted into f; then its slot is
    // released.
    auto promote = [&](float (&d)[ND], const RingPos& q, int64_t kb) {
      fence_acc(d);
      const float ws = lds1(sm90::smem_u32(my_wsc + (kb - kb0)));
      const uint32_t ss = smem0 + uint32_t(q.slot * stage) + uint32_t(sw + sx);  // the stage's token scales
#pragma unroll
      for (int j = 0; j < NJ; ++j) {  // elements i and i + 1 (even i) are adjacent tokens: one 8-byte load
        const float2 s1 = lds2(ss + 4 * fp8sk_scale_index(half, NCOL, TOK, 0, t, j, 0));
        const float c0 = ws * s1.x, c1 = ws * s1.y;
        f[4 * j + 0] = fmaf(d[4 * j + 0], c0, f[4 * j + 0]);
        f[4 * j + 1] = fmaf(d[4 * j + 1], c1, f[4 * j + 1]);
        f[4 * j + 2] = fmaf(d[4 * j + 2], c0, f[4 * j + 2]);
        f[4 * j + 3] = fmaf(d[4 * j + 3], c1, f[4 * j + 3]);
        if constexpr (TERMS == 2) {
          const float2 s2 = lds2(ss + 4 * fp8sk_scale_index(half, NCOL, TOK, 1, t, j, 0));
          const float e0 = ws * s2.x, e1 = ws * s2.y;
          f[4 * j + 0] = fmaf(d[4 * (j + NJ) + 0], e0, f[4 * j + 0]);
          f[4 * j + 1] = fmaf(d[4 * (j + NJ) + 1], e1, f[4 * j + 1]);
          f[4 * j + 2] = fmaf(d[4 * (j + NJ) + 2], e0, f[4 * j + 2]);
          f[4 * j + 3] = fmaf(d[4 * (j + NJ) + 3], e1, f[4 * j + 3]);
        }
      }
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(bar0 + 8 * (S + q.slot));
    };
    for (int64_t kb = kb0; kb < kb1; ++kb, pos.next(S)) {
      float d[ND];
      issue(d, pos);
      sm90::wgmma_wait<0>();
      promote(d, pos, kb);
    }
    if (p.splits == 1) {
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) store_out(a, p, item, wg, t, j, i, f[4 * j + i], TOK);
    } else {
      // one item per cluster (the plan's rule): the ring is dead once both consumers are past their last wgmma
      sm90::named_sync(1, 256);
      float* part = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < NF; ++i) part[fp8sk_partial_index(i, wg * 128 + t)] = f[i];
    }
  }
}

// Split-K (splits > 1): every thread of every CTA of the cluster sums a share of the item's tile over the cluster's
// partial tiles in rank order through distributed shared memory and stores it.
template <int TOK>
__device__ __forceinline__ void splitk_sum(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, const SkCta& c) {
  constexpr int NF = TOK / 2;
  uint8_t* const smem = c.smem;
  const int split = c.split;
  const int64_t cluster = c.cluster;
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  if (cluster < p.items) {
    const Item item = item_of(a, p, cluster);
    const float* part = reinterpret_cast<const float*>(smem);
    const int total = 256 * NF;
    for (int e = split * kThreads + int(threadIdx.x); e < total; e += p.splits * kThreads) {
      float v = 0.0f;
      for (int r = 0; r < p.splits; ++r) v += cl.map_shared_rank(part, unsigned(r))[e];
      const int ct = e % 256, i = e / 256;  // e = fp8sk_partial_index(i, ct)
      store_out(a, p, item, ct / 128, ct % 128, i / 4, i % 4, v, TOK);
    }
  }
  cl.sync();  // the peers' shared memory outlives the reads
}

template <int TOK, int TERMS>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_fp8sk_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                      const Fp8SkinnyArgs a, const Fp8SkinnyParams p) {
  extern __shared__ uint8_t smem_raw[];
  SkCta c;
  c.smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  c.S = p.stages;
  c.halves = 2 / p.wg_rows;
  c.sw = fp8sk_stage_w(p.wg_rows);
  c.sx = fp8sk_stage_x(TERMS, TOK, p.wg_rows);
  c.stage = fp8sk_stage_bytes(TERMS, TOK, p.wg_rows);
  uint64_t* bars = reinterpret_cast<uint64_t*>(c.smem + c.S * c.stage);  // full[S], empty[S]
  c.wsc = reinterpret_cast<float*>(bars + 2 * c.S);
  c.smem0 = sm90::smem_u32(c.smem);
  c.bar0 = sm90::smem_u32(bars);
  c.split = p.splits > 1 ? int(blockIdx.x) % p.splits : 0;
  c.cluster = int64_t(blockIdx.x) / p.splits;
  c.clusters = int64_t(gridDim.x) / p.splits;
  const int64_t kbg = a.K / 128;
  c.kb0 = int64_t(c.split) * p.kb_per_split;
  c.kb1 = c.kb0 + p.kb_per_split < kbg ? c.kb0 + p.kb_per_split : kbg;
  c.rows_q = fp8sk_rows(p);
  const int S = c.S;
  const uint32_t bar0 = c.bar0;
  const int warpgroup = int(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      sm90::mbar_init(bar0 + 8 * s, 33);           // lane 0's arrive.expect_tx + 32 lanes' cp.async arrivals
      sm90::mbar_init(bar0 + 8 * (S + s), 8);      // lane 0 of each consumer warp
    }
    fence_barrier_init();
    sm90::fence_proxy_async();  // the initialised barriers visible to the async proxy (TMA's complete_tx)
    tma_prefetch_desc(&wmap);
    tma_prefetch_desc(&xmap);
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (threadIdx.x == 0 && c.cluster < p.items) {
      // The weight is no kernel's output: its first stages go to L2 while the quantization kernel this one follows
      // (programmatic dependent launch) still runs.
      const int64_t row0 = item_of(a, p, c.cluster).row0;
      for (int64_t kb = c.kb0; kb < c.kb1 && kb < c.kb0 + S; ++kb) tma_prefetch_l2(&wmap, int(kb * 128), int(row0));
    }
    // Every thread waits for the quantization (and, through it, every earlier kernel) before touching x's codes,
    // the scales or y (cuda/pdl.h's rule).
    dsinfer::cuda::pdl_wait_then_release();
    if (threadIdx.x < 32) produce<TOK, TERMS>(wmap, xmap, a, p, c);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    consume<TOK, TERMS>(a, p, c, warpgroup);  // waits for the earlier kernels itself
  }
  if (p.splits > 1) splitk_sum<TOK>(a, p, c);
}

template <int TOK, int TERMS>
cudaError_t launch_gemm(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, cudaStream_t st) {
  constexpr int NCOL = TERMS * TOK;
  CUtensorMap wmap, xmap;
  {
    const cuuint64_t dims[2] = {cuuint64_t(a.K), cuuint64_t(a.groups * a.N)};
    const cuuint64_t strides[1] = {cuuint64_t(a.K)};
    const cuuint32_t box[2] = {128, cuuint32_t(64 * p.wg_rows)};
    if (!dsinfer::cuda::encode_tiled_map_128b(wmap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, a.wdata, dims, strides, box))
      return cudaErrorInvalidValue;
  }
  {
    const cuuint64_t dims[2] = {cuuint64_t(a.groups * a.K), cuuint64_t(fp8sk_rows(p))};
    const cuuint64_t strides[1] = {cuuint64_t(a.groups * a.K)};
    const cuuint32_t box[2] = {128, cuuint32_t(NCOL)};
    if (!dsinfer::cuda::encode_tiled_map_128b(xmap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, a.q, dims, strides, box))
      return cudaErrorInvalidValue;
  }
  const void* fn = reinterpret_cast<const void*>(gemm_fp8sk_kernel<TOK, TERMS>);
  const cudaError_t e = dsinfer::cuda::raise_max_dynamic_smem(fn, size_t(p.smem));
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = size_t(p.smem);
  cfg.stream = st;
  cudaLaunchAttribute attr[2];
  unsigned na = 0;
  if (p.splits > 1) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = unsigned(p.splits);
    attr[na].val.clusterDim.y = 1;
    attr[na].val.clusterDim.z = 1;
    ++na;
  }
  if (dsinfer::cuda::pdl_enabled()) {  // the kernel waits (pdl_wait_then_release) before any x / y access
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  cfg.attrs = attr;
  cfg.numAttrs = na;
  return cudaLaunchKernelEx(&cfg, gemm_fp8sk_kernel<TOK, TERMS>, wmap, xmap, a, p);
}

}  // namespace

int launch_fp8sk_quant(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, void* stream) {
  const int64_t warps = int64_t(p.units) * p.tok * a.groups * (a.K / 128);
  const int64_t blocks = (warps + kQuantWarps - 1) / kQuantWarps;
  return int(dsinfer::cuda::pdl_launch(gemm_fp8sk_quant_kernel, dim3(unsigned(blocks)), dim3(32 * kQuantWarps), 0,
                                       static_cast<cudaStream_t>(stream), a, p));
}

int launch_fp8sk_gemm(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.terms == 2) {
    switch (p.tok) {
      case 8: return int(launch_gemm<8, 2>(a, p, st));
      case 16: return int(launch_gemm<16, 2>(a, p, st));
      case 32: return int(launch_gemm<32, 2>(a, p, st));
      case 64: return int(launch_gemm<64, 2>(a, p, st));
      case 128: return int(launch_gemm<128, 2>(a, p, st));
    }
  } else if (p.terms == 1) {
    switch (p.tok) {
      case 16: return int(launch_gemm<16, 1>(a, p, st));
      case 32: return int(launch_gemm<32, 1>(a, p, st));
      case 64: return int(launch_gemm<64, 1>(a, p, st));
      case 128: return int(launch_gemm<128, 1>(a, p, st));
    }
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace dsinfer::ops::cuda::detail
