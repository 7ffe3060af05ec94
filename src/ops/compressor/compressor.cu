// CUDA compressor kernels (see compressor_cuda.h). The emit: each window closed in the step pooled per channel
// (window_value), then post-processed over the whole entry (finish_entry); decode sizes in one kernel, prefill sizes
// in three (compressor_split_emit: the list of closing tokens, the pooled values over channel slices of every listed
// window, the post-processing), the same functions in the same order, so the same bits.
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/compressor/compressor_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;

struct SlotSource {
  const StepDevice& st;
  const LayerStateView& v;
  const CompressorCudaParams& p;
  const float* kv;
  const float* gate;
  int64_t start, t0;
  int32_t slot;
  // kv and gate (+ ape) of channel `off` (half offset + channel) of the token at position q.
  __device__ void fetch(int64_t q, int64_t off, float& k, float& g) const {
    const int64_t cd = p.c() * p.d;
    if (q >= start) {
      const int64_t tq = t0 + (q - start);
      k = kv[tq * cd + off];
      g = __fadd_rn(gate[tq * cd + off], p.ape[(q % p.m) * cd + off]);
    } else {
      const float* row = p.indexer ? v.index_frontier_row(slot, q) : v.frontier_row(slot, q);
      k = row[off];
      g = row[cd + off];
    }
  }
};

// The pooled value of channel ch (< p.d) of window w: the softmax over the window's slots (the previous window's
// first under overlap, as the reference sums them) of gate + ape, weighting kv, in double. Loads of several slots
// in flight (the unrolled loops); the sums in slot order.
__device__ float window_value(const SlotSource& src, const CompressorCudaParams& p, int64_t w, int64_t ch) {
  const bool prev = p.overlap && w > 0;
  const int64_t cur_half = p.overlap ? p.d : 0;
  float mx = -INFINITY, k, g;
#pragma unroll 4
  for (int64_t i = 0; i < p.m; ++i) {
    if (prev) {
      src.fetch((w - 1) * p.m + i, ch, k, g);
      mx = fmaxf(mx, g);
    }
    src.fetch(w * p.m + i, cur_half + ch, k, g);
    mx = fmaxf(mx, g);
  }
  double den = 0.0, num = 0.0;
  if (prev)  // the reference sums the previous window's slots first
#pragma unroll 4
    for (int64_t i = 0; i < p.m; ++i) {
      src.fetch((w - 1) * p.m + i, ch, k, g);
      const double x = exp(double(g) - double(mx));
      den += x;
      num += x * double(k);
    }
#pragma unroll 4
  for (int64_t i = 0; i < p.m; ++i) {
    src.fetch(w * p.m + i, cur_half + ch, k, g);
    const double x = exp(double(g) - double(mx));
    den += x;
    num += x * double(k);
  }
  return float(num / den);
}

// Where entry w of token t's sequence s goes: the FP8 path's out row t, else the state's entry / indexer key.
__device__ float* entry_row(const StepDevice& st, const LayerStateView& v, const CompressorCudaParams& p, int64_t t,
                            int32_t s, int64_t w) {
  if (p.out) return p.out + t * p.d;
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  return p.indexer ? v.index_key(table, w) : v.entry(table, w);
}

// The entry's post-processing in shared memory (e: the d pooled values, complete), then its store: the weighted
// RMSNorm, RoPE at the window's first position, the FP8 / Hadamard + FP4 simulation. The whole block.
__device__ void finish_entry(float* e, double* scratch, const StepDevice& st, const LayerStateView& v,
                             const CompressorCudaParams& p, int64_t t, int32_t s, int64_t pos) {
  const int64_t w = pos / p.m, ch = threadIdx.x;
  dev::smem_rmsnorm(e, int(p.d), p.norm_w, p.eps);
  if (p.rope_dim > 0) dev::smem_rope(e, int(p.d), int(p.rope_dim), p.inv_freq, pos + 1 - p.m, false, p.attention_factor);
  if (p.sim == CompressorSim::Fp8Nope) dev::smem_block_quant_sim(e, int(p.fp8_dims), int(p.fp8_block), true);
  if (p.sim == CompressorSim::HadamardFp4) {
    dev::smem_hadamard(e, int(p.d), scratch);
    dev::smem_block_quant_sim(e, int(p.d), int(p.fp4_block), false);
  }
  if (p.out && threadIdx.x == 0) {  // FP8 state: the caller encodes the row
    const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
    p.out_rows[t] = int32_t(v.entry_index(table, w));
  }
  float* dst = entry_row(st, v, p, t, s, w);
  if (ch < p.d) dst[ch] = e[ch];
}

// Decode sizes: one block of d threads per token; tokens closing no window exit at once.
__global__ void compressor_emit_kernel(StepDevice st, LayerStateView v, CompressorCudaParams p, const float* kv,
                                       const float* gate) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ double cmp_smem[];  // [d] doubles (Hadamard scratch), then [d] floats (the entry)
  float* e = reinterpret_cast<float*>(cmp_smem + p.d);
  const int64_t t = blockIdx.x, pos = st.pos[t];
  if ((pos + 1) % p.m != 0) {  // block-uniform
    if (p.out_rows && threadIdx.x == 0) p.out_rows[t] = -1;
    return;
  }
  const int32_t s = st.seq_of_token[t];
  const SlotSource src{st, v, p, kv, gate, st.start_pos[s], st.cu_seqlens[s], st.slot[s]};
  // blockDim is d rounded up to a warp multiple: threads past d only join the block-wide steps.
  if (threadIdx.x < p.d) e[threadIdx.x] = window_value(src, p, pos / p.m, threadIdx.x);
  finish_entry(e, cmp_smem, st, v, p, t, s, pos);
}

// Prefill sizes (compressor_split_emit), three kernels over the list of the tokens that close a window:
// 1. the list (one block): list[0] = count, list[1 + i] = the i-th such token in token order; out_rows[t] = -1 for
//    every other token (FP8 state). Each thread tests kListPer tokens (loads in flight together), then a block-wide
//    scan of the counts (warp shuffles).
constexpr int kListThreads = 1024, kListPer = 4;
__global__ void __launch_bounds__(kListThreads) compressor_list_kernel(StepDevice st, int64_t m, int32_t* list,
                                                                       int32_t* out_rows) {
  dsinfer::cuda::pdl_wait_then_release();
  __shared__ int32_t warp_sum[kListThreads / 32];
  __shared__ int32_t base;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if (threadIdx.x == 0) base = 0;
  for (int64_t t0 = 0; t0 < st.T; t0 += int64_t(kListThreads) * kListPer) {
    const int64_t tb = t0 + int64_t(threadIdx.x) * kListPer;  // this thread's kListPer consecutive tokens
    unsigned closes = 0;
#pragma unroll
    for (int j = 0; j < kListPer; ++j) {
      const int64_t t = tb + j;
      if (t < st.T && (st.pos[t] + 1) % m == 0) closes |= 1u << j;
      else if (t < st.T && out_rows) out_rows[t] = -1;
    }
    int32_t n = __popc(closes), incl = n;  // inclusive scan of the counts in the warp
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t v = __shfl_up_sync(dev::kFull, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sum[warp] = incl;
    __syncthreads();
    if (warp == 0) {  // the warps' totals scanned the same way, plus the rounds before
      const int32_t v = warp_sum[lane];
      int32_t w = v;
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t u = __shfl_up_sync(dev::kFull, w, o);
        if (lane >= o) w += u;
      }
      warp_sum[lane] = base + w - v;  // exclusive
      __syncwarp();
      if (lane == 31) base += w;
    }
    __syncthreads();
    int32_t at = warp_sum[warp] + incl - n;
#pragma unroll
    for (int j = 0; j < kListPer; ++j)
      if ((closes >> j) & 1u) list[1 + at++] = int32_t(tb + j);
    __syncthreads();  // warp_sum and base are rewritten by the next round
  }
  if (threadIdx.x == 0) list[0] = base;
}

// 2. each listed window's pooled values, written raw into the entry's own row, in one of two forms
//    (compressor_sums_spread): short windows (CSA: 2 x 4 slots) one thread a channel (window_value), 64 channels a
//    block; long windows (HCA: 128 slots) the slots spread over kSumGroups warps (slot j to warp j % kSumGroups): the
//    slots' gate and kv staged in shared memory, the max over them (exact in any order), each slot's exp(gate - max)
//    in its warp, then warp 0 adds them in slot order as window_value does: the same operations on the same values,
//    so the same bits, without a thread's chain of 2 x 128 dependent loads (156 us a V4-Flash HCA layer at 4,096
//    tokens in one thread a channel, 40 spread; a CSA window spread 164 against 41, session 37).
constexpr int kLaneThreads = 64;
__global__ void __launch_bounds__(kLaneThreads) compressor_sums_lanes_kernel(StepDevice st, LayerStateView v,
                                                                             CompressorCudaParams p, const float* kv,
                                                                             const float* gate, const int32_t* list) {
  dsinfer::cuda::pdl_wait_then_release();
  if (int64_t(blockIdx.x) >= int64_t(list[0])) return;
  const int64_t t = list[1 + blockIdx.x], pos = st.pos[t], ch = int64_t(blockIdx.y) * kLaneThreads + threadIdx.x;
  if (ch >= p.d) return;
  const int32_t s = st.seq_of_token[t];
  const SlotSource src{st, v, p, kv, gate, st.start_pos[s], st.cu_seqlens[s], st.slot[s]};
  entry_row(st, v, p, t, s, pos / p.m)[ch] = window_value(src, p, pos / p.m, ch);
}

constexpr int kSumCh = 32, kSumGroups = 8, kSumThreads = kSumCh * kSumGroups;
__device__ __forceinline__ int64_t window_slots(const CompressorCudaParams& p, int64_t w) {
  return (p.overlap && w > 0 ? 2 : 1) * p.m;
}
size_t sums_smem_bytes(const CompressorCudaParams& p) {
  return size_t(p.c() * p.m) * kSumCh * (2 * sizeof(float) + sizeof(double)) + kSumGroups * kSumCh * sizeof(float);
}
__global__ void __launch_bounds__(kSumThreads) compressor_sums_kernel(StepDevice st, LayerStateView v,
                                                                      CompressorCudaParams p, const float* kv,
                                                                      const float* gate, const int32_t* list) {
  dsinfer::cuda::pdl_wait_then_release();
  if (int64_t(blockIdx.x) >= int64_t(list[0])) return;
  extern __shared__ double sum_smem[];
  const int64_t S_max = p.c() * p.m;
  double* X = sum_smem;                                        // [S][kSumCh]
  float* G = reinterpret_cast<float*>(X + S_max * kSumCh);     // [S][kSumCh]
  float* K = G + S_max * kSumCh;                               // [S][kSumCh]
  float* M = K + S_max * kSumCh;                               // [kSumGroups][kSumCh]
  const int lane = int(threadIdx.x) & 31, grp = int(threadIdx.x) >> 5;
  const int64_t t = list[1 + blockIdx.x], pos = st.pos[t], w = pos / p.m, ch = int64_t(blockIdx.y) * kSumCh + lane;
  const int32_t s = st.seq_of_token[t];
  const SlotSource src{st, v, p, kv, gate, st.start_pos[s], st.cu_seqlens[s], st.slot[s]};
  const bool prev = p.overlap && w > 0;
  const int64_t S = window_slots(p, w), cur_half = p.overlap ? p.d : 0;
  float mx = -INFINITY;
  if (ch < p.d) {
#pragma unroll 4
    for (int64_t j = grp; j < S; j += kSumGroups) {  // slot j: the previous window's j (overlap), else the current's
      float k, g;
      if (prev && j < p.m) src.fetch((w - 1) * p.m + j, ch, k, g);
      else src.fetch(w * p.m + (prev ? j - p.m : j), cur_half + ch, k, g);
      G[j * kSumCh + lane] = g;
      K[j * kSumCh + lane] = k;
      mx = fmaxf(mx, g);
    }
  }
  M[grp * kSumCh + lane] = mx;
  __syncthreads();
  for (int i = 0; i < kSumGroups; ++i) mx = fmaxf(mx, M[i * kSumCh + lane]);
  if (ch < p.d)
    for (int64_t j = grp; j < S; j += kSumGroups) X[j * kSumCh + lane] = exp(double(G[j * kSumCh + lane]) - double(mx));
  __syncthreads();
  if (grp != 0 || ch >= p.d) return;
  double den = 0.0, num = 0.0;
  for (int64_t j = 0; j < S; ++j) {
    const double x = X[j * kSumCh + lane];
    den += x;
    num += x * double(K[j * kSumCh + lane]);
  }
  entry_row(st, v, p, t, s, w)[ch] = float(num / den);
}

// 3. one block of d threads per listed window: the raw row back into shared memory, finish_entry.
__global__ void compressor_finish_kernel(StepDevice st, LayerStateView v, CompressorCudaParams p, const int32_t* list) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ double cmp_smem[];
  float* e = reinterpret_cast<float*>(cmp_smem + p.d);
  if (int64_t(blockIdx.x) >= int64_t(list[0])) return;
  const int64_t t = list[1 + blockIdx.x], pos = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  if (threadIdx.x < p.d) e[threadIdx.x] = entry_row(st, v, p, t, s, pos / p.m)[threadIdx.x];
  finish_entry(e, cmp_smem, st, v, p, t, s, pos);
}

__global__ void compressor_frontier_kernel(StepDevice st, LayerStateView v, CompressorCudaParams p, const float* kv,
                                           const float* gate) {
  dsinfer::cuda::pdl_wait_then_release();
  const int64_t t = blockIdx.x, pos = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  const int64_t end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
  if (pos < end - v.frontier_rows) return;  // a later token of the chunk owns this row
  const int64_t cd = p.c() * p.d;
  float* row = p.indexer ? v.index_frontier_row(st.slot[s], pos) : v.frontier_row(st.slot[s], pos);
  const float* a = p.ape + (pos % p.m) * cd;
  for (int64_t i = threadIdx.x; i < cd; i += blockDim.x) {
    row[i] = kv[t * cd + i];
    row[cd + i] = __fadd_rn(gate[t * cd + i], a[i]);
  }
}
}  // namespace

void launch_compressor_emit(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                            const float* kv, const float* gate, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 block(unsigned((p.d + 31) / 32 * 32));
  const size_t smem = size_t(p.d) * (sizeof(double) + sizeof(float));
  if (!compressor_split_emit(step.T, p)) {
    dsinfer::cuda::pdl_launch(compressor_emit_kernel, dim3(unsigned(step.T)), block, smem, st, step, view, p, kv, gate);
    return;
  }
  using dsinfer::cuda::pdl_launch;
  const unsigned entries = unsigned(compressor_max_entries(step.T, step.num_seqs, p.m));
  pdl_launch(compressor_list_kernel, dim3(1), dim3(kListThreads), 0, st, step, p.m, p.entries, p.out_rows);
  const auto* list = static_cast<const int32_t*>(p.entries);
  if (compressor_sums_spread(p)) {
    const size_t sums_smem = sums_smem_bytes(p);
    if (sums_smem > 48 * 1024)
      cudaFuncSetAttribute(compressor_sums_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sums_smem));
    pdl_launch(compressor_sums_kernel, dim3(entries, unsigned((p.d + kSumCh - 1) / kSumCh)), dim3(kSumThreads),
               sums_smem, st, step, view, p, kv, gate, list);
  } else {
    pdl_launch(compressor_sums_lanes_kernel, dim3(entries, unsigned((p.d + kLaneThreads - 1) / kLaneThreads)),
               dim3(kLaneThreads), 0, st, step, view, p, kv, gate, list);
  }
  pdl_launch(compressor_finish_kernel, dim3(entries), block, smem, st, step, view, p, list);
}

void launch_compressor_frontier(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                                const float* kv, const float* gate, void* stream) {
  dsinfer::cuda::pdl_launch(compressor_frontier_kernel, dim3(unsigned(step.T)), dim3(256), 0,
                            static_cast<cudaStream_t>(stream), step, view, p, kv, gate);
}

}  // namespace dsinfer::ops::cuda::detail
