// CUDA mHC kernels (see mhc_cuda.h). hc_pre / hc_head run as two kernels:
//  1. hc_mix_kernel: the mixing GEMM mu[t, r] = fn[r] . x[t] plus sum(x[t]^2) for all tokens at once, split over the
//     n*dim reduction: block (tile, split) stages a chunk of kHcChunk floats of a tile of 8 or 32 tokens and of
//     every fn row in shared memory and accumulates in double (products of floats are exact in double, as in the
//     reference). Each (split, token, mix) partial is written by exactly one thread into the token's own output
//     row y[t] (viewed as doubles [splits, mixes + 1]); nothing is added atomically, so results are deterministic.
//  2. hc_finalize_kernel: per token, one warp sums the partials in split order, forms mu = acc * rsqrt(mean x^2 +
//     eps), the sigmoids and the Sinkhorn iterations (one comb element per lane, rows/columns gathered with
//     shuffles and summed in the reference's sequential k / j order, so the fp32 values equal a serial run); then
//     the token's team (one warp with 8 tokens per block for many tokens, the whole block for few) collapses
//     the streams with float4 loads into y (overwriting the partials, read before) and applies the RMSNorm.
// hc_post: one thread per (token, 4 channels), float4 loads, the token's post/comb in shared memory.
#include "cuda/ops_device.cuh"
#include "ops/mhc/mhc_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 256;
constexpr int kMaxMixes = (2 + kHcMaxN) * kHcMaxN;
constexpr int kQ = kHcChunk / 4;                      // float4 per staged row
constexpr int kStride = kQ + 1;                       // padded (68 floats): conflict-free float4 reads
constexpr int kSlots = (kHcMaxN * kHcMaxN + 31) / 32;  // comb elements per lane
constexpr int kMixSlots = (kMaxMixes + 1 + 31) / 32;  // mixes (+ sum of squares) per lane

__device__ float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

__device__ __forceinline__ void fma4(double& acc, const float4& a, const float4& b) {
  acc = fma(double(a.x), double(b.x), acc);
  acc = fma(double(a.y), double(b.y), acc);
  acc = fma(double(a.z), double(b.z), acc);
  acc = fma(double(a.w), double(b.w), acc);
}

// Partials of mixes [0, mixes) and the sum of squares (index mixes) of tokens tile*TT.. over the chunks of split
// blockIdx.y. rows: hc_head's token indices (null: token t is row t). Thread (t, g) owns mixes g, g + G, ...
template <int TT>
__global__ void __launch_bounds__(kThreads) hc_mix_kernel(const float* __restrict__ fn, int mixes,
                                                          const float* __restrict__ X, const int32_t* __restrict__ rows,
                                                          int64_t T, int64_t len, int64_t dim, int cps, float* y) {
  constexpr int G = kThreads / TT, kPer = (kMaxMixes + 1 + G - 1) / G;
  extern __shared__ float4 sm[];
  float4* xs = sm;                 // [TT][kStride]
  float4* fs = sm + TT * kStride;  // [mixes][kStride]
  const int R = mixes + 1, t = threadIdx.x % TT, g = threadIdx.x / TT;
  const int64_t tok0 = int64_t(blockIdx.x) * TT, nchunks = (len + kHcChunk - 1) / kHcChunk;
  const int64_t c0 = int64_t(blockIdx.y) * cps, c1 = c0 + cps < nchunks ? c0 + cps : nchunks;
  double acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.0;
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t k0 = c * kHcChunk;
    for (int i = threadIdx.x; i < TT * kQ; i += kThreads) {
      const int tt = i / kQ, q = i % kQ;
      const int64_t k = k0 + 4 * q, tok = tok0 + tt;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (tok < T && k < len) v = *reinterpret_cast<const float4*>(X + (rows ? int64_t(rows[tok]) : tok) * len + k);
      xs[tt * kStride + q] = v;
    }
    for (int i = threadIdx.x; i < mixes * kQ; i += kThreads) {
      const int r = i / kQ, q = i % kQ;
      const int64_t k = k0 + 4 * q;
      fs[r * kStride + q] = k < len ? *reinterpret_cast<const float4*>(fn + r * len + k) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();
#pragma unroll 2
    for (int q = 0; q < kQ; ++q) {
      const float4 xv = xs[t * kStride + q];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int r = g + G * i;
        if (r < R) fma4(acc[i], r < mixes ? fs[r * kStride + q] : xv, xv);
      }
    }
    __syncthreads();
  }
  const int64_t tok = tok0 + t;
  if (tok >= T) return;
  double* part = reinterpret_cast<double*>(y + tok * dim) + int64_t(blockIdx.y) * R;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (g + G * i < R) part[g + G * i] = acc[i];
}

// Element idx of a warp-wide array held as v[idx / 32] in lane idx % 32. Collective: call from all 32 lanes.
template <int K>
__device__ __forceinline__ float warp_pick(const float (&v)[K], int idx) {
  float out = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const float s = __shfl_sync(dev::kFull, v[i], idx & 31);
    if (i == (idx >> 5)) out = s;
  }
  return out;
}

// One warp: the token's mu from the split partials, pre (into smem), post and the Sinkhorn-normalised comb, in
// the float op order of ops/mhc/mhc_ref.cpp. kHead: pre only.
template <bool kHead>
__device__ void hc_coefficients(const HcNormParams& p, const double* part, int splits, float* pre, float* post,
                                float* comb) {
  const int lane = threadIdx.x & 31, n = int(p.n), mixes = kHead ? n : (2 + n) * n, R = mixes + 1;
  double acc[kMixSlots];
#pragma unroll
  for (int i = 0; i < kMixSlots; ++i) {
    const int j = lane + 32 * i;
    acc[i] = 0.0;
    if (j < R)
      for (int s = 0; s < splits; ++s) acc[i] += part[int64_t(s) * R + j];
  }
  __syncwarp();  // every partial is read before the collapse overwrites this row of y
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < kMixSlots; ++i) {
    const double v = __shfl_sync(dev::kFull, acc[i], mixes & 31);
    if (i == (mixes >> 5)) ss = v;
  }
  const double rho = 1.0 / sqrt(ss / double(p.n * p.dim) + double(p.rms_eps));
  float mu[kMixSlots];
#pragma unroll
  for (int i = 0; i < kMixSlots; ++i) mu[i] = float(acc[i] * rho);
  const float mu_post = warp_pick(mu, n + lane);  // lanes < n: mu[n + lane]
  if (lane < n) {
    pre[lane] = sigmoidf(mu[0] * p.scale[0] + p.base[lane]) + p.hc_eps;
    if (!kHead) post[lane] = 2.0f * sigmoidf(mu_post * p.scale[1] + p.base[n + lane]);
  }
  if (kHead) return;
  const int nn = n * n;
  int e[kSlots];  // this lane's comb elements (clamped to 0 beyond n*n: computed, never stored)
  float z[kSlots], c[kSlots], s[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    e[i] = lane + 32 * i < nn ? lane + 32 * i : 0;
    z[i] = warp_pick(mu, 2 * n + e[i]) * p.scale[2] + p.base[2 * n + e[i]];
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {  // row softmax over k
    const int j = e[i] / n;
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) mx = fmaxf(mx, warp_pick(z, j * n + k));
    c[i] = expf(z[i] - mx);
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int j = e[i] / n;
    s[i] = 0.0f;
    for (int k = 0; k < n; ++k) s[i] += warp_pick(c, j * n + k);
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) c[i] = c[i] / s[i] + p.hc_eps;
  for (int it = 0; it < p.sinkhorn_iters; ++it) {
    if (it > 0) {  // row normalisation: sums over k first, then the divisions
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int j = e[i] / n;
        s[i] = 0.0f;
        for (int k = 0; k < n; ++k) s[i] += warp_pick(c, j * n + k);
      }
#pragma unroll
      for (int i = 0; i < kSlots; ++i) c[i] /= (s[i] + p.hc_eps);
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {  // column normalisation
      const int k = e[i] % n;
      s[i] = 0.0f;
      for (int j = 0; j < n; ++j) s[i] += warp_pick(c, j * n + k);
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i) c[i] /= (s[i] + p.hc_eps);
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i)
    if (lane + 32 * i < nn) comb[lane + 32 * i] = c[i];
}

template <int kTeamWarps>
__device__ __forceinline__ void team_sync() {
  if (kTeamWarps == 1) __syncwarp();
  else __syncthreads();
}

template <int kTeamWarps>
__device__ __forceinline__ double team_sum(double v, double* red) {
  v = dev::warp_sum(v);
  if (kTeamWarps == 1) return v;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < kTeamWarps; ++w) t += red[w];  // same order in every thread
  return t;
}

// Token t of a team of kTeamWarps warps (1: 8 tokens per block; 8: one token per block).
template <bool kHead, int kTeamWarps>
__global__ void __launch_bounds__(kThreads) hc_finalize_kernel(HcNormParams p, const float* __restrict__ X,
                                                               const int32_t* __restrict__ rows, int64_t T, int splits,
                                                               float* y, float* post, float* comb) {
  constexpr int kTeams = kThreads / 32 / kTeamWarps, kTeamThreads = 32 * kTeamWarps;
  __shared__ float s_pre[kTeams][kHcMaxN];
  __shared__ double s_red[kThreads / 32];
  const int team = int(threadIdx.x >> 5) / kTeamWarps, tt = int(threadIdx.x) % kTeamThreads, n = int(p.n);
  const int64_t t = int64_t(blockIdx.x) * kTeams + team;
  if (t >= T) return;  // kTeamWarps > 1: one team per block, so the whole block leaves
  float* yr = y + t * p.dim;
  if (tt < 32)
    hc_coefficients<kHead>(p, reinterpret_cast<const double*>(yr), splits, s_pre[team],
                           kHead ? nullptr : post + t * n, kHead ? nullptr : comb + t * n * n);
  team_sync<kTeamWarps>();
  if (!kHead && p.pre_out && tt < n) p.pre_out[t * n + tt] = s_pre[team][tt];
  float pr[kHcMaxN];
#pragma unroll
  for (int j = 0; j < kHcMaxN; ++j) pr[j] = j < n ? (!kHead && p.pre_in ? p.pre_in[t * n + j] : s_pre[team][j]) : 0.0f;
  const int64_t d4 = p.dim / 4;
  const float4* x4 = reinterpret_cast<const float4*>(X + (rows ? int64_t(rows[t]) : t) * p.n * p.dim);
  float4* y4 = reinterpret_cast<float4*>(yr);
  double ss = 0.0;
  for (int64_t q = tt; q < d4; q += kTeamThreads) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
#pragma unroll
    for (int j = 0; j < kHcMaxN; ++j) {
      if (j >= n) break;
      const float4 v = x4[j * d4 + q];
      const double w = pr[j];
      a0 += w * double(v.x);
      a1 += w * double(v.y);
      a2 += w * double(v.z);
      a3 += w * double(v.w);
    }
    const float4 o = make_float4(float(a0), float(a1), float(a2), float(a3));
    ss += double(o.x) * double(o.x);
    ss += double(o.y) * double(o.y);
    ss += double(o.z) * double(o.z);
    ss += double(o.w) * double(o.w);
    y4[q] = o;
  }
  ss = team_sum<kTeamWarps>(ss, s_red);
  const float inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.rms_eps)));
  for (int64_t q = tt; q < d4; q += kTeamThreads) {  // each thread rescales the values it wrote
    float4 v = y4[q];
    const float* w = p.norm_w + 4 * q;
    v.x = __fmul_rn(__fmul_rn(v.x, inv), w[0]);
    v.y = __fmul_rn(__fmul_rn(v.y, inv), w[1]);
    v.z = __fmul_rn(__fmul_rn(v.z, inv), w[2]);
    v.w = __fmul_rn(__fmul_rn(v.w, inv), w[3]);
    y4[q] = v;
  }
}

__global__ void __launch_bounds__(kThreads) hc_post_kernel(int64_t T, int n, int64_t dim, const float* __restrict__ f,
                                                           const float* __restrict__ post,
                                                           const float* __restrict__ comb, float* X) {
  __shared__ float s_post[kHcMaxN], s_comb[kHcMaxN * kHcMaxN];
  const int64_t d4 = dim / 4, q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    __syncthreads();  // the previous token's coefficients are no longer read
    if (int(threadIdx.x) < n) s_post[threadIdx.x] = post[t * n + threadIdx.x];
    if (int(threadIdx.x) < n * n) s_comb[threadIdx.x] = comb[t * n * n + threadIdx.x];
    __syncthreads();
    if (q >= d4) continue;
    float4* x4 = reinterpret_cast<float4*>(X + t * n * dim);
    float4 old[kHcMaxN];
#pragma unroll
    for (int j = 0; j < kHcMaxN; ++j)
      if (j < n) old[j] = x4[j * d4 + q];
    const float4 fv = reinterpret_cast<const float4*>(f + t * dim)[q];
#pragma unroll
    for (int k = 0; k < kHcMaxN; ++k) {
      if (k >= n) break;
      const double pk = s_post[k];
      double a0 = pk * double(fv.x), a1 = pk * double(fv.y), a2 = pk * double(fv.z), a3 = pk * double(fv.w);
#pragma unroll
      for (int j = 0; j < kHcMaxN; ++j) {
        if (j >= n) break;
        const double cj = s_comb[j * n + k];
        a0 += cj * double(old[j].x);
        a1 += cj * double(old[j].y);
        a2 += cj * double(old[j].z);
        a3 += cj * double(old[j].w);
      }
      x4[k * d4 + q] = make_float4(float(a0), float(a1), float(a2), float(a3));
    }
  }
}
// One block per listed row: the collapse with the given pre (double, as hc_collapse_ref), then the RMSNorm.
__global__ void __launch_bounds__(kThreads) hc_collapse_norm_kernel(const float* __restrict__ X, const float* pre,
                                                                    const int32_t* rows, int64_t n, int64_t dim,
                                                                    const float* norm_w, float eps, float* y) {
  const int64_t r = blockIdx.x, t = rows[r];
  const float* x = X + t * n * dim;
  float* yr = y + r * dim;
  double ss = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += double(pre[t * n + j]) * double(x[j * dim + d]);
    const float v = float(acc);
    yr[d] = v;
    ss += double(v) * double(v);
  }
  ss = dev::block_sum(ss);
  const float inv = float(1.0 / sqrt(ss / double(dim) + double(eps)));
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) yr[d] = __fmul_rn(__fmul_rn(yr[d], inv), norm_w[d]);
}
}  // namespace

void launch_hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                             const float* norm_w, float eps, float* y, void* stream) {
  hc_collapse_norm_kernel<<<unsigned(R), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(X, pre, rows, n, dim, norm_w,
                                                                                           eps, y);
}

void launch_hc_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp, float* y,
                    float* post, float* comb, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const bool head = rows != nullptr;
  const int n = int(p.n), mixes = head ? n : (2 + n) * n;
  const int64_t len = p.n * p.dim;
  const dim3 grid1(unsigned((T + sp.tile - 1) / sp.tile), unsigned(sp.splits));
  const size_t smem1 = size_t(sp.tile + mixes) * kStride * sizeof(float4);
  if (sp.tile == 8)
    hc_mix_kernel<8><<<grid1, kThreads, smem1, st>>>(p.fn, mixes, X, rows, T, len, p.dim, sp.chunks_per_split, y);
  else
    hc_mix_kernel<32><<<grid1, kThreads, smem1, st>>>(p.fn, mixes, X, rows, T, len, p.dim, sp.chunks_per_split, y);
  // Whole block per token (wide) or one warp per token, 8 per block: chosen by mhc_cuda.cpp (HcSplit::wide).
  const bool wide = sp.wide;
  const unsigned grid2 = unsigned(wide ? T : (T + 7) / 8);
  if (head) {
    if (wide) hc_finalize_kernel<true, 8><<<grid2, kThreads, 0, st>>>(p, X, rows, T, sp.splits, y, nullptr, nullptr);
    else hc_finalize_kernel<true, 1><<<grid2, kThreads, 0, st>>>(p, X, rows, T, sp.splits, y, nullptr, nullptr);
  } else {
    if (wide) hc_finalize_kernel<false, 8><<<grid2, kThreads, 0, st>>>(p, X, nullptr, T, sp.splits, y, post, comb);
    else hc_finalize_kernel<false, 1><<<grid2, kThreads, 0, st>>>(p, X, nullptr, T, sp.splits, y, post, comb);
  }
}

void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
                    void* stream) {
  const dim3 grid(unsigned((dim / 4 + kThreads - 1) / kThreads), unsigned(T < 65535 ? T : 65535));
  hc_post_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(T, int(n), dim, f, post, comb, X);
}

}  // namespace dsinfer::ops::cuda::detail
