// CUDA CSA2 kernels (see csa2_cuda.h; the indexer is in csa2_index.cu). One block per token or row; every
// reduction in double where the CPU reference accumulates in double, every fp32 product and quotient as a single
// rounded operation (no contraction).
#include "cuda/ops_device.cuh"
#include "ops/csa2/csa2_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 128;

// In-place QAT of v[0, n) in shared memory, one warp per block of channels (qat_ref.cpp's arithmetic).
__device__ void smem_qat(float* v, int n, int block, QatKind kind) {
  __syncthreads();
  if (n % block == 0) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const bool fp8 = kind == QatKind::Fp8Ue8m0;
    const float qmax = fp8 ? 448.0f : 6.0f;
    for (int b0 = warp * block; b0 < n; b0 += nw * block) {
      float amax = 0.0f;
      for (int i = b0 + lane; i < b0 + block; i += 32) amax = fmaxf(amax, fabsf(v[i]));
      amax = dev::warp_max(amax);
      float s;
      if (kind == QatKind::Fp8Ue8m0) s = dev::fp8_act_scale(amax);
      else if (kind == QatKind::Fp4Ue8m0) s = dev::pow2_ceil(__fmul_rn(fmaxf(amax, 6.0f * 1.1754943508222875e-38f), 1.0f / 6.0f));
      else s = dev::round_e4m3(__fdiv_rn(fmaxf(amax, 6.0f / 512.0f), 6.0f));
      for (int i = b0 + lane; i < b0 + block; i += 32) {
        const float x = fminf(fmaxf(__fdiv_rn(v[i], s), -qmax), qmax);
        v[i] = __fmul_rn(fp8 ? dev::round_e4m3(x) : dev::round_e2m1(x), s);
      }
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) qat_kernel(float* x, int64_t dim, int64_t block, QatKind kind) {
  extern __shared__ float sv[];
  float* row = x + int64_t(blockIdx.x) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) sv[i] = row[i];
  smem_qat(sv, int(dim), int(block), kind);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) row[i] = sv[i];
}

struct TokenCtx {
  int64_t p, start, t0, end;
  int32_t slot;
  const int32_t* table;
};
__device__ __forceinline__ TokenCtx token_ctx(const StepDevice& st, int64_t t) {
  TokenCtx c;
  const int32_t s = st.seq_of_token[t];
  c.p = st.pos[t];
  c.start = st.start_pos[s];
  c.t0 = st.cu_seqlens[s];
  c.end = c.start + (st.cu_seqlens[s + 1] - c.t0);
  c.slot = st.slot[s];
  c.table = st.block_tables + int64_t(s) * st.table_stride;
  return c;
}

__global__ void __launch_bounds__(kThreads) pool_kernel(StepDevice st, LayerStateView v, int64_t r, int64_t d,
                                                        const float* kv, const float* gate, float* latent) {
  const int64_t t = blockIdx.x;
  const TokenCtx c = token_ctx(st, t);
  float* out = latent + t * d;
  if ((c.p + 1) % r != 0) {
    for (int64_t i = threadIdx.x; i < d; i += kThreads) out[i] = 0.0f;
    return;
  }
  const int64_t first = c.p + 1 - r;
  // Member q of the group: this step's projection row, or the frontier row an earlier step wrote.
  auto row = [&](int64_t q) -> const float* {
    return q >= c.start ? nullptr : v.frontier_row(c.slot, q);
  };
  for (int64_t ch = threadIdx.x; ch < d; ch += kThreads) {
    double mx = -INFINITY;
    for (int64_t s = 0; s < r; ++s) {
      const int64_t q = first + s;
      const float* fr = row(q);
      const float g = fr ? fr[d + ch] : gate[(c.t0 + q - c.start) * d + ch];
      mx = fmax(mx, double(g));
    }
    double den = 0.0, num = 0.0;
    for (int64_t s = 0; s < r; ++s) {
      const int64_t q = first + s;
      const float* fr = row(q);
      const float g = fr ? fr[d + ch] : gate[(c.t0 + q - c.start) * d + ch];
      const float k = fr ? fr[ch] : kv[(c.t0 + q - c.start) * d + ch];
      const double e = exp(double(g) - mx);
      den += e;
      num += e * double(k);
    }
    out[ch] = float(num / den);
  }
}

__global__ void __launch_bounds__(kThreads) frontier_write_kernel(StepDevice st, LayerStateView v, int64_t d,
                                                                  const float* kv, const float* gate) {
  const int64_t t = blockIdx.x;
  const TokenCtx c = token_ctx(st, t);
  if (c.p < c.end - v.frontier_rows) return;  // overwritten by a later position of the same chunk
  float* fr = v.frontier_row(c.slot, c.p);
  for (int64_t i = threadIdx.x; i < d; i += kThreads) {
    fr[i] = kv[t * d + i];
    fr[d + i] = gate[t * d + i];
  }
}

// v[i0, i1) of a shared-memory vector rounded to bf16 (V4.1 official numerics); synchronises before and after.
__device__ void round_smem(float* v, int64_t i0, int64_t i1) {
  __syncthreads();
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) v[i] = dev::round_bf16(v[i]);
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) emit_kernel(StepDevice st, LayerStateView v, Csa2EmitCudaParams p,
                                                        const float* latent, const float* key) {
  extern __shared__ float sm[];
  float* ks = sm;         // [di]
  float* es = sm + p.di;  // [d]
  const int64_t t = blockIdx.x;
  const TokenCtx c = token_ctx(st, t);
  if ((c.p + 1) % p.ratio != 0) return;  // block-uniform
  const int64_t j = c.p / p.ratio, gpos = j * p.ratio;
  for (int64_t i = threadIdx.x; i < p.di; i += kThreads) ks[i] = key[t * p.di + i];
  for (int64_t i = threadIdx.x; i < p.d; i += kThreads) es[i] = latent[t * p.d + i];
  dev::smem_rmsnorm(ks, int(p.di), p.key_norm_w, p.eps);
  if (p.round_bf16) round_smem(ks, 0, p.di);
  dev::smem_rope(ks, int(p.di), int(p.rope_dim), p.inv_freq, gpos, false, 1.0f);
  dev::smem_rope(es, int(p.d), int(p.rope_dim), p.inv_freq, gpos, false, 1.0f);
  if (p.round_bf16) {  // the rotated channels, stored back to bf16 by the official RoPE
    round_smem(ks, p.di - p.rope_dim, p.di);
    round_smem(es, p.d - p.rope_dim, p.d);
  }
  if (p.qat) {
    smem_qat(ks, int(p.di), 32, QatKind::Fp4Ue8m0);
    smem_qat(es, int(p.d), 16, QatKind::Fp4E4m3);
  }
  float* kd = v.index_key(c.table, j);
  float* ed = v.entry(c.table, j);
  for (int64_t i = threadIdx.x; i < p.di; i += kThreads) kd[i] = ks[i];
  for (int64_t i = threadIdx.x; i < p.d; i += kThreads) ed[i] = es[i];
}

}  // namespace

void launch_csa2_qat(float* x, int64_t rows, int64_t dim, int64_t block, QatKind kind, void* stream) {
  qat_kernel<<<unsigned(rows), kThreads, size_t(dim) * 4, static_cast<cudaStream_t>(stream)>>>(x, dim, block, kind);
}

void launch_csa2_pool(const StepDevice& st, const LayerStateView& view, int64_t ratio, int64_t d, const float* kv,
                      const float* gate, float* latent, void* stream) {
  pool_kernel<<<unsigned(st.T), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(st, view, ratio, d, kv, gate, latent);
}

void launch_csa2_frontier_write(const StepDevice& st, const LayerStateView& view, int64_t d, const float* kv,
                                const float* gate, void* stream) {
  frontier_write_kernel<<<unsigned(st.T), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(st, view, d, kv, gate);
}

void launch_csa2_emit(const StepDevice& st, const LayerStateView& view, const Csa2EmitCudaParams& p,
                      const float* latent, const float* key, void* stream) {
  const size_t smem = size_t(p.d + p.di) * 4;
  emit_kernel<<<unsigned(st.T), kThreads, smem, static_cast<cudaStream_t>(stream)>>>(st, view, p, latent, key);
}

}  // namespace dsinfer::ops::cuda::detail
