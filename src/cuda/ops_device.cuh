// Device helpers shared by the op kernels (*.cu only): warp/block reductions, RoPE rotation, the exact
// e4m3/e2m1 rounding of core/small_float.h, and block-cooperative vector routines on shared memory (RMSNorm,
// RoPE, block quantization simulation, Hadamard). Elementwise float math that feeds a quantization simulation
// uses __f*_rn intrinsics so nvcc cannot contract it into FMAs: the CPU reference computes those products and
// sums separately, and a one-ulp difference could flip an FP8/FP4 rounding.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/small_float.h"

namespace dsinfer::cuda::dev {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
// A head norm's statistics (ops/rope/rope.cu; sparse_attention_prefill_split.cu's fused query norm has to give the
// same bits): the sum of squares of 4 channels in double, products and sums unfused and in this order, and the
// inverse RMS of a dim-channel vector from the double sum of its squares.
__device__ __forceinline__ double sum_sq4(float a, float b, float c, float d) {
  const double s = __dadd_rn(__dmul_rn(double(a), double(a)), __dmul_rn(double(b), double(b)));
  return __dadd_rn(__dadd_rn(s, __dmul_rn(double(c), double(c))), __dmul_rn(double(d), double(d)));
}
__device__ __forceinline__ float rms_inv(double sum_sq, int64_t dim, float eps) {
  return float(1.0 / sqrt(sum_sq / double(dim) + double(eps)));
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// Contains __syncthreads(): call from all threads.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int i = 0; i < nw; ++i) t += part[i];  // same order in every thread
  return t;
}

// cos/sin of the RoPE angle exactly as ops/rope/rope_ref.cpp: fp32 angle, cos/sin in double rounded to fp32,
// times attention_factor; the inverse rotation negates sin.
__device__ __forceinline__ void rope_cos_sin(float inv_freq, int64_t pos, float attention_factor, bool inverse,
                                             float& c, float& s) {
  const float angle = __fmul_rn(inv_freq, float(pos));
  double sd, cd;
  sincos(double(angle), &sd, &cd);
  c = __fmul_rn(float(cd), attention_factor);
  s = __fmul_rn(float(sd), attention_factor);
  if (inverse) s = -s;
}
__device__ __forceinline__ void rope_rotate(float& re, float& im, float c, float s) {
  const float r = __fsub_rn(__fmul_rn(re, c), __fmul_rn(im, s));
  const float i = __fadd_rn(__fmul_rn(re, s), __fmul_rn(im, c));
  re = r;
  im = i;
}

// The exact e4m3 / e2m1 rounding of the host reference (core/small_float.h, shared with core/dtypes.cpp).
using ::dsinfer::small_float::round_e2m1;
using ::dsinfer::small_float::round_e4m3;

// 2^ceil(log2(amax / qmax)) computed exactly (the reference takes log2 in double of the double ratio): the smallest
// 2^E with amax <= qmax * 2^E. For normal amax = (1 + ma) 2^ea and qmax = (1 + mq) 2^eq that is E = ea - eq, plus
// one where ma > mq, read off the bits (session 38: the double division and frexp were a simulation's costliest
// steps); the double ratio never rounds onto or across a power of two (it would have to lie within 2^-53 of one),
// so the two agree, and GpuSmallFloat.Pow2ScaleEqualsDoubleForm checks every normal amax. Anything else (a zero,
// subnormal or non-finite input, a scale outside the normal range) takes the double form.
__device__ __forceinline__ float pow2_scale(float amax, float qmax) {
  const uint32_t a = __float_as_uint(amax), q = __float_as_uint(qmax);
  const int ea = int(a >> 23) - 127, eq = int(q >> 23) - 127;  // sign bits clear: both are maxima of |x|
  const int E = ea - eq + ((a & 0x7fffffu) > (q & 0x7fffffu) ? 1 : 0);
  if (ea > -127 && ea < 128 && eq > -127 && eq < 128 && E > -127 && E < 128)
    return __uint_as_float(uint32_t(E + 127) << 23);
  const double r = double(amax) / double(qmax);
  int e = 0;
  const double f = frexp(r, &e);  // r = f * 2^e, f in [0.5, 1)
  return ldexpf(1.0f, f == 0.5 ? e - 1 : e);
}

// x / s for a positive power of two s: x times s's exact reciprocal where that is a normal float (s in [2^-126,
// 2^126]: the same real number rounded once, so the same value as the division), else the division.
__device__ __forceinline__ float div_pow2(float x, float s) {
  const uint32_t b = __float_as_uint(s), e = b >> 23;
  if ((b & 0x7fffffu) == 0 && e >= 1 && e <= 253) return __fmul_rn(x, __uint_as_float((254u - e) << 23));
  return __fdiv_rn(x, s);
}

// Round to the nearest bf16 (ties to even; NaN stays NaN), back in fp32: core/dtypes.h round_bf16.
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// 2^ceil(log2(t)) read off the fp32 bits (ops::pow2_ceil_scale).
__device__ __forceinline__ float pow2_ceil(float t) {
  const uint32_t bits = __float_as_uint(t);
  const int k = int((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return ldexpf(1.0f, k);
}

// The UE8M0 scale of the official FP8 activation quantization (act_quant, ops::fp8_qat_ref) of a block whose largest
// magnitude is amax: 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))).
__device__ __forceinline__ float fp8_act_scale(float amax) { return pow2_ceil(__fmul_rn(fmaxf(amax, 1e-4f), 1.0f / 448.0f)); }

// ---- block-cooperative routines on a vector v[n] in shared memory (all threads call; blockDim % 32 == 0) ----

// In-place block quantization simulation of v[0, n): blocks of `block` channels, scale pow2_scale(amax, qmax),
// amax >= amax_floor; fp8 = true: e4m3, else e2m1 (ops/quant_sim/quant_sim_ref.cpp).
__device__ __forceinline__ void smem_block_quant_sim(float* v, int n, int block, bool fp8) {
  const float qmax = fp8 ? 448.0f : 6.0f;
  const float amax_floor = fp8 ? 1e-4f : 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int b0 = warp * block; b0 < n; b0 += nw * block) {
    const int b1 = min(n, b0 + block);
    float amax = 0.0f;
    for (int i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax_floor, warp_max(amax));
    const float s = pow2_scale(amax, qmax);
    for (int i = b0 + lane; i < b1; i += 32) {
      const float x = fminf(fmaxf(div_pow2(v[i], s), -qmax), qmax);
      v[i] = __fmul_rn(fp8 ? round_e4m3(x) : round_e2m1(x), s);
    }
  }
  __syncthreads();
}

// In-place normalized Walsh-Hadamard transform of v[0, n) (n a power of two), butterflies in double exactly
// like hadamard_ref; scratch: n doubles of shared memory.
__device__ __forceinline__ void smem_hadamard(float* v, int n, double* scratch) {
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) scratch[i] = double(v[i]);
  __syncthreads();
  for (int h = 1; h < n; h *= 2) {
    for (int k = threadIdx.x; k < n / 2; k += blockDim.x) {
      const int j = (k / h) * 2 * h + (k % h);
      const double a = scratch[j], b = scratch[j + h];
      scratch[j] = a + b;
      scratch[j + h] = a - b;
    }
    __syncthreads();
  }
  const double sc = 1.0 / sqrt(double(n));
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = float(scratch[i] * sc);
  __syncthreads();
}

// In-place RMSNorm of v[0, n) with optional weight w (global memory), sum of squares in double.
__device__ __forceinline__ void smem_rmsnorm(float* v, int n, const float* w, float eps) {
  __syncthreads();
  double ss = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += double(v[i]) * double(v[i]);
  ss = block_sum(ss);
  const float inv = float(1.0 / sqrt(ss / double(n) + double(eps)));
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = __fmul_rn(__fmul_rn(v[i], inv), w ? w[i] : 1.0f);
  __syncthreads();
}

// smem_rmsnorm with one channel a thread (n <= blockDim.x) and the thread's weight given (w_own, read where the
// caller chose, e.g. before a PDL wait): the same sums and products, so the same bits.
__device__ __forceinline__ void smem_rmsnorm_own(float* v, int n, float w_own, float eps) {
  __syncthreads();
  const int i = threadIdx.x;
  const double ss = block_sum(i < n ? double(v[i]) * double(v[i]) : 0.0);
  const float inv = float(1.0 / sqrt(ss / double(n) + double(eps)));
  if (i < n) v[i] = __fmul_rn(__fmul_rn(v[i], inv), w_own);
  __syncthreads();
}

// In-place RoPE of the trailing rope_dim channels of v[0, n) at `pos`.
__device__ __forceinline__ void smem_rope(float* v, int n, int rope_dim, const float* inv_freq, int64_t pos,
                                          bool inverse, float attention_factor) {
  __syncthreads();
  float* r = v + (n - rope_dim);
  for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
    float c, s;
    rope_cos_sin(inv_freq[i], pos, attention_factor, inverse, c, s);
    rope_rotate(r[2 * i], r[2 * i + 1], c, s);
  }
  __syncthreads();
}

// smem_rope with one pair a thread (rope_dim / 2 <= blockDim.x) and the thread's cos / sin given (rope_cos_sin,
// computed where the caller chose): the same rotation, so the same bits.
__device__ __forceinline__ void smem_rope_own(float* v, int n, int rope_dim, float c, float s) {
  __syncthreads();
  float* r = v + (n - rope_dim);
  const int i = threadIdx.x;
  if (i < rope_dim / 2) rope_rotate(r[2 * i], r[2 * i + 1], c, s);
  __syncthreads();
}

}  // namespace dsinfer::cuda::dev
