// MoE expert-layer kernels (see moe_cuda.h; layouts in docs/kernels.md "GEMM and MoE"): the token permutation
// (count per expert in one block with integer shared-memory atomics, so order-free; exclusive scan; then one block
// per expert ranks its assignments in assignment order with ballot prefix sums -> offsets / perm_token / pos_of),
// the clamped SwiGLU and the weighted combine in k order. No float atomics anywhere. Launchers: moe_launch.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/moe/moe_fast_common.h"  // kFastTokens (the big list)
#include "ops/moe/moe_launch.h"
#include "ops/moe/moe_plan.h"  // kMoePrepMaxN
#include "ops/moe/moe_x_bf16.cuh"
#include "ops/routed_sum.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {

constexpr int kCountThreads = 1024, kScatterThreads = 512, kScatterPer = 4;

// Exclusive scan of the per-expert counts cnt[0..E) (block of kCountThreads) into offsets[0..E] and, when `active`
// is not null, the list of touched experts; when `big` is not null, the list of experts with more than kFastTokens
// rows (the fast path's paired kernel; MoeFastArgs::big). starts: cnt[e] is replaced by offsets[e] (the prep kernel's
// running row counters). Thread i owns a run of consecutive experts; warp shuffles, then warp 0 scans the 32 warp
// totals. Integer sums: order-free; both lists in increasing expert id.
__device__ void scan_counts(int* cnt, int E, int32_t* offsets, int32_t* active, int32_t* big, bool starts) {
  constexpr int kSums = 3;  // rows, touched experts, big experts
  __shared__ int warp_sum[kSums][kCountThreads / 32];
  const int per = (E + kCountThreads - 1) / kCountThreads;
  const int e0 = min(E, int(threadIdx.x) * per), e1 = min(E, e0 + per);
  int own[kSums] = {0, 0, 0};
  for (int e = e0; e < e1; ++e) {
    own[0] += cnt[e];
    own[1] += cnt[e] > 0 ? 1 : 0;
    own[2] += cnt[e] > moe_detail::kFastTokens ? 1 : 0;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl[kSums];  // inclusive within the warp
  for (int i = 0; i < kSums; ++i) incl[i] = own[i];
  for (int d = 1; d < 32; d <<= 1)
    for (int i = 0; i < kSums; ++i) {
      const int up = __shfl_up_sync(0xffffffffu, incl[i], d);
      if (lane >= d) incl[i] += up;
    }
  if (lane == 31)
    for (int i = 0; i < kSums; ++i) warp_sum[i][warp] = incl[i];
  __syncthreads();
  if (warp == 0) {
    int w[kSums];
    for (int i = 0; i < kSums; ++i) w[i] = warp_sum[i][lane];
    for (int d = 1; d < 32; d <<= 1)
      for (int i = 0; i < kSums; ++i) {
        const int up = __shfl_up_sync(0xffffffffu, w[i], d);
        if (lane >= d) w[i] += up;
      }
    for (int i = 0; i < kSums; ++i) warp_sum[i][lane] = w[i] - warp_sum[i][lane];  // exclusive
  }
  __syncthreads();
  int run = warp_sum[0][warp] + incl[0] - own[0], na = warp_sum[1][warp] + incl[1] - own[1];
  int nb = warp_sum[2][warp] + incl[2] - own[2];
  for (int e = e0; e < e1; ++e) {
    const int ce = cnt[e];
    offsets[e] = run;
    if (starts) cnt[e] = run;
    if (active && ce > 0) active[1 + na++] = e;
    if (big && ce > moe_detail::kFastTokens) big[1 + nb++] = e;
    run += ce;
  }
  if (threadIdx.x == kCountThreads - 1) {
    offsets[E] = run;
    if (active) active[0] = na;
    if (big) big[0] = nb;
  }
}

// One block: per-expert counts (integer atomics, result independent of order), parallel exclusive scan into offsets,
// pos_of = -1 for invalid expert ids, optionally the list of touched experts (fast path).
__global__ void __launch_bounds__(kCountThreads)
    moe_count_kernel(const int32_t* idx, int64_t n, int E, int32_t* offsets, int32_t* pos_of, int32_t* active,
                     int32_t* big) {
  extern __shared__ int cnt[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x) {
    const int32_t e = idx[a];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    else pos_of[a] = -1;
  }
  __syncthreads();
  scan_counts(cnt, E, offsets, active, big, false);
}

// The whole permutation in one block for n <= kMoePrepMaxN (the fast path's decode steps: one launch instead of
// count + scatter): counts and scan as moe_count_kernel, then warp 0 walks the assignments in order, 32 at a time;
// __match_any_sync groups a chunk's lanes by expert, a lane's row is its expert's running start plus its rank among
// the lower lanes of its group (so rows stay in increasing assignment order, as moe_scatter_kernel), and the
// group's lowest lane advances the start. Same offsets / perm_token / pos_of / active as count + scatter.
// Blocks 1.. (MoeXBf16: x given) round x's token rows to the fast kernels' bf16 B operand meanwhile (moe_x_bf16.cuh),
// so the decode step has no gather launch between the permutation and the gate/up kernel.
__global__ void __launch_bounds__(kCountThreads)
    moe_prep_kernel(const int32_t* idx, int n, int topk, int E, int32_t* offsets, int32_t* perm_token,
                    int32_t* pos_of, int32_t* active, int32_t* big, MoeXBf16 xc) {
  extern __shared__ int cnt[];
  __shared__ int sidx[kMoePrepMaxN];
  dsinfer::cuda::pdl_wait_then_release();
  if (blockIdx.x > 0) {
    moe_x_bf16_row(xc.x, int64_t(blockIdx.x) - 1, xc.K, xc.xb);
    return;
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  for (int a = threadIdx.x; a < n; a += blockDim.x) sidx[a] = idx[a];
  __syncthreads();
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int32_t e = sidx[a];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    else pos_of[a] = -1;
  }
  __syncthreads();
  scan_counts(cnt, E, offsets, active, big, true);
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  for (int base = 0; base < n; base += 32) {
    const int a = base + lane;
    const int e = a < n ? sidx[a] : -1;
    const bool valid = e >= 0 && e < E;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : -1);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (valid) {
      const int row = cnt[e] + rank;
      perm_token[row] = a / topk;
      pos_of[a] = row;
    }
    __syncwarp();  // every lane has read cnt[e] before the leader advances it
    if (valid && rank == 0) cnt[e] += __popc(peers);
    __syncwarp();
  }
}

// Block e: ranks expert e's assignments in increasing assignment index. Per chunk of kScatterThreads * kScatterPer
// assignments, thread i tests assignments kScatterPer i .. + kScatterPer - 1 of the chunk (a bit mask), a warp
// shuffle scan and the warp totals give each thread its first row (so rows stay in assignment order); a block walks
// n / 2,048 chunks instead of n / 256 (bench/NOTES.md "Session 16 — MoE prefill").
__global__ void __launch_bounds__(kScatterThreads)
    moe_scatter_kernel(const int32_t* idx, int64_t n, int64_t topk, const int32_t* offsets, int32_t* perm_token,
                       int32_t* pos_of) {
  __shared__ int warp_sum[kScatterThreads / 32];
  const int e = blockIdx.x;
  const int begin = offsets[e], count = offsets[e + 1] - begin;
  if (count == 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int64_t kChunk = int64_t(kScatterThreads) * kScatterPer;
  int running = 0;
  for (int64_t base = 0; base < n && running < count; base += kChunk) {
    const int64_t a0 = base + int64_t(threadIdx.x) * kScatterPer;
    unsigned mask = 0;  // bit j: assignment a0 + j is expert e's
#pragma unroll
    for (int j = 0; j < kScatterPer; ++j)
      if (a0 + j < n && idx[a0 + j] == e) mask |= 1u << j;
    const int c = __popc(mask);
    int incl = c;  // inclusive scan within the warp
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += u;
    }
    if (lane == 31) warp_sum[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kScatterThreads / 32; ++w) {
      const int ws = warp_sum[w];
      before += w < warp ? ws : 0;
      total += ws;
    }
    int row = begin + running + before + incl - c;
#pragma unroll
    for (int j = 0; j < kScatterPer; ++j)
      if ((mask >> j) & 1u) {
        perm_token[row] = int32_t((a0 + j) / topk);
        pos_of[a0 + j] = row;
        ++row;
      }
    running += total;
    __syncthreads();  // warp_sum is rewritten next chunk
  }
}

// h1[p, j] <- silu(min(h1, L)) * clamp(h3, -L, L) for rows p < *rows_dev (or rows when rows_dev is null); h16 (or
// null): also the result rounded to bf16 (RNE) there.
__global__ void swiglu_kernel(float* h1, const float* h3, int64_t rows, const int32_t* rows_dev, int64_t inter,
                              float limit, uint16_t* h16) {
  const int64_t nrows = rows_dev ? int64_t(*rows_dev) : rows;
  const int64_t total = nrows * inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float g = h1[i], u = h3[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    const float h = g / (1.0f + expf(-g)) * u;
    h1[i] = h;
    if (h16) h16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(h));
  }
}

__global__ void combine_kernel(RoutedSum f, int64_t T, int64_t D, float* out) {
  dsinfer::cuda::pdl_wait_then_release();
  const int64_t total = T * D;
  const uint16_t* yp16 = reinterpret_cast<const uint16_t*>(f.yp);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    float acc = 0.0f;
    for (int64_t k = 0; k < f.topk; ++k) {
      const int32_t p = f.pos_of[t * f.topk + k];
      const int64_t at = int64_t(p) * D + d;
      if (p >= 0) acc += f.weight[t * f.topk + k] * (f.yp_bf16 ? __uint_as_float(uint32_t(yp16[at]) << 16) : f.yp[at]);
    }
    if (f.shared) acc += f.shared[i];
    out[i] = acc;
  }
}

// combine_kernel on 4 consecutive columns per thread (dim % 4 == 0, 16-byte aligned yp / shared / out): the same
// sums in the same order per element, so the same bits, with 16-byte loads and stores (ops/routed_sum.cuh, shared
// with hc_post_routed).
__global__ void combine4_kernel(RoutedSum f, int64_t T, int64_t D4, float4* out) {
  dsinfer::cuda::pdl_wait_then_release();
  const int64_t total = T * D4;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D4, d = i - t * D4;
    out[i] = routed_sum4(f, t, D4, d);
  }
}

// DeepSeek-V4.1 official numerics (model/deepseek_v41_ffn.cpp expert_official): g, u = h1, h3 (the bf16 outputs of
// the official GEMMs) clamped; h = bf16(w * (silu(g) * u)) with the row's routing weight w (1 without row_weight);
// exp as the CPU's std::exp(float): the double exp rounded once (expf is up to 2 ulp off).
__global__ void official_swiglu_kernel(float* h1, const float* h3, const float* row_weight, int64_t rows,
                                       const int32_t* rows_dev, int64_t inter, float limit) {
  namespace dev = dsinfer::cuda::dev;
  const int64_t total = (rows_dev ? int64_t(*rows_dev) : rows) * inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float g = h1[i], u = h3[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    const float w = row_weight ? row_weight[i / inter] : 1.0f;
    h1[i] = dev::round_bf16(__fmul_rn(w, __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, float(exp(double(-g))))), u)));
  }
}

// wrow[pos_of[a]] = weight[a] for every valid assignment a < n (the routing weight of each permuted row).
__global__ void row_weight_kernel(const int32_t* pos_of, const float* weight, int64_t n, float* wrow) {
  for (int64_t a = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += int64_t(gridDim.x) * blockDim.x)
    if (pos_of[a] >= 0) wrow[pos_of[a]] = weight[a];
}

// Official combine: out[t] = bf16(sum of bf16(yp) of the token's experts in increasing expert id (fp32), then plus
// bf16(shared)); the routing weights are already inside yp.
__global__ void official_combine_kernel(const float* yp, const int32_t* pos_of, const int32_t* idx, int64_t T,
                                        int64_t topk, int64_t D, const float* shared, float* out) {
  namespace dev = dsinfer::cuda::dev;
  const int64_t total = T * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    const int32_t* ids = idx + t * topk;
    float acc = 0.0f;
    int32_t prev = -1;
    for (int64_t r = 0; r < topk; ++r) {  // the next larger expert id each time (ids of a token are distinct)
      int64_t best = -1;
      for (int64_t k = 0; k < topk; ++k)
        if (ids[k] > prev && pos_of[t * topk + k] >= 0 && (best < 0 || ids[k] < ids[best])) best = k;
      if (best < 0) break;
      prev = ids[best];
      acc = __fadd_rn(acc, dev::round_bf16(yp[int64_t(pos_of[t * topk + best]) * D + d]));
    }
    out[i] = dev::round_bf16(shared ? __fadd_rn(acc, dev::round_bf16(shared[i])) : acc);
  }
}

unsigned elementwise_blocks(int64_t total) {
  return unsigned(std::clamp<int64_t>((total + 255) / 256, 1, 132 * 16));
}

}  // namespace

void launch_moe_count(const int32_t* idx, int64_t n, int64_t experts, int32_t* offsets, int32_t* pos_of,
                      int32_t* active, void* stream, int32_t* big) {
  moe_count_kernel<<<1, kCountThreads, size_t(experts) * sizeof(int), static_cast<cudaStream_t>(stream)>>>(
      idx, n, int(experts), offsets, pos_of, active, big);
}

void launch_moe_prep(const int32_t* idx, int64_t n, int64_t topk, int64_t experts, int32_t* offsets,
                     int32_t* perm_token, int32_t* pos_of, int32_t* active, void* stream, const MoeXBf16& xc,
                     int32_t* big) {
  const unsigned blocks = 1u + (xc.x ? unsigned(xc.T) : 0u);
  dsinfer::cuda::pdl_launch(moe_prep_kernel, dim3(blocks), dim3(kCountThreads), size_t(experts) * sizeof(int),
                            static_cast<cudaStream_t>(stream), idx, int(n), int(topk), int(experts), offsets,
                            perm_token, pos_of, active, big, xc);
}

void launch_moe_scatter(const int32_t* idx, int64_t n, int64_t topk, int64_t experts, const int32_t* offsets,
                        int32_t* perm_token, int32_t* pos_of, void* stream) {
  moe_scatter_kernel<<<unsigned(experts), kScatterThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      idx, n, topk, offsets, perm_token, pos_of);
}

void launch_swiglu(float* h1, const float* h3, int64_t rows, const int32_t* rows_dev, int64_t inter, float limit,
                   void* stream, uint16_t* h16) {
  swiglu_kernel<<<elementwise_blocks(rows * inter), 256, 0, static_cast<cudaStream_t>(stream)>>>(h1, h3, rows, rows_dev,
                                                                                                 inter, limit, h16);
}

void launch_combine(const RoutedSum& f, int64_t T, int64_t dim, float* out, void* stream) {
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (dim % 4 == 0 && aligned(f.yp, f.yp_bf16 ? 8 : 16) && aligned(f.shared, 16) && aligned(out, 16)) {
    dsinfer::cuda::pdl_launch(combine4_kernel, dim3(unsigned(elementwise_blocks(T * dim / 4))), dim3(256), 0, st, f, T,
                              dim / 4, reinterpret_cast<float4*>(out));
    return;
  }
  dsinfer::cuda::pdl_launch(combine_kernel, dim3(unsigned(elementwise_blocks(T * dim))), dim3(256), 0, st, f, T, dim,
                            out);
}

void launch_official_swiglu(float* h1, const float* h3, const float* row_weight, int64_t rows,
                            const int32_t* rows_dev, int64_t inter, float limit, void* stream) {
  official_swiglu_kernel<<<elementwise_blocks(rows * inter), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      h1, h3, row_weight, rows, rows_dev, inter, limit);
}

void launch_row_weight(const int32_t* pos_of, const float* weight, int64_t n, float* wrow, void* stream) {
  row_weight_kernel<<<elementwise_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(pos_of, weight, n, wrow);
}

void launch_official_combine(const float* yp, const int32_t* pos_of, const int32_t* idx, int64_t T, int64_t topk,
                             int64_t dim, const float* shared, float* out, void* stream) {
  official_combine_kernel<<<elementwise_blocks(T * dim), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      yp, pos_of, idx, T, topk, dim, shared, out);
}

}  // namespace dsinfer::ops::cuda::detail
