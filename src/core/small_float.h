// Small-float codecs of DeepSeek-V4 checkpoints and numerics simulations, defined once for host and device:
// bit-exact decoders to fp32 bits (bf16, e4m3fn, e8m0, e2m1) and round-to-nearest-even rounding into the formats
// without inf (e4m3fn, e2m1; saturating). DSI_HD inline functions without CUDA types: the host conversions
// (core/dtypes.cpp), the GEMM / MoE kernels (ops/gemm) and the numerics simulations (cuda/ops_device.cuh) all use
// these, so host and device cannot drift apart. C++17 (nvcc compiles .cu files as C++17).
#pragma once
#include <math.h>

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace dsinfer::small_float {

DSI_HD float from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}
DSI_HD uint32_t to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

// bf16 (the high half of an fp32) -> fp32 bits.
DSI_HD uint32_t bf16_f32_bits(uint32_t h) { return (h & 0xFFFFu) << 16; }
// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
DSI_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// e2m1 code (0..15): 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0).
DSI_HD uint32_t e2m1_f32_bits(uint32_t code) {
  const uint32_t s = (code >> 3) & 1u, e = (code >> 1) & 3u, m = code & 1u;
  const uint32_t mag = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3F000000u : 0u);  // 0x3F000000 = 0.5f
  return mag | (s << 31);
}
// e8m0: 2^(b-127); 0xFF is NaN.
DSI_HD uint32_t e8m0_f32_bits(uint32_t b) {
  b &= 0xFFu;
  if (b == 0xFFu) return 0x7FC00000u;  // NaN
  if (b == 0u) return 0x00400000u;     // 2^-127 is an fp32 subnormal
  return b << 23;
}
// e4m3fn: bias 7, subnormal m * 2^-9, 0x7F / 0xFF NaN, no inf.
DSI_HD uint32_t e4m3_f32_bits(uint32_t b) {
  const uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15u && m == 7u) return 0x7FC00000u;
  if (e == 0u) {
    if (m == 0u) return s << 31;
    // m * 2^-9 with m in 1..7: normalise the 3-bit mantissa.
    const uint32_t shift = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);  // position of the leading one
    const uint32_t frac = (m << (23u - shift)) & 0x7FFFFFu;
    return (s << 31) | ((118u + shift) << 23) | frac;  // 2^-9 has biased exponent 118
  }
  return (s << 31) | ((e + 120u) << 23) | (m << 20);
}

// Round-to-nearest-even of f into a small float format without inf (mantissa bits M, exponent bias B, largest
// finite magnitude maxv), saturating; the result keeps f's sign. The quotient and product are single IEEE
// operations on both sides (device intrinsics stop nvcc from contracting them), so host and device agree bit for
// bit. NaN propagates (the host encoders in core/dtypes.cpp handle NaN before calling this).
// On the device the same values from the bits (session 38: frexpf, ldexpf and the division were most of the
// simulations' instructions): a's exponent read off its bits (a subnormal or zero a reads -127, below every format's
// smallest normal, like frexpf's exponent), the power-of-two quantum and its reciprocal built from theirs (both
// normal for every a <= maxv of these formats), and a / quantum as a * (1 / quantum): the same real number rounded
// once, so the same float. GpuSmallFloat.RoundingEqualsFrexpForm holds it to the host form for all 2^32 inputs.
DSI_HD float round_small_float(float f, int M, int B, float maxv) {
  float a = fabsf(f);
  if (a >= maxv) a = maxv;
  const int min_exp = 1 - B;  // exponent of the smallest normal
#if defined(__CUDA_ARCH__)
  int unbiased = int((__float_as_uint(a) >> 23) & 0xffu) - 127;
  if (unbiased < min_exp) unbiased = min_exp;
  const int q = unbiased - M;  // the quantum's exponent
  const float quantum = __uint_as_float(uint32_t(q + 127) << 23), inv = __uint_as_float(uint32_t(127 - q) << 23);
  float r = __fmul_rn(rintf(__fmul_rn(a, inv)), quantum);
#else
  int e = 0;
  frexpf(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int unbiased = e - 1;
  if (a == 0.0f || unbiased < min_exp) unbiased = min_exp;
  const float quantum = ldexpf(1.0f, unbiased - M);
  float r = rintf(a / quantum) * quantum;
#endif
  if (r > maxv) r = maxv;
  return copysignf(r, f);
}
DSI_HD float round_e4m3(float f) { return round_small_float(f, 3, 7, 448.0f); }
DSI_HD float round_e2m1(float f) { return round_small_float(f, 1, 1, 6.0f); }

}  // namespace dsinfer::small_float
