// CUDA CSA2 kernels (see csa2_cuda.h). One block per token or row; every reduction in double where the CPU
// reference accumulates in double, every fp32 product and quotient as a single rounded operation (no contraction).
#include "cuda/ops_device.cuh"
#include "ops/csa2/csa2_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 128;
constexpr int kSelThreads = 256;

// 2^ceil(log2(t)) read off the fp32 bits (ops::pow2_ceil_scale).
__device__ __forceinline__ float pow2_ceil(float t) {
  const uint32_t bits = __float_as_uint(t);
  const int k = int((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return ldexpf(1.0f, k);
}

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
      if (kind == QatKind::Fp8Ue8m0) s = pow2_ceil(__fmul_rn(fmaxf(amax, 1e-4f), 1.0f / 448.0f));
      else if (kind == QatKind::Fp4Ue8m0) s = pow2_ceil(__fmul_rn(fmaxf(amax, 6.0f * 1.1754943508222875e-38f), 1.0f / 6.0f));
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
  dev::smem_rope(ks, int(p.di), int(p.rope_dim), p.inv_freq, gpos, false, 1.0f);
  dev::smem_rope(es, int(p.d), int(p.rope_dim), p.inv_freq, gpos, false, 1.0f);
  if (p.qat) {
    smem_qat(ks, int(p.di), 32, QatKind::Fp4Ue8m0);
    smem_qat(es, int(p.d), 16, QatKind::Fp4E4m3);
  }
  float* kd = v.index_key(c.table, j);
  float* ed = v.entry(c.table, j);
  for (int64_t i = threadIdx.x; i < p.di; i += kThreads) kd[i] = ks[i];
  for (int64_t i = threadIdx.x; i < p.d; i += kThreads) ed[i] = es[i];
}

// One warp per key: I[j] = sum_h max(q_h . k_j, 0) * dim^-1/2 * w_h, in double (csa2_index_scores_ref).
__global__ void __launch_bounds__(kThreads) index_scores_kernel(StepDevice st, LayerStateView src, Csa2IndexCudaParams p,
                                                                const float* q, const float* w, float* scores) {
  const int64_t t = blockIdx.x;
  const TokenCtx c = token_ctx(st, t);
  const int64_t n = (c.p + 1) / p.ratio;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = kThreads / 32;
  const double scale = 1.0 / sqrt(double(p.dim));
  const float* qt = q + t * p.heads * p.dim;
  for (int64_t j = warp; j < n; j += nw) {
    const float* k = src.index_key(c.table, j);
    double total = 0.0;
    for (int64_t h = 0; h < p.heads; ++h) {
      double dot = 0.0;
      for (int64_t i = lane; i < p.dim; i += 32) dot += double(qt[h * p.dim + i]) * double(k[i]);
      dot = dev::warp_sum(dot);
      total += fmax(dot, 0.0) * scale * double(w[t * p.heads + h]);
    }
    if (lane == 0) scores[t * p.stride + j] = float(total);
  }
}

// (value, index) order of the selections: larger value first, ties to the lower index; index -1 = none.
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return va > vb || (va == vb && ia < ib);
}

// Block-wide best (value, index) over v[0, n); all threads get the result.
__device__ void block_best(const float* v, int64_t n, float& bv, int& bi) {
  __shared__ float s_v[kSelThreads / 32];
  __shared__ int s_i[kSelThreads / 32];
  float mv = -INFINITY;
  int mi = -1;
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads)
    if (better(v[j], int(j), mv, mi)) mv = v[j], mi = int(j);
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(dev::kFull, mv, off);
    const int oi = __shfl_xor_sync(dev::kFull, mi, off);
    if (better(ov, oi, mv, mi)) mv = ov, mi = oi;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s_v[threadIdx.x >> 5] = mv, s_i[threadIdx.x >> 5] = mi;
  __syncthreads();
  bv = -INFINITY;
  bi = -1;
  for (int w = 0; w < kSelThreads / 32; ++w)
    if (better(s_v[w], s_i[w], bv, bi)) bv = s_v[w], bi = s_i[w];
  __syncthreads();
}

// Candidate source: blocks scored by their best entry, the newest entry's block pinned, the best
// cand_topk_blocks finite blocks kept (csa2_candidate_blocks_ref) -> mask row.
__device__ void candidate_mask(const Csa2IndexCudaParams& p, const float* s, int64_t n, float* blk, uint8_t* mask) {
  const int64_t bs = p.cand_block_size, nb = (n + bs - 1) / bs;
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads) mask[j] = 0;
  for (int64_t b = threadIdx.x; b < nb; b += kSelThreads) {
    float best = -INFINITY;
    for (int64_t j = b * bs; j < min(n, (b + 1) * bs); ++j) best = fmaxf(best, s[j]);
    blk[b] = b == (n - 1) / bs ? INFINITY : best;
  }
  __syncthreads();
  const int64_t k = min(p.cand_topk_blocks, nb);
  for (int64_t i = 0; i < k; ++i) {
    float bv;
    int b;
    block_best(blk, nb, bv, b);
    if (b < 0 || bv == -INFINITY) break;  // picks come in decreasing order: the rest are -inf too
    for (int64_t j = b * bs + threadIdx.x; j < min(n, (b + 1) * bs); j += kSelThreads) mask[j] = 1;
    if (threadIdx.x == 0) blk[b] = -INFINITY;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kSelThreads) index_select_kernel(StepDevice st, Csa2IndexCudaParams p, float* scores,
                                                                   uint8_t* mask, int32_t* mask_n, float* blk,
                                                                   int32_t* sel) {
  extern __shared__ int picks[];  // [topk]
  __shared__ int s_count;
  const int64_t t = blockIdx.x;
  const int64_t n = (st.pos[t] + 1) / p.ratio;
  float* s = scores + t * p.stride;
  uint8_t* m = mask + t * p.stride;
  if (p.mode == Csa2SelectMode::Candidate) {
    candidate_mask(p, s, n, blk + t * p.stride, m);
    if (threadIdx.x == 0) mask_n[t] = int32_t(n);
  }
  const int64_t mn = p.mode == Csa2SelectMode::Masked ? mask_n[t] : 0;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads) {
    const bool ok = isfinite(s[j]) && (mn == 0 || (j < mn && m[j]));
    if (!ok) s[j] = -INFINITY;
  }
  if (threadIdx.x == 0) s_count = 0;
  __syncthreads();
  const int64_t k = min(p.topk, n);
  for (int64_t i = 0; i < k; ++i) {
    float bv;
    int j;
    block_best(s, n, bv, j);
    if (j < 0 || bv == -INFINITY) break;
    if (threadIdx.x == 0) {
      picks[i] = j;
      s_count = int(i + 1);
      s[j] = -INFINITY;
    }
    __syncthreads();
  }
  __syncthreads();
  const int cnt = s_count;
  int32_t* out = sel + t * p.topk;
  for (int64_t i = threadIdx.x; i < p.topk; i += kSelThreads) {
    if (i >= cnt) {
      out[i] = -1;
      continue;
    }
    int rank = 0;  // picks are distinct: the rank is the ascending position
    for (int u = 0; u < cnt; ++u) rank += picks[u] < picks[i];
    out[rank] = picks[i];
  }
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

void launch_csa2_index_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p,
                              const float* q, const float* w, float* scores, void* stream) {
  index_scores_kernel<<<unsigned(st.T), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(st, src, p, q, w, scores);
}

void launch_csa2_index_select(const StepDevice& st, const Csa2IndexCudaParams& p, float* scores, uint8_t* mask,
                              int32_t* mask_n, float* block_scratch, int32_t* sel, void* stream) {
  const size_t smem = size_t(p.topk) * 4;
  index_select_kernel<<<unsigned(st.T), kSelThreads, smem, static_cast<cudaStream_t>(stream)>>>(
      st, p, scores, mask, mask_n, block_scratch, sel);
}

}  // namespace dsinfer::ops::cuda::detail
