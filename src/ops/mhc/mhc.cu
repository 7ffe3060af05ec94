// CUDA mHC kernels (see mhc_cuda.h). hc_pre / hc_head run as two kernels:
//  1. hc_mix_mma_kernel (mhc_mix.cu): the mixing GEMM of all tokens on the fp64 tensor cores, split over the n*dim
//     reduction, double partials parked in the token's output row y[t] as [splits, mixes + 1].
//  2. hc_finalize_kernel (here): per token, the team (the whole block for few tokens, one warp for many) adds
//     the partials in a fixed order (each warp a contiguous range of splits, then the warps in order), one warp
//     forms mu = acc * rsqrt(mean x^2 + eps), the sigmoids and the Sinkhorn iterations (one comb element per
//     lane, rows/columns gathered with shuffles and summed in the reference's sequential k / j order, so the fp32
//     values equal a serial run; N = 4 is instantiated with every loop unrolled, other n take the generic N = 0),
//     then the team collapses the streams with float4 loads (several in flight per thread) into y (overwriting
//     the partials, read before) and applies the RMSNorm. When the row is one pass of the team (decode's wide
//     finalize at V4-Flash shapes), the streams and norm weights are loaded first, in flight during the partial sums
//     and the Sinkhorn, and the collapsed values stay in registers for the norm (session 15; same arithmetic).
// The finalize loads the site's scale / base at its start, before the partial sums (session 16). With
// HcNormParams::defer_comb it computes pre only and leaves the raw post / comb mixes for hc_comb_kernel (session 32).
// Every finalize form stores the normed row through norm_columns, which also writes its bf16 rounding where
// HcNormParams::y_bf16 asks for it (session 37: the prefill projections' x).
// hc_post: one thread per (token, 4 channels), float4 loads issued before the token's post/comb
// are staged in shared memory; optionally the bf16 rounding of V4.1's official numerics on the stored streams; f
// read, or (hc_post_routed) summed from the MoE's routed outputs as moe_cuda's combine would (session 37).
#include "core/small_float.h"
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/mhc/mhc_launch.h"
#include "ops/mhc/mhc_post.cuh"
#include "ops/routed_sum.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxMixes = (2 + kHcMaxN) * kHcMaxN;

// exact (V4.1 official numerics, p.round_bf16): the CPU reference's arithmetic. Its exp (glibc expf, correctly rounded
// but for rare cases) as the double exp rounded once to fp32 (CUDA's expf is up to 2 ulp off), and mu * scale + base
// rounded after each operation (nvcc fuses it into an fma otherwise). The mixes feed Sinkhorn and every collapse, so
// an ulp here moves official numerics' bf16 rounding points (docs/decisions.md 2026-12-03). Otherwise (fp32 profiles,
// not bit-exact by design) the default arithmetic, unchanged.
__device__ __forceinline__ float exp_mix(float z, bool exact) { return exact ? float(exp(double(z))) : expf(z); }
__device__ float sigmoidf(float z, bool exact) { return 1.0f / (1.0f + exp_mix(-z, exact)); }
__device__ __forceinline__ float affine_mix(float mu, float scale, float base, bool exact) {
  return exact ? __fadd_rn(__fmul_rn(mu, scale), base) : mu * scale + base;
}

// Compile-time bounds of the finalize: N > 0 is the hc_mult itself (every loop unrolled), N == 0 any n <= kHcMaxN.
template <int N>
struct HcDims {
  static constexpr int kN = N > 0 ? N : kHcMaxN;
  static constexpr int kSlots = (kN * kN + 31) / 32;                 // comb elements per lane
  static constexpr int kMixSlots = ((2 + kN) * kN + 1 + 31) / 32;  // mixes (+ sum of squares) per lane
  static constexpr int kUnroll = N > 0 ? 4 : 1;                     // float4 columns in flight per thread
};

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

// Sequential sum of part[s * R] for s in [s0, s1), four loads in flight.
__device__ __forceinline__ double sum_splits(const double* part, int R, int s0, int s1) {
  double acc = 0.0;
  int s = s0;
  for (; s + 4 <= s1; s += 4) {
    const double v0 = part[int64_t(s) * R], v1 = part[int64_t(s + 1) * R], v2 = part[int64_t(s + 2) * R],
                 v3 = part[int64_t(s + 3) * R];
    acc += v0;
    acc += v1;
    acc += v2;
    acc += v3;
  }
  for (; s < s1; ++s) acc += part[int64_t(s) * R];
  return acc;
}

// The token's mixes summed over the splits into acc (valid in the team's first warp, lane j + 32 i holds mix j).
// A team of 8 warps: warp w sums splits [w S / 8, (w + 1) S / 8), then warp 0 adds the 8 sums in warp order.
// Every partial is read before this returns (the collapse then overwrites the row). Call from the whole team.
template <int N, int kTeamWarps>
__device__ __forceinline__ void team_partials(const double* part, int splits, int R,
                                              double (&acc)[HcDims<N>::kMixSlots], double (*s_acc)[kMaxMixes + 1]) {
  const int lane = threadIdx.x & 31, w = int(threadIdx.x >> 5) % kTeamWarps;
  const int s0 = int(int64_t(splits) * w / kTeamWarps), s1 = int(int64_t(splits) * (w + 1) / kTeamWarps);
#pragma unroll
  for (int i = 0; i < HcDims<N>::kMixSlots; ++i) {
    const int j = lane + 32 * i;
    acc[i] = j < R ? sum_splits(part + j, R, s0, s1) : 0.0;
  }
  if constexpr (kTeamWarps == 1) {
    __syncwarp();
  } else {
#pragma unroll
    for (int i = 0; i < HcDims<N>::kMixSlots; ++i)
      if (lane + 32 * i < R) s_acc[w][lane + 32 * i] = acc[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < HcDims<N>::kMixSlots; ++i) {
      const int j = lane + 32 * i;
      double t = 0.0;
      if (j < R)
        for (int v = 0; v < kTeamWarps; ++v) t += s_acc[v][j];
      acc[i] = t;
    }
  }
}

// The site's scale and this lane's base values (pre / post for lanes < n, its comb slots), loaded at the kernel's
// start so that their latency overlaps the partial sums instead of following them (the stores of post could alias
// base, so the compiler could not hoist them). Call from the team's first warp.
template <bool kHead, int N>
struct HcConsts {
  float scale[3] = {0.f, 0.f, 0.f}, b_pre = 0.f, b_post = 0.f, b_comb[HcDims<N>::kSlots] = {};
};
template <bool kHead, int N>
__device__ __forceinline__ HcConsts<kHead, N> load_consts(const HcNormParams& p) {
  HcConsts<kHead, N> k;
  const int lane = threadIdx.x & 31, n = N > 0 ? N : int(p.n), nn = n * n;
  k.scale[0] = p.scale[0];
  if (lane < n) k.b_pre = p.base[lane];
  if (kHead) return k;
  k.scale[1] = p.scale[1];
  k.scale[2] = p.scale[2];
  if (lane < n) k.b_post = p.base[n + lane];
#pragma unroll
  for (int i = 0; i < HcDims<N>::kSlots; ++i) k.b_comb[i] = p.base[2 * n + (lane + 32 * i < nn ? lane + 32 * i : 0)];
  return k;
}

// One warp: post and the Sinkhorn-normalised comb from the token's mixes mu (lane j + 32 i holds mix j in mu[i];
// only mixes n.. are read), in the float op order of ops/mhc/mhc_ref.cpp. k: load_consts of this lane.
template <int N>
__device__ void hc_post_comb(const HcNormParams& p, const HcConsts<false, N>& k,
                             const float (&mu)[HcDims<N>::kMixSlots], float* post, float* comb) {
  using D = HcDims<N>;
  const int lane = threadIdx.x & 31, n = N > 0 ? N : int(p.n);
  const float mu_post = warp_pick(mu, n + lane);  // lanes < n: mu[n + lane]
  if (lane < n) post[lane] = 2.0f * sigmoidf(affine_mix(mu_post, k.scale[1], k.b_post, p.round_bf16), p.round_bf16);
  const int nn = n * n;
  int e[D::kSlots];  // this lane's comb elements (clamped to 0 beyond n*n: computed, never stored)
  float z[D::kSlots], c[D::kSlots], s[D::kSlots];
#pragma unroll
  for (int i = 0; i < D::kSlots; ++i) {
    e[i] = lane + 32 * i < nn ? lane + 32 * i : 0;
    z[i] = affine_mix(warp_pick(mu, 2 * n + e[i]), k.scale[2], k.b_comb[i], p.round_bf16);
  }
  // Row (k over a row j) or column (j over a column k) sums of c, in index order, for each slot.
  auto line_sums = [&](const float (&v)[D::kSlots], bool row) {
#pragma unroll
    for (int i = 0; i < D::kSlots; ++i) {
      const int j = e[i] / n, k = e[i] % n;
      float g[D::kN];
#pragma unroll
      for (int u = 0; u < D::kN; ++u) g[u] = u < n ? warp_pick(v, row ? j * n + u : u * n + k) : 0.0f;
      s[i] = 0.0f;
#pragma unroll
      for (int u = 0; u < D::kN; ++u)
        if (u < n) s[i] += g[u];
    }
  };
#pragma unroll
  for (int i = 0; i < D::kSlots; ++i) {  // row softmax over k
    const int j = e[i] / n;
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < D::kN; ++k)
      if (k < n) mx = fmaxf(mx, warp_pick(z, j * n + k));
    c[i] = exp_mix(z[i] - mx, p.round_bf16);
  }
  line_sums(c, true);
#pragma unroll
  for (int i = 0; i < D::kSlots; ++i) c[i] = c[i] / s[i] + p.hc_eps;
  for (int it = 0; it < p.sinkhorn_iters; ++it) {
    if (it > 0) {  // row normalisation: sums over k first, then the divisions
      line_sums(c, true);
#pragma unroll
      for (int i = 0; i < D::kSlots; ++i) c[i] /= (s[i] + p.hc_eps);
    }
    line_sums(c, false);  // column normalisation
#pragma unroll
    for (int i = 0; i < D::kSlots; ++i) c[i] /= (s[i] + p.hc_eps);
  }
#pragma unroll
  for (int i = 0; i < D::kSlots; ++i)
    if (lane + 32 * i < nn) comb[lane + 32 * i] = c[i];
}

// Where a deferred hc_pre parks raw mix m of a token (HcNormParams::defer_comb): the post mixes [n, 2n) in its post
// row, the comb mixes [2n, (2+n)n) in its comb row; nullptr for the pre mixes.
__device__ __forceinline__ float* raw_mix_slot(int m, int n, float* post, float* comb) {
  if (m >= n && m < 2 * n) return post + (m - n);
  return m >= 2 * n && m < (2 + n) * n ? comb + (m - 2 * n) : nullptr;
}

// One warp: from the token's summed mixes, pre (into smem), then post and comb (hc_post_comb), or with
// p.defer_comb the raw post / comb mixes stored into post / comb for hc_comb_kernel. kHead: pre only.
template <bool kHead, int N>
__device__ void hc_coefficients(const HcNormParams& p, const HcConsts<kHead, N>& k,
                                const double (&acc)[HcDims<N>::kMixSlots], float* pre, float* post, float* comb) {
  using D = HcDims<N>;
  const int lane = threadIdx.x & 31, n = N > 0 ? N : int(p.n), mixes = kHead ? n : (2 + n) * n;
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < D::kMixSlots; ++i) {
    const double v = __shfl_sync(dev::kFull, acc[i], mixes & 31);
    if (i == (mixes >> 5)) ss = v;
  }
  const double rho = 1.0 / sqrt(ss / double(int64_t(n) * p.dim) + double(p.rms_eps));
  float mu[D::kMixSlots];
#pragma unroll
  for (int i = 0; i < D::kMixSlots; ++i) mu[i] = float(acc[i] * rho);
  if (lane < n) pre[lane] = sigmoidf(affine_mix(mu[0], k.scale[0], k.b_pre, p.round_bf16), p.round_bf16) + p.hc_eps;
  if constexpr (!kHead) {
    if (!p.defer_comb) {
      hc_post_comb<N>(p, k, mu, post, comb);
      return;
    }
#pragma unroll
    for (int i = 0; i < D::kMixSlots; ++i)
      if (float* slot = raw_mix_slot(lane + 32 * i, n, post, comb)) *slot = mu[i];
  }
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

// Loads the float4 columns q0 + u * kTeamThreads (u < kUnroll) of the token's n streams into v (zeros past d4 / n).
template <int N, int kTeamThreads>
__device__ __forceinline__ void load_columns(const float4* __restrict__ x4, int n, int64_t d4, int64_t q0,
                                             float4 (&v)[HcDims<N>::kUnroll][HcDims<N>::kN]) {
  using D = HcDims<N>;
#pragma unroll
  for (int u = 0; u < D::kUnroll; ++u) {
    const int64_t q = q0 + int64_t(u) * kTeamThreads;
#pragma unroll
    for (int j = 0; j < D::kN; ++j) v[u][j] = q < d4 && j < n ? x4[j * d4 + q] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// y[q] = sum_j pr[j] * x[j, q] in double for the columns loaded in v (q = q0 + u * kTeamThreads), each result kept
// in o[u] too; adds the squares of the rounded outputs to ss in q order.
template <int N, int kTeamThreads>
__device__ __forceinline__ void combine_columns(const float4 (&v)[HcDims<N>::kUnroll][HcDims<N>::kN], int n, int64_t d4,
                                                int64_t q0, const float (&pr)[HcDims<N>::kN], float4* y4, bool round,
                                                double& ss, float4 (&o)[HcDims<N>::kUnroll]) {
  using D = HcDims<N>;
#pragma unroll
  for (int u = 0; u < D::kUnroll; ++u) {
    const int64_t q = q0 + int64_t(u) * kTeamThreads;
    if (q >= d4) break;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
#pragma unroll
    for (int j = 0; j < D::kN; ++j) {
      if (j >= n) break;
      const double w = pr[j];
      a0 += w * double(v[u][j].x);
      a1 += w * double(v[u][j].y);
      a2 += w * double(v[u][j].z);
      a3 += w * double(v[u][j].w);
    }
    float4 r = make_float4(float(a0), float(a1), float(a2), float(a3));
    if (round) r = make_float4(dev::round_bf16(r.x), dev::round_bf16(r.y), dev::round_bf16(r.z), dev::round_bf16(r.w));
    ss += double(r.x) * double(r.x);
    ss += double(r.y) * double(r.y);
    ss += double(r.z) * double(r.z);
    ss += double(r.w) * double(r.w);
    y4[q] = r;
    o[u] = r;
  }
}

// The RMSNorm of the collapsed values o (columns q0 + u * kTeamThreads) with their weights w, stored into y4 where
// it is not null, and where y16 is not null (HcNormParams::y_bf16) also rounded to bf16 into it, four values a column.
template <int N, int kTeamThreads>
__device__ __forceinline__ void norm_columns(const float4 (&o)[HcDims<N>::kUnroll], const float4 (&w)[HcDims<N>::kUnroll],
                                             int64_t d4, int64_t q0, float inv, bool round, float4* y4, uint2* y16) {
  using D = HcDims<N>;
#pragma unroll
  for (int u = 0; u < D::kUnroll; ++u) {
    const int64_t q = q0 + int64_t(u) * kTeamThreads;
    if (q >= d4) break;
    float4 r = make_float4(__fmul_rn(__fmul_rn(o[u].x, inv), w[u].x), __fmul_rn(__fmul_rn(o[u].y, inv), w[u].y),
                           __fmul_rn(__fmul_rn(o[u].z, inv), w[u].z), __fmul_rn(__fmul_rn(o[u].w, inv), w[u].w));
    if (round) r = make_float4(dev::round_bf16(r.x), dev::round_bf16(r.y), dev::round_bf16(r.z), dev::round_bf16(r.w));
    if (y4) y4[q] = r;
    if (y16) {
      using small_float::f32_to_bf16_bits;
      y16[q] = make_uint2(uint32_t(f32_to_bf16_bits(r.x)) | (uint32_t(f32_to_bf16_bits(r.y)) << 16),
                          uint32_t(f32_to_bf16_bits(r.z)) | (uint32_t(f32_to_bf16_bits(r.w)) << 16));
    }
  }
}

// Where the normed row's fp32 values go: the row y4, or nowhere with HcNormParams::y_bf16_only (the store of
// norm_columns is every finalize form's last write to y).
__device__ __forceinline__ float4* y32_out(const HcNormParams& p, float4* y4) { return p.y_bf16_only ? nullptr : y4; }

// Token t's row of HcNormParams::y_bf16 (null where there is none), as 4-value columns.
__device__ __forceinline__ uint2* y16_row(const HcNormParams& p, int64_t t) {
  return p.y_bf16 ? reinterpret_cast<uint2*>(p.y_bf16 + t * p.dim) : nullptr;
}

template <int N, int kTeamThreads>
__device__ __forceinline__ void load_weights(const float* __restrict__ norm_w, int64_t d4, int64_t q0,
                                             float4 (&w)[HcDims<N>::kUnroll]) {
  using D = HcDims<N>;
#pragma unroll
  for (int u = 0; u < D::kUnroll; ++u) {
    const int64_t q = q0 + int64_t(u) * kTeamThreads;
    if (q < d4) {
      const float* wp = norm_w + 4 * q;
      w[u] = make_float4(wp[0], wp[1], wp[2], wp[3]);
    }
  }
}

// Token t of a team of kTeamWarps warps (1: 8 tokens per block; 8: one token per block). Where the token's row is one
// pass of the team (d4 <= kUnroll * team threads: V4-Flash's 4 x 4096 streams in the wide finalize, decode), its
// streams and norm weights are loaded before the partial sums and the Sinkhorn, so their latency overlaps them, and
// the collapsed values stay in registers for the norm; the arithmetic and its order are those of the loop form.
// At most 128 registers (two blocks per SM): the unbounded allocation took 148-154 with the preloaded constants, one
// block per SM, half the warps in flight at prefill.
template <bool kHead, int kTeamWarps, int N>
__global__ void __launch_bounds__(kThreads, 2) hc_finalize_kernel(HcNormParams p, const float* __restrict__ X,
                                                               const int32_t* __restrict__ rows, int64_t T, int splits,
                                                               float* y, float* post, float* comb) {
  using D = HcDims<N>;
  constexpr int kTeams = kWarps / kTeamWarps, kTeamThreads = 32 * kTeamWarps, kPass = D::kUnroll * kTeamThreads;
  __shared__ float s_pre[kTeams][kHcMaxN];
  __shared__ double s_red[kWarps];
  __shared__ double s_acc[kTeamWarps > 1 ? kTeamWarps : 1][kMaxMixes + 1];
  const int team = int(threadIdx.x >> 5) / kTeamWarps, tt = int(threadIdx.x) % kTeamThreads;
  const int n = N > 0 ? N : int(p.n), R = (kHead ? n : (2 + n) * n) + 1;
  const int64_t t = int64_t(blockIdx.x) * kTeams + team;
  const int64_t d4 = p.dim / 4;
  const bool one_pass = d4 <= kPass;
  // The site's weights (norm_w, scale, base: written by no kernel) before the PDL wait (cuda/pdl.h), so their loads
  // overlap the previous kernel's tail; the rows, X and the partials in y after it. Every thread waits before a
  // team leaves (t >= T), so the grid completes only after the one it follows.
  float4 xv[D::kUnroll][D::kN], wv[D::kUnroll], ov[D::kUnroll];
  if (one_pass && t < T) load_weights<N, kTeamThreads>(p.norm_w, d4, tt, wv);
  HcConsts<kHead, N> consts;
  if (tt < 32 && t < T) consts = load_consts<kHead, N>(p);
  dsinfer::cuda::pdl_wait_then_release();
  if (t >= T) return;  // kTeamWarps > 1: one team per block, so the whole block leaves
  float* yr = y + t * p.dim;
  const float4* x4 = reinterpret_cast<const float4*>(X + (rows ? int64_t(rows[t]) : t) * n * p.dim);
  float4* y4 = reinterpret_cast<float4*>(yr);
  if (one_pass) load_columns<N, kTeamThreads>(x4, n, d4, tt, xv);  // X only: y still holds the partials read below
  double acc[D::kMixSlots];
  team_partials<N, kTeamWarps>(reinterpret_cast<const double*>(yr), splits, R, acc, s_acc);
  if (tt < 32)
    hc_coefficients<kHead, N>(p, consts, acc, s_pre[team], kHead ? nullptr : post + t * n,
                              kHead ? nullptr : comb + t * n * n);
  team_sync<kTeamWarps>();
  if (!kHead && p.pre_out && tt < n) p.pre_out[t * n + tt] = s_pre[team][tt];
  float pr[D::kN];
#pragma unroll
  for (int j = 0; j < D::kN; ++j) pr[j] = j < n ? (!kHead && p.pre_in ? p.pre_in[t * n + j] : s_pre[team][j]) : 0.0f;
  double ss = 0.0;
  if (one_pass) {
    combine_columns<N, kTeamThreads>(xv, n, d4, tt, pr, y4, p.round_bf16, ss, ov);
  } else {
    for (int64_t q0 = tt; q0 < d4; q0 += kPass) {
      load_columns<N, kTeamThreads>(x4, n, d4, q0, xv);
      combine_columns<N, kTeamThreads>(xv, n, d4, q0, pr, y4, p.round_bf16, ss, ov);
    }
  }
  ss = team_sum<kTeamWarps>(ss, s_red);
  const float inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.rms_eps)));
  uint2* y16 = y16_row(p, t);
  if (one_pass) {
    norm_columns<N, kTeamThreads>(ov, wv, d4, tt, inv, p.round_bf16, y32_out(p, y4), y16);
    return;
  }
  // Each thread rescales the values it wrote; kUnroll columns (and their weights) loaded before any store.
  for (int64_t q0 = tt; q0 < d4; q0 += kPass) {
#pragma unroll
    for (int u = 0; u < D::kUnroll; ++u) {
      const int64_t q = q0 + int64_t(u) * kTeamThreads;
      if (q < d4) ov[u] = y4[q];
    }
    load_weights<N, kTeamThreads>(p.norm_w, d4, q0, wv);
    norm_columns<N, kTeamThreads>(ov, wv, d4, q0, inv, p.round_bf16, y32_out(p, y4), y16);
  }
}

// The narrow finalize in two kernels (HcSplit::split_fin, session 19). The fused narrow kernel writes each collapsed
// row to y and reads it back for the norm: at 4,096 tokens the row is evicted from L2 in between (the 268 MB of
// streams pass through it meanwhile), so y crossed HBM three times (469 MB per call against the 335 MB of X read
// + y written), and its warps streamed nothing while they ran the Sinkhorn. Here the coefficients come first, one
// warp per token (1 wave at 4 blocks per SM), then a streaming kernel collapses and normalises with the row staged
// in shared memory. The functions and their order are those of the fused kernel's one-warp team, so the bits are
// the same (GpuMhc.SplitFinalizeEqualsFused).
// 1. Per token (one warp): the partials summed in split order, the coefficients; pre into pre_out (V4.1) and into
//    the first n floats of y[t] (over the partials, all read before: the warp's barrier orders the stores).
template <bool kHead, int N>
__global__ void __launch_bounds__(kThreads, 4) hc_coef_kernel(HcNormParams p, int64_t T, int splits, float* y,
                                                              float* post, float* comb) {
  using D = HcDims<N>;
  __shared__ float s_pre[kWarps][kHcMaxN];
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int n = N > 0 ? N : int(p.n), R = (kHead ? n : (2 + n) * n) + 1;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  HcConsts<kHead, N> consts;
  if (t < T) consts = load_consts<kHead, N>(p);  // weights: before the PDL wait, as in the fused kernel
  dsinfer::cuda::pdl_wait_then_release();
  if (t >= T) return;
  float* yr = y + t * p.dim;
  double acc[D::kMixSlots];
  team_partials<N, 1>(reinterpret_cast<const double*>(yr), splits, R, acc, nullptr);
  hc_coefficients<kHead, N>(p, consts, acc, s_pre[warp], kHead ? nullptr : post + t * n,
                            kHead ? nullptr : comb + t * n * n);
  __syncwarp();
  if (lane < n) {
    const float v = s_pre[warp][lane];
    if (!kHead && p.pre_out) p.pre_out[t * n + lane] = v;
    yr[lane] = v;
  }
}

// Finishes a deferred hc_pre (HcNormParams::defer_comb), one warp per token: the raw post / comb mixes the
// finalize left in post / comb (mix m at lane m % 32, slot m / 32, as hc_coefficients holds them) through
// hc_post_comb, in place. Every lane's loads complete before the first store (its shuffles consume them).
template <int N>
__global__ void __launch_bounds__(kThreads) hc_comb_kernel(HcNormParams p, int64_t T, float* post, float* comb) {
  using D = HcDims<N>;
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int n = N > 0 ? N : int(p.n), nn = n * n;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= T) return;
  const HcConsts<false, N> consts = load_consts<false, N>(p);
  float* pt = post + t * n;
  float* ct = comb + t * nn;
  float mu[D::kMixSlots];
#pragma unroll
  for (int i = 0; i < D::kMixSlots; ++i) {
    const float* slot = raw_mix_slot(lane + 32 * i, n, pt, ct);
    mu[i] = slot ? *slot : 0.0f;
  }
  __syncwarp();
  hc_post_comb<N>(p, consts, mu, pt, ct);
}

// 2. Per token (one warp of kColWarps per block): pre from y[t] (or V4.1's pre_in), the collapse in passes of
//    kUnroll float4 columns per lane (the first pass's loads issued before pre is read) into the warp's shared row,
//    the sum of squares in the fused kernel's order (lane: passes then u then components; then warp_sum), the norm
//    from the shared row into y. Shared memory: kColWarps * dim floats (64 KB at dim 4,096: 3 blocks per SM).
constexpr int kColWarps = 4, kColThreads = 32 * kColWarps;
template <bool kHead, int N>
__global__ void __launch_bounds__(kColThreads, 3) hc_collapse_kernel(HcNormParams p, const float* __restrict__ X,
                                                                     const int32_t* __restrict__ rows, int64_t T,
                                                                     float* y) {
  using D = HcDims<N>;
  constexpr int kPass = D::kUnroll * 32;
  extern __shared__ __align__(16) float s_rows[];
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int n = N > 0 ? N : int(p.n);
  const int64_t t = int64_t(blockIdx.x) * kColWarps + warp, d4 = p.dim / 4;
  dsinfer::cuda::pdl_wait_then_release();
  if (t >= T) return;
  float* yr = y + t * p.dim;
  float4* y4 = reinterpret_cast<float4*>(yr);
  float4* s4 = reinterpret_cast<float4*>(s_rows + int64_t(warp) * p.dim);
  const float4* x4 = reinterpret_cast<const float4*>(X + (rows ? int64_t(rows[t]) : t) * n * p.dim);
  float4 xv[D::kUnroll][D::kN], ov[D::kUnroll], wv[D::kUnroll];
  load_columns<N, 32>(x4, n, d4, lane, xv);
  float pr[D::kN];
#pragma unroll
  for (int j = 0; j < D::kN; ++j) pr[j] = j < n ? (!kHead && p.pre_in ? p.pre_in[t * n + j] : yr[j]) : 0.0f;
  __syncwarp();  // pre read by every lane before any lane's store to y
  double ss = 0.0;
  for (int64_t q0 = lane; q0 < d4; q0 += kPass) {
    if (q0 != lane) load_columns<N, 32>(x4, n, d4, q0, xv);
    combine_columns<N, 32>(xv, n, d4, q0, pr, s4, p.round_bf16, ss, ov);
  }
  ss = team_sum<1>(ss, nullptr);
  const float inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.rms_eps)));
  uint2* y16 = y16_row(p, t);
  for (int64_t q0 = lane; q0 < d4; q0 += kPass) {  // each lane reads back only the columns it wrote
#pragma unroll
    for (int u = 0; u < D::kUnroll; ++u) {
      const int64_t q = q0 + int64_t(u) * 32;
      if (q < d4) ov[u] = s4[q];
    }
    load_weights<N, 32>(p.norm_w, d4, q0, wv);
    norm_columns<N, 32>(ov, wv, d4, q0, inv, p.round_bf16, y32_out(p, y4), y16);
  }
}

// N > 0: hc_mult fixed at compile time (n = 4: 96 registers, bounded for five blocks per SM; lower bounds
// spill). Blocks of kPostThreads = 128: 20 warps per SM against 16 in two blocks of 256 before session 16.
// The arithmetic is the same. kRouted (hc_post_routed): f's columns are the MoE's routed sum (ops/routed_sum.cuh),
// computed where the plain kernel loads them, instead of read from f.
constexpr int kPostThreads = 128;
template <int N, bool kRouted>
__global__ void __launch_bounds__(kPostThreads, N == 4 ? 5 : 2)
    hc_post_kernel(int64_t T, int n_arg, int64_t dim, const float* __restrict__ f, RoutedSum fr,
                   const float* __restrict__ post, const float* __restrict__ comb, float* X, bool round) {
  dsinfer::cuda::pdl_wait_then_release();
  constexpr int kN = N > 0 ? N : kHcMaxN;
  const int n = N > 0 ? N : n_arg;
  __shared__ float s_post[kHcMaxN], s_comb[kHcMaxN * kHcMaxN];
  const int64_t d4 = dim / 4, q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    // The token's streams and f first: they do not depend on the coefficients, so their loads are in flight during
    // the coefficients' loads and the two barriers (session 16; the arithmetic is unchanged).
    float4* x4 = reinterpret_cast<float4*>(X + t * n * dim);
    float4 old[kN], fv = make_float4(0.f, 0.f, 0.f, 0.f);
    if (q < d4) {
#pragma unroll
      for (int j = 0; j < kN; ++j)
        if (j < n) old[j] = x4[j * d4 + q];
      fv = kRouted ? routed_sum4(fr, t, d4, q) : reinterpret_cast<const float4*>(f + t * dim)[q];
    }
    __syncthreads();  // the previous token's coefficients are no longer read
    if (int(threadIdx.x) < n) s_post[threadIdx.x] = post[t * n + threadIdx.x];
    if (int(threadIdx.x) < n * n) s_comb[threadIdx.x] = comb[t * n * n + threadIdx.x];
    __syncthreads();
    if (q >= d4) continue;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if (k >= n) break;
      float4 o = hc_post_stream4<kN>(k, n, old, fv, s_post, s_comb);
      if (round) o = make_float4(dev::round_bf16(o.x), dev::round_bf16(o.y), dev::round_bf16(o.z), dev::round_bf16(o.w));
      x4[k * d4 + q] = o;
    }
  }
}
// One block per listed row: the collapse with the given pre (double, as hc_collapse_ref), then the RMSNorm.
__global__ void __launch_bounds__(kThreads) hc_collapse_norm_kernel(const float* __restrict__ X, const float* pre,
                                                                    const int32_t* rows, int64_t n, int64_t dim,
                                                                    const float* norm_w, float eps, bool round,
                                                                    float* y) {
  const int64_t r = blockIdx.x, t = rows[r];
  const float* x = X + t * n * dim;
  float* yr = y + r * dim;
  double ss = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += double(pre[t * n + j]) * double(x[j * dim + d]);
    const float v = round ? dev::round_bf16(float(acc)) : float(acc);
    yr[d] = v;
    ss += double(v) * double(v);
  }
  ss = dev::block_sum(ss);
  const float inv = float(1.0 / sqrt(ss / double(dim) + double(eps)));
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    const float v = __fmul_rn(__fmul_rn(yr[d], inv), norm_w[d]);
    yr[d] = round ? dev::round_bf16(v) : v;
  }
}
template <bool kHead, int N>
void launch_finalize(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp,
                     float* y, float* post, float* comb, cudaStream_t st) {
  using dsinfer::cuda::pdl_launch;
  if (!sp.wide && sp.split_fin) {
    pdl_launch(hc_coef_kernel<kHead, N>, dim3(unsigned((T + kWarps - 1) / kWarps)), dim3(kThreads), 0, st, p, T,
               int(sp.splits), y, post, comb);
    const size_t smem = size_t(kColWarps) * size_t(p.dim) * sizeof(float);
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(hc_collapse_kernel<kHead, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    pdl_launch(hc_collapse_kernel<kHead, N>, dim3(unsigned((T + kColWarps - 1) / kColWarps)), dim3(kColThreads), smem,
               st, p, X, rows, T, y);
    return;
  }
  if (sp.wide)
    pdl_launch(hc_finalize_kernel<kHead, kWarps, N>, dim3(unsigned(T)), dim3(kThreads), 0, st, p, X, rows, T,
               int(sp.splits), y, post, comb);
  else
    pdl_launch(hc_finalize_kernel<kHead, 1, N>, dim3(unsigned((T + kWarps - 1) / kWarps)), dim3(kThreads), 0, st, p,
               X, rows, T, int(sp.splits), y, post, comb);
}
}  // namespace

void launch_hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                             const float* norm_w, float eps, bool round_bf16, float* y, void* stream) {
  hc_collapse_norm_kernel<<<unsigned(R), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(X, pre, rows, n, dim, norm_w,
                                                                                           eps, round_bf16, y);
}

void launch_hc_finalize(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp,
                        float* y, float* post, float* comb, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  // Whole block per token (wide) or one warp per token, 8 per block: chosen by mhc_cuda.cpp (HcSplit::wide).
  if (rows) {
    if (p.n == 4) launch_finalize<true, 4>(p, X, rows, T, sp, y, nullptr, nullptr, st);
    else launch_finalize<true, 0>(p, X, rows, T, sp, y, nullptr, nullptr, st);
  } else {
    if (p.n == 4) launch_finalize<false, 4>(p, X, nullptr, T, sp, y, post, comb, st);
    else launch_finalize<false, 0>(p, X, nullptr, T, sp, y, post, comb, st);
  }
}

void launch_hc_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp, float* y,
                    float* post, float* comb, void* stream) {
  launch_hc_mix(p, X, rows, T, sp, y, stream);
  launch_hc_finalize(p, X, rows, T, sp, y, post, comb, stream);
}

void launch_hc_comb(const HcNormParams& p, int64_t T, float* post, float* comb, void* stream) {
  const unsigned blocks = unsigned((T + kWarps - 1) / kWarps);
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.n == 4) hc_comb_kernel<4><<<blocks, kThreads, 0, st>>>(p, T, post, comb);
  else hc_comb_kernel<0><<<blocks, kThreads, 0, st>>>(p, T, post, comb);
}

void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const RoutedSum* routed, const float* post,
                    const float* comb, float* X, bool round_bf16, void* stream) {
  const dim3 grid(unsigned((dim / 4 + kPostThreads - 1) / kPostThreads), unsigned(T < 65535 ? T : 65535));
  const auto st = static_cast<cudaStream_t>(stream);
  const RoutedSum fr = routed ? *routed : RoutedSum{};
  auto launch = [&](auto kernel) {
    dsinfer::cuda::pdl_launch(kernel, grid, dim3(kPostThreads), 0, st, T, int(n), dim, f, fr, post, comb, X,
                              round_bf16);
  };
  if (n == 4) routed ? launch(hc_post_kernel<4, true>) : launch(hc_post_kernel<4, false>);
  else routed ? launch(hc_post_kernel<0, true>) : launch(hc_post_kernel<0, false>);
}

}  // namespace dsinfer::ops::cuda::detail
