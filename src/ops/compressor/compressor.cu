// CUDA compressor kernels (see compressor_cuda.h). The emit: each window closed in the step pooled per channel
// (window_value), then post-processed over the whole entry (finish_entry); decode sizes in one kernel, prefill sizes
// in three (compressor_split_emit: the list of closing tokens, the pooled values over channel slices of every listed
// window, the post-processing), the same functions in the same order, so the same bits. Then the step's frontier rows
// (write_frontier): their own kernel, or the decode emit's blocks where compressor_frontier_in_emit allows.
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
  // Channel `off` (half offset + channel) of the slot at position q: from this step's projections (q >= start, made
  // by the kernel before the emit) or from the frontier row an earlier step wrote (readable before the PDL wait,
  // cuda/pdl.cuh: this step writes frontier rows after the emit's reads, or in the emit where
  // compressor_frontier_in_emit shows no block writes a row another reads); g is gate + ape.
  __device__ bool in_step(int64_t q) const { return q >= start; }
  __device__ float ape(int64_t q, int64_t off) const { return p.ape[(q % p.m) * p.c() * p.d + off]; }
  __device__ void frontier(int64_t q, int64_t off, float& k, float& g) const {
    const float* row = p.indexer ? v.index_frontier_row(slot, q) : v.frontier_row(slot, q);
    k = row[off];
    g = row[p.c() * p.d + off];
  }
  __device__ void step_kv(int64_t q, int64_t off, float& k, float& gate_only) const {
    const int64_t i = (t0 + (q - start)) * p.c() * p.d + off;
    k = kv[i];
    gate_only = gate[i];
  }
  __device__ void fetch(int64_t q, int64_t off, float& k, float& g) const {
    if (!in_step(q)) return frontier(q, off, k, g);
    step_kv(q, off, k, g);
    g = __fadd_rn(g, ape(q, off));
  }
};

// Slot j of window w's S slots (under overlap and w > 0 the previous window's m slots first, then the current
// window's m): its position, and the offset of its channels in a projection / frontier row (the current window's
// half is the second d under overlap).
struct WindowSlots {
  int64_t w, m, half;
  bool prev;
  __device__ int64_t count() const { return (prev ? 2 : 1) * m; }
  __device__ int64_t pos(int64_t j) const { return prev && j < m ? (w - 1) * m + j : w * m + (prev ? j - m : j); }
  __device__ int64_t off(int64_t j) const { return prev && j < m ? 0 : half; }
};
__device__ WindowSlots window_slots(const CompressorCudaParams& p, int64_t w) {
  return {w, p.m, p.overlap ? p.d : 0, p.overlap && w > 0};
}

// The pooled value of one channel over S slots (slot(j, k, g): kv and gate + ape of slot j): the softmax of the
// gates weighting kv, in double, summed in slot order as the reference sums them (the max is the same in any order).
// Loads of several slots in flight (the unrolled loops).
template <class Slot>
__device__ float pool_slots(int64_t S, const Slot& slot) {
  float mx = -INFINITY, k, g;
#pragma unroll 4
  for (int64_t j = 0; j < S; ++j) {
    slot(j, k, g);
    mx = fmaxf(mx, g);
  }
  double den = 0.0, num = 0.0;
#pragma unroll 4
  for (int64_t j = 0; j < S; ++j) {
    slot(j, k, g);
    const double x = exp(double(g) - double(mx));
    den += x;
    num += x * double(k);
  }
  return float(num / den);
}

// The pooled value of channel ch (< p.d) of window w, read where it lies (SlotSource::fetch).
__device__ float window_value(const SlotSource& src, const CompressorCudaParams& p, int64_t w, int64_t ch) {
  const WindowSlots ws = window_slots(p, w);
  return pool_slots(ws.count(), [&](int64_t j, float& k, float& g) { src.fetch(ws.pos(j), ws.off(j) + ch, k, g); });
}

// Where entry w of token t's sequence s goes: the FP8 path's out row t, else the state's entry / indexer key.
__device__ float* entry_row(const StepDevice& st, const LayerStateView& v, const CompressorCudaParams& p, int64_t t,
                            int32_t s, int64_t w) {
  if (p.out) return p.out + t * p.d;
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  return p.indexer ? v.index_key(table, w) : v.entry(table, w);
}

// What an entry's post-processing reads besides its pooled values, none of it written by the forward's kernels (the
// decode emit reads it before its PDL wait): this thread's norm weight, its RoPE pair's cos / sin (the window's first
// position), where the entry goes and (FP8 state) its row number.
struct EntryInputs {
  float norm_w = 1.0f, rope_c = 1.0f, rope_s = 0.0f;
  float* dst = nullptr;
  int32_t row = -1;
};
__device__ EntryInputs entry_inputs(const StepDevice& st, const LayerStateView& v, const CompressorCudaParams& p,
                                    int64_t t, int32_t s, int64_t pos) {
  EntryInputs in;
  const int64_t ch = threadIdx.x, w = pos / p.m;
  if (ch < p.d) in.norm_w = p.norm_w[ch];
  if (ch < p.rope_dim / 2)
    dev::rope_cos_sin(p.inv_freq[ch], pos + 1 - p.m, p.attention_factor, false, in.rope_c, in.rope_s);
  in.dst = entry_row(st, v, p, t, s, w);
  if (p.out) in.row = int32_t(v.entry_index(st.block_tables + int64_t(s) * st.table_stride, w));
  return in;
}

// The entry's post-processing in shared memory (e: the d pooled values, complete; one channel a thread), then its
// store: the weighted RMSNorm, RoPE at the window's first position, the FP8 / Hadamard + FP4 simulation. The whole
// block.
__device__ void finish_entry(float* e, double* scratch, const CompressorCudaParams& p, const EntryInputs& in,
                             int64_t t) {
  const int64_t ch = threadIdx.x;
  dev::smem_rmsnorm_own(e, int(p.d), in.norm_w, p.eps);
  if (p.rope_dim > 0) dev::smem_rope_own(e, int(p.d), int(p.rope_dim), in.rope_c, in.rope_s);
  if (p.sim == CompressorSim::Fp8Nope) dev::smem_block_quant_sim(e, int(p.fp8_dims), int(p.fp8_block), true);
  if (p.sim == CompressorSim::HadamardFp4) {
    dev::smem_hadamard(e, int(p.d), scratch);
    dev::smem_block_quant_sim(e, int(p.d), int(p.fp4_block), false);
  }
  if (p.out && threadIdx.x == 0) p.out_rows[t] = in.row;  // FP8 state: the caller encodes the row
  if (ch < p.d) in.dst[ch] = e[ch];
}

// Token t's frontier row (position pos % frontier_rows of its slot): its kv, then gate + ape, unless a later token of
// its run in the step owns that row. The whole block, after the wait.
__device__ void write_frontier(const StepDevice& st, const LayerStateView& v, const CompressorCudaParams& p,
                               const float* kv, const float* gate, int64_t t) {
  const int64_t pos = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  const int64_t end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
  if (pos < end - v.frontier_rows) return;
  const int64_t cd = p.c() * p.d;
  float* row = p.indexer ? v.index_frontier_row(st.slot[s], pos) : v.frontier_row(st.slot[s], pos);
  const float* a = p.ape + (pos % p.m) * cd;
  for (int64_t i = threadIdx.x; i < cd; i += blockDim.x) {
    row[i] = kv[t * cd + i];
    row[cd + i] = __fadd_rn(gate[t * cd + i], a[i]);
  }
}

// Decode sizes: one block per token, blockDim = d rounded up to a warp multiple (threads past d only join the
// block-wide steps); a token closing no window exits after the wait. The block is latency, not work (session 42:
// ~12 us an emitting launch of 64 threads against 1.3 for one that exits), so all it can read before the PDL wait it
// reads there, overlapping the projection GEMM before it: the step tables, the block table's row, the entry's
// inputs (entry_inputs) and, staged (kStaged, where the window's 2 x c*m x d floats fit in kEmitStagedMaxSmem),
// the frontier slots of earlier steps and the ape of this step's slots (K: kv, G: gate + ape, [S][d]); after it, only
// the projections of the window's tokens in this step. Unstaged (HCA's 128-slot windows at d = 512), window_value
// reads every slot after the wait. The same operations in the same order either way, so the same bits. With
// `frontier` every block then writes its token's frontier row (compressor_frontier_in_emit).
constexpr size_t kEmitStagedMaxSmem = 48 * 1024;  // without the opt-in attribute
template <bool kStaged>
__global__ void compressor_emit_kernel(StepDevice st, LayerStateView v, CompressorCudaParams p, const float* kv,
                                       const float* gate, bool frontier) {
  extern __shared__ double cmp_smem[];  // [d] doubles (Hadamard scratch), [d] floats (the entry), staged: K and G
  float* e = reinterpret_cast<float*>(cmp_smem + p.d);
  const int64_t t = blockIdx.x, pos = st.pos[t], ch = threadIdx.x;
  if ((pos + 1) % p.m != 0) {  // block-uniform
    dsinfer::cuda::pdl_wait_then_release();
    if (p.out_rows && threadIdx.x == 0) p.out_rows[t] = -1;
    if (frontier) write_frontier(st, v, p, kv, gate, t);
    return;
  }
  const int32_t s = st.seq_of_token[t];
  const SlotSource src{st, v, p, kv, gate, st.start_pos[s], st.cu_seqlens[s], st.slot[s]};
  const EntryInputs in = entry_inputs(st, v, p, t, s, pos);
  if constexpr (kStaged) {
    const WindowSlots ws = window_slots(p, pos / p.m);
    const int64_t S = ws.count();
    float *K = e + p.d, *G = K + p.c() * p.m * p.d;
    if (ch < p.d)
#pragma unroll 4
      for (int64_t j = 0; j < S; ++j) {
        const int64_t q = ws.pos(j), off = ws.off(j) + ch;
        if (src.in_step(q)) G[j * p.d + ch] = src.ape(q, off);
        else src.frontier(q, off, K[j * p.d + ch], G[j * p.d + ch]);
      }
    dsinfer::cuda::pdl_wait_then_release();
    if (ch < p.d) {
#pragma unroll 4
      for (int64_t j = 0; j < S; ++j) {
        const int64_t q = ws.pos(j);
        if (!src.in_step(q)) continue;
        float g;
        src.step_kv(q, ws.off(j) + ch, K[j * p.d + ch], g);
        G[j * p.d + ch] = __fadd_rn(g, G[j * p.d + ch]);
      }
      e[ch] = pool_slots(S, [&](int64_t j, float& k, float& g) {
        k = K[j * p.d + ch];
        g = G[j * p.d + ch];
      });
    }
  } else {
    dsinfer::cuda::pdl_wait_then_release();
    if (ch < p.d) e[ch] = window_value(src, p, pos / p.m, ch);
  }
  finish_entry(e, cmp_smem, p, in, t);
  if (frontier) write_frontier(st, v, p, kv, gate, t);  // after this block's reads of the frontier
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
  const WindowSlots ws = window_slots(p, w);
  const int64_t S = ws.count();
  float mx = -INFINITY;
  if (ch < p.d) {
#pragma unroll 4
    for (int64_t j = grp; j < S; j += kSumGroups) {
      float k, g;
      src.fetch(ws.pos(j), ws.off(j) + ch, k, g);
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
  const EntryInputs in = entry_inputs(st, v, p, t, s, pos);
  if (threadIdx.x < p.d) e[threadIdx.x] = in.dst[threadIdx.x];
  finish_entry(e, cmp_smem, p, in, t);
}

__global__ void compressor_frontier_kernel(StepDevice st, LayerStateView v, CompressorCudaParams p, const float* kv,
                                           const float* gate) {
  dsinfer::cuda::pdl_wait_then_release();
  write_frontier(st, v, p, kv, gate, blockIdx.x);
}
}  // namespace

void launch_compressor_emit(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                            const float* kv, const float* gate, bool frontier, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 block(unsigned((p.d + 31) / 32 * 32));
  const size_t smem = size_t(p.d) * (sizeof(double) + sizeof(float));
  if (!compressor_split_emit(step.T, p)) {
    const size_t staged = smem + size_t(2 * p.c() * p.m * p.d) * sizeof(float);  // K and G, [c*m][d] each
    if (staged <= kEmitStagedMaxSmem)
      dsinfer::cuda::pdl_launch(compressor_emit_kernel<true>, dim3(unsigned(step.T)), block, staged, st, step, view, p,
                                kv, gate, frontier);
    else
      dsinfer::cuda::pdl_launch(compressor_emit_kernel<false>, dim3(unsigned(step.T)), block, smem, st, step, view, p,
                                kv, gate, frontier);
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
