// The runner's FP8 state as sparse_attention_fp8 key lists (see sparse_attention_fp8_cuda.h: fp8_state_keys,
// fp8_ring_rows). One block of 128 threads per token; every list entry is written (-1 past a token's length), so a
// captured decode graph reads no stale entry. The compressed list is packed: only picks of visible entries, in order.
// fp8_state_keys launches with PDL (session 36): the token's window bounds come from the step's tables (step inputs,
// cuda/pdl.cuh) before the wait, the indexer's picks and every store after it.
#include "cuda/pdl.cuh"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) fp8_state_keys_kernel(StepDevice st, LayerStateView v, Fp8StateKeys k) {
  const int64_t t = blockIdx.x, p = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  const int64_t start = st.start_pos[s], t0 = st.cu_seqlens[s];
  const int32_t slot = st.slot[s];
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  dsinfer::cuda::pdl_wait_then_release();
  const int64_t lo = p - k.window + 1 > 0 ? p - k.window + 1 : 0;
  const int64_t ring_hi = start < p + 1 ? start : p + 1;  // ring keys: positions [lo, ring_hi)
  const int64_t step_lo = lo > start ? lo : start;        // this step's rows: positions [step_lo, p]
  const int64_t nring = ring_hi > lo ? ring_hi - lo : 0, nstep = p + 1 - step_lo;
  for (int64_t i = threadIdx.x; i < k.window; i += kThreads) {
    k.ring[t * k.window + i] = i < nring ? int32_t(v.ring_index(slot, lo + i)) : -1;
    k.step[t * k.window + i] = i < nstep ? int32_t(t0 + (step_lo + i - start)) : -1;
  }
  // Compressed entries: the picks that name a visible entry, in list order, packed to the front (the indexer's -1
  // padding and any out-of-range pick dropped), so the attention runs no tile of missing keys: during a prefill from
  // position 0 the CSA top-k list holds only (p + 1) / 4 entries before p = 2,047. The count is comp_len.
  __shared__ int32_t warp_valid[kThreads / 32];
  const int64_t visible = k.m > 0 ? (p + 1) / k.m : 0;
  const int64_t ncomp = k.topk_idx ? k.topk : (visible < k.comp_stride ? visible : k.comp_stride);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  int64_t packed = 0;  // valid picks before this chunk (the same in every thread)
  for (int64_t c0 = 0; c0 < ncomp; c0 += kThreads) {
    const int64_t c = c0 + threadIdx.x;
    int32_t row = -1;
    if (c < ncomp) {
      const int64_t j = k.topk_idx ? int64_t(k.topk_idx[t * k.topk + c]) : c;
      if (j >= 0 && j < visible) row = int32_t(v.entry_index(table, j));
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, row >= 0);
    if (lane == 0) warp_valid[warp] = __popc(ballot);
    __syncthreads();
    int64_t at = packed + __popc(ballot & ((1u << lane) - 1u));
    int64_t chunk = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) at += warp_valid[w];
      chunk += warp_valid[w];
    }
    if (row >= 0) k.comp[t * k.comp_stride + at] = row;
    packed += chunk;
    __syncthreads();  // warp_valid is rewritten by the next chunk
  }
  for (int64_t c = packed + threadIdx.x; c < k.comp_stride; c += kThreads) k.comp[t * k.comp_stride + c] = -1;
  if (threadIdx.x == 0) {
    k.ring_len[t] = int32_t(nring);
    k.step_len[t] = int32_t(nstep);
    if (k.comp_len) k.comp_len[t] = int32_t(k.m > 0 ? packed : 0);
    k.pos32[t] = int32_t(p);
  }
}

// Ring row of token t: its position's row in its slot's ring, -1 when a later token of its chunk owns that row
// (the fp32 ring_write's rule).
__global__ void fp8_ring_rows_kernel(StepDevice st, LayerStateView v, int32_t* rows) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= st.T) return;
  const int64_t pos = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  const int64_t end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
  rows[t] = pos < end - v.ring_rows ? -1 : int32_t(v.ring_index(st.slot[s], pos));
}
}  // namespace

void launch_fp8_state_keys(const StepDevice& st, const LayerStateView& v, const Fp8StateKeys& k, void* stream) {
  dsinfer::cuda::pdl_launch(fp8_state_keys_kernel, dim3(unsigned(st.T)), dim3(kThreads), 0,
                            static_cast<cudaStream_t>(stream), st, v, k);
}

void launch_fp8_ring_rows(const StepDevice& st, const LayerStateView& v, int32_t* rows, void* stream) {
  fp8_ring_rows_kernel<<<unsigned((st.T + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(st, v, rows);
}

}  // namespace dsinfer::ops::cuda::detail
