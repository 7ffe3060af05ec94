// CUDA compressor kernels (see compressor_cuda.h).
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
  const int64_t w = pos / p.m, ch = threadIdx.x;
  // blockDim is d rounded up to a warp multiple: threads past d only join the block-wide steps below.
  if (ch < p.d) {
    const bool prev = p.overlap && w > 0;
    const int64_t cur_half = p.overlap ? p.d : 0;
    float mx = -INFINITY, k, g;
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
      for (int64_t i = 0; i < p.m; ++i) {
        src.fetch((w - 1) * p.m + i, ch, k, g);
        const double x = exp(double(g) - double(mx));
        den += x;
        num += x * double(k);
      }
    for (int64_t i = 0; i < p.m; ++i) {
      src.fetch(w * p.m + i, cur_half + ch, k, g);
      const double x = exp(double(g) - double(mx));
      den += x;
      num += x * double(k);
    }
    e[ch] = float(num / den);
  }
  dev::smem_rmsnorm(e, int(p.d), p.norm_w, p.eps);
  if (p.rope_dim > 0) dev::smem_rope(e, int(p.d), int(p.rope_dim), p.inv_freq, pos + 1 - p.m, false, p.attention_factor);
  if (p.sim == CompressorSim::Fp8Nope) dev::smem_block_quant_sim(e, int(p.fp8_dims), int(p.fp8_block), true);
  if (p.sim == CompressorSim::HadamardFp4) {
    dev::smem_hadamard(e, int(p.d), cmp_smem);
    dev::smem_block_quant_sim(e, int(p.d), int(p.fp4_block), false);
  }
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  if (p.out) {  // FP8 state: the caller encodes the row
    if (ch < p.d) p.out[t * p.d + ch] = e[ch];
    if (threadIdx.x == 0) p.out_rows[t] = int32_t(v.entry_index(table, w));
    return;
  }
  float* dst = p.indexer ? v.index_key(table, w) : v.entry(table, w);
  if (ch < p.d) dst[ch] = e[ch];
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
  dsinfer::cuda::pdl_launch(compressor_emit_kernel, dim3(unsigned(step.T)), dim3(unsigned((p.d + 31) / 32 * 32)),
                            size_t(p.d) * (sizeof(double) + sizeof(float)), static_cast<cudaStream_t>(stream), step,
                            view, p, kv, gate);
}

void launch_compressor_frontier(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                                const float* kv, const float* gate, void* stream) {
  dsinfer::cuda::pdl_launch(compressor_frontier_kernel, dim3(unsigned(step.T)), dim3(256), 0,
                            static_cast<cudaStream_t>(stream), step, view, p, kv, gate);
}

}  // namespace dsinfer::ops::cuda::detail
