// Small kernels of the CUDA drafters (see draft_kernels_launch.h): the window attention with explicit key ranges,
// the hc-stream mean of captured target rows, the ring scatter, the greedy draft pick, row copies and a broadcast
// row add. Simple one-block-per-row kernels: the drafter's tensors are small (tens to hundreds of rows). Every one
// waits first (cuda/pdl.cuh) and all but the fused picks launch by PDL, so a launch overlaps the tail of the kernel
// before it.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/draft_kernels/draft_kernels_launch.h"
#include "ops/moe/route.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
using dsinfer::cuda::pdl_launch;
using dsinfer::cuda::pdl_wait_then_release;

// The RoPE of the 4 channels [4c, 4c + 4) of a vector at position `pos` (DraftAttnArgs::rope_dim), inverse or not:
// head_norm_rope's rotation of a chunk (ops/rope/rope.cu norm_rope_vec), the same functions of the same inputs.
__device__ __forceinline__ void rope_chunk(const DraftAttnArgs& a, float (&e)[4], int c, int64_t pos, bool inverse) {
  const int64_t rope_start = a.dim - a.rope_dim;
#pragma unroll
  for (int k = 0; k < 4; k += 2) {
    const int64_t d = 4 * int64_t(c) + k;
    if (d < rope_start) continue;
    float cs, sn;
    dev::rope_cos_sin(a.inv_freq[(d - rope_start) / 2], pos, a.attention_factor, inverse, cs, sn);
    dev::rope_rotate(e[k], e[k + 1], cs, sn);
  }
}

// DraftAttnArgs::q_norm_rope: the raw query vector q (dim channels) normalised and rotated into qs, as
// head_norm_rope's HeadNorm::Unweighted does it: every warp sums the squares in that kernel's lanes and order (so
// every warp holds its inverse RMS), then the block scales and rotates the chunks. Ends at a block barrier.
__device__ __forceinline__ void query_norm_rope(const DraftAttnArgs& a, const float* q, int64_t pos, float* qs) {
  const int lane = int(threadIdx.x & 31), nchunks = int(a.dim / 4);
  const float4* q4 = reinterpret_cast<const float4*>(q);
  double ss = 0.0;
  for (int c = lane; c < nchunks; c += 32) {
    const float4 v = q4[c];
    ss = __dadd_rn(ss, dev::sum_sq4(v.x, v.y, v.z, v.w));
  }
  ss = dev::warp_sum(ss);
  const float inv = dev::rms_inv(ss, a.dim, a.q_eps);
  for (int c = int(threadIdx.x); c < nchunks; c += int(blockDim.x)) {
    const float4 v = q4[c];
    float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) e[k] = __fmul_rn(e[k], inv);  // the unweighted norm (its weight 1: x * 1 = x)
    rope_chunk(a, e, c, pos, false);
    reinterpret_cast<float4*>(qs)[c] = make_float4(e[0], e[1], e[2], e[3]);
  }
  __syncthreads();
}

// 8 warps: a key's score is one warp's (the same lanes' sums in the same order whatever the warp), so more warps
// shorten the score loop without changing a bit (4 warps left ~17 keys a warp at window 64 + block 5).
constexpr int kAttnThreads = 256;
constexpr int kStageBatch = 8;  // float4 loads each thread has in flight while staging

// One block per (token, head). Scores in double like sparse_attention_ref; softmax with the sink in the
// denominator; then every thread owns output channels. kStage (the keys fit shared memory: draft_attention_stages):
// the block first copies its n key rows into shared memory, so the output loop's n serial reads per channel hit
// shared memory instead of global memory behind a 64-bit modulo each (session 22: 31.6 us of the 0.34 ms propose
// graph per layer at batch 1, window 64 + block 5). The copy runs over the block's flat [n, dim] in 16-byte vectors
// where the rows allow it, each thread's kStageBatch loads issued before its stores (a row at a time a warp left
// one global load's latency a row: ~17 in series, session 45). Same values, same order of every sum: the same bits
// either way.
// With DraftAttnArgs::q_norm_rope / out_rope, the query's norm and RoPE and the output's inverse RoPE run here on a
// [dim] vector in shared memory, with head_norm_rope's arithmetic (the same bits as its two launches around this one).
template <bool kStage>
__global__ void draft_attention_kernel(DraftAttnArgs a) {
  pdl_wait_then_release();
  extern __shared__ double smem[];
  const int64_t t = blockIdx.x, h = blockIdx.y, dim = a.dim;
  const DraftKeys k = a.keys[t];
  const int64_t nring = k.ring_hi > k.ring_lo ? k.ring_hi - k.ring_lo : 0;
  const int64_t nnew = k.new_hi > k.new_lo ? k.new_hi - k.new_lo : 0;
  const int64_t n = min(nring + nnew, a.max_keys);
  double* s = smem;                 // [max_keys]
  double* red = smem + a.max_keys;  // [2]: max, denominator
  const float* q = a.q + (t * a.heads + h) * dim;
  const int64_t pos = a.pos ? a.pos[t] : 0;
  auto key = [&](int64_t j) -> const float* {
    if (j < nring) return a.ring + int64_t(k.slot) * a.slot_stride + ((k.ring_lo + j) % a.window) * dim;
    return a.kv + (k.new_lo + (j - nring)) * dim;
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float* staged = reinterpret_cast<float*>(smem + draft_attention_score_doubles(a.max_keys));  // [n, dim] (kStage)
  float* vec = staged + (kStage ? a.max_keys * dim : 0);  // [dim]
  if (a.q_norm_rope) {
    query_norm_rope(a, q, pos, vec);
    q = vec;
  }
  if (kStage) {
    // 16-byte vectors where every row starts on one (the ring's slots and rows, this call's rows).
    const bool vec4 = dim % 4 == 0 && a.slot_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.ring) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.kv) % 16 == 0;
    const int64_t width = vec4 ? 4 : 1, per_row = dim / width, total = n * per_row;
    for (int64_t base = threadIdx.x; base < total; base += int64_t(kStageBatch) * blockDim.x) {
      float4 v[kStageBatch];
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const int64_t idx = base + int64_t(u) * blockDim.x;
        if (idx >= total) continue;
        const float* src = key(idx / per_row) + (idx % per_row) * width;
        v[u] = vec4 ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(__ldg(src), 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const int64_t idx = base + int64_t(u) * blockDim.x;
        if (idx >= total) continue;
        if (vec4) reinterpret_cast<float4*>(staged)[idx] = v[u];
        else staged[idx] = v[u].x;
      }
    }
    __syncthreads();
  }
  auto row = [&](int64_t j) -> const float* { return kStage ? staged + j * dim : key(j); };
  for (int64_t j = warp; j < n; j += warps) {
    const float* kr = row(j);
    double dot = 0.0;
    for (int64_t i = lane; i < dim; i += 32) dot += double(q[i]) * double(kr[i]);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) s[j] = dot * double(a.scale);
  }
  __syncthreads();
  if (warp == 0) {
    const double sink = double(a.sinks[h]);
    double mx = sink;
    for (int64_t j = lane; j < n; j += 32) mx = fmax(mx, s[j]);
    for (int o = 16; o > 0; o /= 2) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double den = 0.0;
    for (int64_t j = lane; j < n; j += 32) {
      s[j] = exp(s[j] - mx);
      den += s[j];
    }
    for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) red[1] = den + exp(sink - mx);
  }
  __syncthreads();
  const double den = red[1];
  float* out = a.out + (t * a.heads + h) * dim;
  float* o = a.out_rope ? vec : out;  // the query's vector is free: every score is taken
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += s[j] * double(row(j)[i]);
    o[i] = float(acc / den);
  }
  if (!a.out_rope) return;
  __syncthreads();
  for (int c = int(threadIdx.x); c < int(dim / 4); c += int(blockDim.x)) {
    const float4 v = reinterpret_cast<const float4*>(vec)[c];
    float e[4] = {v.x, v.y, v.z, v.w};
    rope_chunk(a, e, c, pos, true);
    reinterpret_cast<float4*>(out)[c] = make_float4(e[0], e[1], e[2], e[3]);
  }
}

__global__ void stream_mean_kernel(const float* hidden, const int32_t* rows, int64_t layers, int64_t n, int64_t dim,
                                   float* feats) {
  pdl_wait_then_release();
  const int64_t t = blockIdx.x;
  const float* src = hidden + int64_t(rows[t]) * layers * n * dim;
  for (int64_t idx = threadIdx.x; idx < layers * dim; idx += blockDim.x) {
    const int64_t l = idx / dim, d = idx % dim;
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) s += src[(l * n + j) * dim + d];
    feats[t * layers * dim + idx] = s / float(n);
  }
}

__global__ void ring_scatter_kernel(const float* kv, const int32_t* slot, const int64_t* pos, const int32_t* rows,
                                    int64_t dim, float* ring, int64_t slot_stride, int64_t window) {
  pdl_wait_then_release();
  const int64_t t = rows ? int64_t(rows[blockIdx.x]) : int64_t(blockIdx.x);
  if (slot[t] < 0) return;  // a padding row
  float* dst = ring + int64_t(slot[t]) * slot_stride + (pos[t] % window) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = kv[t * dim + i];
}

constexpr int kPickThreads = 256;

// (value desc, id asc): sampling's argmax order.
__device__ __forceinline__ bool pick_better(float va, int32_t a, float vb, int32_t b) {
  return va > vb || (va == vb && a < b);
}

// The warp's best (value, id) in that order, in every lane (a butterfly over the lanes).
__device__ __forceinline__ void warp_best(float& best, int32_t& idx) {
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (pick_better(ov, oi, best, idx)) {
      best = ov;
      idx = oi;
    }
  }
}

// Each warp's argmax of row[0 .. vocab) in sampling's order (NaN as -inf, ties to the lower id), left in bv / bi
// [warp] behind a block barrier; every thread's best / idx are set to its own warp's winner. The block's winner is the
// first-better fold over bv / bi that each caller does.
__device__ __forceinline__ void warp_argmax(const float* row, int64_t vocab, float& best, int32_t& idx, float* bv,
                                            int32_t* bi) {
  best = -INFINITY;
  idx = 0x7fffffff;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    float x = row[v];
    if (isnan(x)) x = -INFINITY;
    if (pick_better(x, int32_t(v), best, idx)) {
      best = x;
      idx = int32_t(v);
    }
  }
  warp_best(best, idx);
  if (threadIdx.x % 32 == 0) {
    bv[threadIdx.x / 32] = best;
    bi[threadIdx.x / 32] = idx;
  }
  __syncthreads();
}

// One block per sequence: the confidence dot product (double, block reduction), then the argmax, then (next_e)
// the picked token's Markov row for the next position.
__global__ void draft_pick_kernel(DraftPickArgs a) {
  pdl_wait_then_release();
  __shared__ double dsum[kPickThreads / 32];
  __shared__ float bv[kPickThreads / 32];
  __shared__ int32_t bi[kPickThreads / 32];
  __shared__ int32_t picked;
  const int64_t b = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (a.conf_w) {
    double c = 0.0;
    for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) c += double(a.conf_w[i]) * double(a.h[b * a.h_ld + i]);
    for (int64_t i = threadIdx.x; i < a.rank; i += blockDim.x)
      c += double(a.conf_w[a.dim + i]) * double(a.e[b * a.rank + i]);
    for (int o = 16; o > 0; o /= 2) c += __shfl_xor_sync(0xffffffffu, c, o);
    if (lane == 0) dsum[warp] = c;
  }
  const float* row = a.logits + b * a.logits_ld;
  float best;
  int32_t idx;
  warp_argmax(row, a.vocab, best, idx, bv, bi);
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w)
      if (pick_better(bv[w], bi[w], best, idx)) {
        best = bv[w];
        idx = bi[w];
      }
    if (idx == 0x7fffffff) idx = 0;
    a.ids[b * a.out_ld] = idx;
    if (a.prev) a.prev[b] = idx;
    if (a.conf_w && a.conf) {
      double c = double(a.conf_b);
      for (int w = 0; w < int(blockDim.x / 32); ++w) c += dsum[w];
      a.conf[b * a.out_ld] = float(c);
    }
    picked = idx;
  }
  if (!a.next_e) return;
  __syncthreads();  // every read of a.e (the confidence above) is done, and `picked` is set
  const float* src = a.next_table + int64_t(picked) * a.rank;
  for (int64_t i = threadIdx.x; i < a.rank; i += blockDim.x) a.next_e[b * a.rank + i] = src[i];
}

__global__ void copy_rows_kernel(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows,
                                 int64_t width) {
  pdl_wait_then_release();
  const int64_t t = blockIdx.x;
  const float* s = src + (src_rows ? int64_t(src_rows[t]) : t) * width;
  float* d = dst + (dst_rows ? int64_t(dst_rows[t]) : t) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

__global__ void add_rows_kernel(const float* b, int64_t rep, int64_t dim, float* y) {
  pdl_wait_then_release();
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[t * dim + i] += b[(t / rep) * dim + i];
}


// Block-wide argmax of one row in sampling's order (every thread returns the winner).
__device__ int32_t block_argmax(const float* row, int64_t vocab, float* bv, int32_t* bi) {
  float best;
  int32_t idx;
  warp_argmax(row, vocab, best, idx, bv, bi);
  best = bv[0];
  idx = bi[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    if (pick_better(bv[w], bi[w], best, idx)) {
      best = bv[w];
      idx = bi[w];
    }
  __syncthreads();  // bv / bi are reused by the next row
  return idx == 0x7fffffff ? 0 : idx;
}

// One block per padded sequence: the acceptance over its verify rows (stops at the first mismatch), then its rows of
// the next propose's inputs and of the fused ingest.
__global__ void spec_round_kernel(SpecRoundArgs a) {
  pdl_wait_then_release();
  __shared__ float bv[kPickThreads / 32];
  __shared__ int32_t bi[kPickThreads / 32];
  __shared__ int32_t tok[kSpecRoundMaxBlock + 1];
  const int32_t b = int32_t(blockIdx.x), g = a.g;
  const bool real = b < a.B;
  SpecRoundRow r;
  int32_t acc = 0;
  if (real) {
    r = a.rows[b];
    for (int32_t k = 0; k <= r.L; ++k) {
      const int32_t t = block_argmax(a.logits + (int64_t(r.logits_row) + k) * a.vocab, a.vocab, bv, bi);
      if (threadIdx.x == 0) tok[k] = t;
      acc = k;
      if (k == r.L || t != a.drafts[int64_t(b) * g + k]) break;
    }
  }
  __syncthreads();
  const int64_t anchor = real ? r.start_pos + 1 + acc : 0;
  const int32_t bonus = real ? tok[acc] : a.noise_token;
  if (threadIdx.x == 0) {
    a.accepted[b] = real ? acc : 0;
    a.prev[b] = bonus;
  }
  for (int32_t t = threadIdx.x; t <= g; t += blockDim.x) {
    const bool c = real && t <= acc;
    const int64_t i = int64_t(b) * (g + 1) + t;
    a.tokens[i] = c ? tok[t] : -1;
    a.ing_rows[i] = c ? r.cap_row + t : 0;
    a.ing_slot[i] = c ? r.slot : -1;
    a.ing_pos[i] = c ? r.start_pos + t : 0;
  }
  for (int32_t k = threadIdx.x; k < g; k += blockDim.x) {
    const int64_t i = int64_t(b) * g + k;
    a.tok[i] = k == 0 && real ? bonus : a.noise_token;
    a.pos[i] = anchor + k;
    DraftKeys kk;
    kk.slot = real ? r.slot : 0;
    kk.ring_lo = real ? max(max(int64_t(0), anchor - a.window), r.context_start) : 0;
    kk.ring_hi = anchor;
    kk.new_lo = b * g;
    kk.new_hi = b * g + g;
    a.keys[i] = kk;
  }
}

// ---- the fused picks (DraftPicksArgs) ----

// A grid-wide barrier of `n` resident blocks (cooperative groups' grid sync, by hand: the launch is an ordinary one
// so that it captures into the propose graph like every other node). bar[0] counts arrivals, bar[1] is the
// generation; the last arrival resets the count, so the pair is ready for the next barrier and the next launch.
__device__ __forceinline__ void picks_grid_barrier(unsigned* bar, unsigned n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* gen = bar + 1;
    const unsigned g0 = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == n - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == g0) __nanosleep(20);
    }
    __threadfence();
  }
  __syncthreads();
}

// The Markov bias w . x of one vocabulary row w (rank floats as float4 in registers) as the fp32 skinny GEMM kernel
// sums it (gemm_skinny.cu, F32 weights, K = rank <= 256: one K chunk): lane l < rank / 4 of its warp holds the fma
// chain of 16-byte vector l (acc = fma(1, d, 0)), lanes >= rank / 4 hold 0, then the butterfly xor 16, 8, 4, 2, 1
// that lane 0 reads. Lane l's value after step `off` is v[l] + v[l + off] for the lanes lane 0 reads, so the fold below is that
// sequence of additions, the zero lanes included (x + 0 turns -0 into +0 as there).
__device__ __forceinline__ float skinny_bias(const float4 (&w)[kDraftPicksMaxRank / 4], const float* x, int nv) {
  float v[16];
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    v[l] = 0.0f;
    if (l < nv) {
      const float4 x4 = __ldg(reinterpret_cast<const float4*>(x) + l);
      float d = 0.0f;
      d = fmaf(w[l].x, x4.x, d);
      d = fmaf(w[l].y, x4.y, d);
      d = fmaf(w[l].z, x4.z, d);
      d = fmaf(w[l].w, x4.w, d);
      v[l] = fmaf(1.0f, d, v[l]);
    }
  }
#pragma unroll
  for (int l = 0; l < 16; ++l) v[l] = __fadd_rn(v[l], 0.0f);  // xor 16: lanes 16..31 hold 0
#pragma unroll
  for (int off = 8; off > 0; off /= 2)
#pragma unroll
    for (int l = 0; l < off; ++l) v[l] = __fadd_rn(v[l], v[l + off]);
  return v[0];
}

// Grid: DraftPicksArgs::blocks blocks of kPickThreads (the confidence sum's order is draft_pick_kernel's). Per
// position: (A) every warp's work items, a 32-wide vocabulary slice x up to 8 sequences (the slice's Markov head rows
// held in registers across its sequences): the biased logits written back and each (sequence, slice) best into the
// partials; grid barrier; (B) every block folds every sequence's slices (a warp a sequence) into its pick; the owner
// block of a sequence writes its id, confidence, predecessor and Markov row.
__global__ void __launch_bounds__(kPickThreads) draft_picks_kernel(DraftPicksArgs a) {
  pdl_wait_then_release();
  __shared__ int32_t pred[kDraftPicksMaxB], pick[kDraftPicksMaxB];
  __shared__ double dsum[kPickThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = kPickThreads / 32;
  const int64_t B = a.B, V = a.vocab, S = (V + 31) / 32, r = a.rank;  // draft_picks_slices
  const int nv = int(r / 4);
  const int64_t groups = (B + kDraftPicksSeqPerItem - 1) / kDraftPicksSeqPerItem, items = S * groups;
  for (int64_t b = threadIdx.x; b < B; b += blockDim.x) pred[b] = a.prev[b];
  // A warp with at most one work item (every warp at batch 1) keeps its slice's Markov head rows in registers across
  // the positions: the same item every position, so one load instead of one a position.
  const bool one_item = items <= int64_t(gridDim.x) * warps;
  float4 w[kDraftPicksMaxRank / 4];
  const auto load_rows = [&](int64_t v) {
#pragma unroll
    for (int l = 0; l < kDraftPicksMaxRank / 4; ++l)
      w[l] = v < V && l < nv ? __ldg(reinterpret_cast<const float4*>(a.markov_head + v * r) + l)
                             : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  if (one_item) load_rows((int64_t(blockIdx.x) * warps + warp) / groups * 32 + lane);
  __syncthreads();
  for (int64_t k = 0; k < a.g; ++k) {
    for (int64_t it = int64_t(blockIdx.x) * warps + warp; it < items; it += int64_t(gridDim.x) * warps) {
      const int64_t sl = it / groups, b0 = (it % groups) * kDraftPicksSeqPerItem;
      const int64_t v = sl * 32 + lane;
      const bool valid = v < V;
      if (!one_item) load_rows(v);
      const int64_t b1 = min(B, b0 + int64_t(kDraftPicksSeqPerItem));
      for (int64_t b = b0; b < b1; ++b) {
        float best = -INFINITY;
        int32_t idx = 0x7fffffff;
        if (valid) {
          float* lp = a.logits + b * a.logits_ld + k * V + v;
          const float x = __fadd_rn(*lp, skinny_bias(w, a.markov_embed + int64_t(pred[b]) * r, nv));
          *lp = x;
          best = isnan(x) ? -INFINITY : x;
          idx = int32_t(v);
        }
        warp_best(best, idx);
        if (lane == 0) {
          a.part_v[(k * B + b) * S + sl] = best;
          a.part_i[(k * B + b) * S + sl] = idx;
        }
      }
    }
    picks_grid_barrier(a.barrier, gridDim.x);
    for (int64_t b = warp; b < B; b += warps) {
      float best = -INFINITY;
      int32_t idx = 0x7fffffff;
      for (int64_t sl = lane; sl < S; sl += 32) {
        const float pv = __ldcg(a.part_v + (k * B + b) * S + sl);
        const int32_t pi = __ldcg(a.part_i + (k * B + b) * S + sl);
        if (pick_better(pv, pi, best, idx)) {
          best = pv;
          idx = pi;
        }
      }
      warp_best(best, idx);
      if (lane == 0) pick[b] = idx == 0x7fffffff ? 0 : idx;
    }
    __syncthreads();
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {  // the owner block of sequence b (uniform over the block)
      const float* xr = a.markov_embed + int64_t(pred[b]) * r;  // W1[predecessor]: what e held for this position
      if (a.conf_w) {
        const float* h = a.h + (b * a.g + k) * a.dim;
        double c = 0.0;
        for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) c += double(a.conf_w[i]) * double(h[i]);
        for (int64_t i = threadIdx.x; i < r; i += blockDim.x) c += double(a.conf_w[a.dim + i]) * double(xr[i]);
        for (int o = 16; o > 0; o /= 2) c += __shfl_xor_sync(0xffffffffu, c, o);
        if (lane == 0) dsum[warp] = c;
        __syncthreads();
        if (threadIdx.x == 0) {
          double cs = double(a.conf_b);
          for (int w = 0; w < warps; ++w) cs += dsum[w];
          a.conf[b * a.g + k] = float(cs);
        }
      }
      if (threadIdx.x == 0) {
        a.ids[b * a.g + k] = pick[b];
        a.prev[b] = pick[b];
      }
      // e as the per-position kernels leave it: W1[x] of the next position's predecessor, the last one's kept.
      const float* er = k + 1 < a.g ? a.markov_embed + int64_t(pick[b]) * r : (k == 0 ? xr : nullptr);
      if (er)
        for (int64_t i = threadIdx.x; i < r; i += blockDim.x) a.e[b * r + i] = er[i];
      __syncthreads();  // dsum is reused by the next owned sequence
    }
    for (int64_t b = threadIdx.x; b < B; b += blockDim.x) pred[b] = pick[b];
    __syncthreads();
  }
}

// ---- the fused MoE (DraftMoeArgs) ----

// w . x over K floats (F32 weight row w, fp32 x, both 16-byte aligned, K % 4 == 0) by one warp, as gemm_skinny.cu's
// skinny_block sums one output: chunks of 256 (32 lanes x 2 vectors x 4), lane l's vectors l and l + 32 of each chunk
// in order, each a 4-element fma chain added with fma(1, d, acc), then the butterfly; every lane returns the sum.
__device__ __forceinline__ float warp_skinny_dot(const float* w, const float* x, int64_t K, int lane) {
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += 256) {
    const int64_t nvc = (K - k0 < 256 ? K - k0 : 256) / 4;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int v = lane + 32 * u;
      if (v < nvc) {
        const float4 w4 = __ldg(reinterpret_cast<const float4*>(w + k0) + v);
        const float4 x4 = *(reinterpret_cast<const float4*>(x + k0) + v);
        float d = 0.0f;
        d = fmaf(w4.x, x4.x, d);
        d = fmaf(w4.y, x4.y, d);
        d = fmaf(w4.z, x4.z, d);
        d = fmaf(w4.w, x4.w, d);
        acc = fmaf(1.0f, d, acc);
      }
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

constexpr int kMoeFusedThreads = 256;

// DraftMoeArgs::gate: every block routes the T tokens into r_idx (the first block also writes idx and weight for
// the down kernel). The T x experts router logits are spread over the block's warps, each summed by one warp as the
// skinny kernel sums an output (warp_skinny_dot); then warp t scores token t's experts (lane e: expert e) and selects
// with route_cuda's functions (route.cuh). Ends at a block barrier.
__device__ __forceinline__ void moe_route_tokens(const DraftMoeArgs& a, int32_t (&r_idx)[8][kDraftMoeRouteMaxTopk]) {
  __shared__ float z[8][kDraftMoeRouteMaxExperts];
  __shared__ float r_w[8][kDraftMoeRouteMaxTopk];
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), warps = int(blockDim.x / 32);
  const int E = int(a.experts);
  for (int d = warp; d < int(a.T) * E; d += warps) {
    const float v = warp_skinny_dot(a.gate + int64_t(d % E) * a.dim, a.x + int64_t(d / E) * a.dim, a.dim, lane);
    if (lane == 0) z[d / E][d % E] = v;
  }
  __syncthreads();
  if (warp < a.T) {
    if (lane < E) z[warp][lane] = route_score(z[warp][lane], int(a.router.score));
    __syncwarp();
    route_select_warp<1>(z[warp], a.gate_bias, nullptr, nullptr, route_args(a.T, a.router), r_idx[warp], r_w[warp]);
    __syncwarp();
    if (blockIdx.x == 0 && lane < a.topk) {
      a.idx[warp * a.topk + lane] = r_idx[warp][lane];
      a.weight[warp * a.topk + lane] = r_w[warp][lane];
    }
  }
  __syncthreads();
}

// Warp per (token, slot, channel): h[t, j, i] = SwiGLU(w1_j[i] . x_t, w3_j[i] . x_t) (swiglu_kernel's arithmetic).
__global__ void __launch_bounds__(kMoeFusedThreads) draft_moe_up_kernel(DraftMoeArgs a) {
  pdl_wait_then_release();
  __shared__ int32_t r_idx[8][kDraftMoeRouteMaxTopk];  // the tokens' experts where the kernel routes them
  if (a.gate) moe_route_tokens(a, r_idx);
  const int lane = threadIdx.x % 32;
  const int64_t routed = a.T * a.topk * a.inter, items = routed + a.T * a.shared_inter;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t it = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; it < items; it += warps) {
    int64_t t, j, i;
    const float *w1, *w3;
    float limit;
    if (it < routed) {
      t = it / (a.topk * a.inter);
      j = (it / a.inter) % a.topk;
      i = it % a.inter;
      const int32_t e = a.gate ? r_idx[t][j] : a.idx[t * a.topk + j];
      if (e < 0 || e >= a.experts) continue;  // uniform over the warp
      w1 = static_cast<const float*>(a.w1[e]) + i * a.dim;
      w3 = static_cast<const float*>(a.w3[e]) + i * a.dim;
      limit = a.limit;
    } else {
      t = (it - routed) / a.shared_inter;
      j = a.topk;
      i = (it - routed) % a.shared_inter;
      w1 = a.sw1 + i * a.dim;
      w3 = a.sw3 + i * a.dim;
      limit = a.shared_limit;
    }
    const float* x = a.x + t * a.dim;
    float g = warp_skinny_dot(w1, x, a.dim, lane);
    float u = warp_skinny_dot(w3, x, a.dim, lane);
    if (lane == 0) {
      if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
      }
      a.h[(t * (a.topk + 1) + j) * a.h_ld + i] = g / (1.0f + expf(-g)) * u;
    }
  }
}

// Warp per (token, channel d): the down dot product of every slot, then combine_kernel's sum: the routed outputs times
// their weights in k order (skipped assignments left out), then + the shared output.
__global__ void __launch_bounds__(kMoeFusedThreads) draft_moe_down_kernel(DraftMoeArgs a) {
  pdl_wait_then_release();
  const int lane = threadIdx.x % 32;
  const int64_t items = a.T * a.dim, warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t it = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; it < items; it += warps) {
    const int64_t t = it / a.dim, d = it % a.dim;
    float acc = 0.0f;
    for (int64_t j = 0; j < a.topk; ++j) {
      const int32_t e = a.idx[t * a.topk + j];
      if (e < 0 || e >= a.experts) continue;
      const float y = warp_skinny_dot(static_cast<const float*>(a.w2[e]) + d * a.inter,
                                      a.h + (t * (a.topk + 1) + j) * a.h_ld, a.inter, lane);
      acc = fmaf(a.weight[t * a.topk + j], y, acc);
    }
    if (a.shared_inter > 0)
      acc = __fadd_rn(acc, warp_skinny_dot(a.sw2 + d * a.shared_inter, a.h + (t * (a.topk + 1) + a.topk) * a.h_ld,
                                           a.shared_inter, lane));
    if (lane == 0) a.out[it] = acc;
  }
}
}  // namespace

void launch_draft_attention(const DraftAttnArgs& a, void* stream) {
  const dim3 grid(unsigned(a.T), unsigned(a.heads));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool stage = draft_attention_stages(a.max_keys, a.dim);
  const size_t smem = size_t(draft_attention_smem(a.max_keys, a.dim, stage));
  if (stage) {
    pdl_launch(draft_attention_kernel<true>, grid, dim3(kAttnThreads), smem, s, a);
  } else {
    pdl_launch(draft_attention_kernel<false>, grid, dim3(kAttnThreads), smem, s, a);
  }
}

void launch_stream_mean(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream) {
  pdl_launch(stream_mean_kernel, dim3(unsigned(T)), dim3(256), 0, static_cast<cudaStream_t>(stream), hidden, rows,
             layers, n, dim, feats);
}

void launch_ring_scatter(const float* kv, const int32_t* slot, const int64_t* pos, const int32_t* rows, int64_t T,
                         int64_t dim, float* ring, int64_t slot_stride, int64_t window, void* stream) {
  pdl_launch(ring_scatter_kernel, dim3(unsigned(T)), dim3(128), 0, static_cast<cudaStream_t>(stream), kv, slot, pos,
             rows, dim, ring, slot_stride, window);
}

void launch_draft_pick(const DraftPickArgs& a, void* stream) {
  pdl_launch(draft_pick_kernel, dim3(unsigned(a.B)), dim3(kPickThreads), 0, static_cast<cudaStream_t>(stream), a);
}

void launch_copy_rows(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows, int64_t T,
                      int64_t width, void* stream) {
  pdl_launch(copy_rows_kernel, dim3(unsigned(T)), dim3(256), 0, static_cast<cudaStream_t>(stream), src, src_rows, dst,
             dst_rows, width);
}

void launch_add_rows(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream) {
  pdl_launch(add_rows_kernel, dim3(unsigned(T)), dim3(256), 0, static_cast<cudaStream_t>(stream), b, rep, dim, y);
}

void launch_spec_round(const SpecRoundArgs& a, void* stream) {
  pdl_launch(spec_round_kernel, dim3(unsigned(a.Bp)), dim3(kPickThreads), 0, static_cast<cudaStream_t>(stream), a);
}

// A plain launch (its wait is then a no-op): by PDL, during the head GEMM's tail, the grid-barrier kernel measured
// 25.6 -> 30.1 us (H100, session 46), likely its blocks placed where the GEMM's still ran instead of one an SM.
void launch_draft_picks(const DraftPicksArgs& a, void* stream) {
  draft_picks_kernel<<<unsigned(a.blocks), kPickThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_draft_moe(const DraftMoeArgs& a, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int64_t kWarps = kMoeFusedThreads / 32;
  const int64_t up = a.T * (a.topk * a.inter + a.shared_inter), down = a.T * a.dim;
  pdl_launch(draft_moe_up_kernel, dim3(unsigned((up + kWarps - 1) / kWarps)), dim3(kMoeFusedThreads), 0, s, a);
  pdl_launch(draft_moe_down_kernel, dim3(unsigned((down + kWarps - 1) / kWarps)), dim3(kMoeFusedThreads), 0, s, a);
}

}  // namespace dsinfer::ops::cuda::detail
