// Activation quantization of the cuBLASLt GEMM engine (gemm_lt_cuda.h), defined once for host and device: the
// official DeepSeek `act_quant` (research/dsv4-architecture.md §3.3) per token and per 128-channel block,
// amax floored at 1e-4, power-of-two ("ue8m0") scale s = 2^ceil(log2(amax / 448)) read off the fp32 bits,
// q = e4m3(clamp(x / s, +-448)) rounded to nearest even. Dequantized, q * s equals ops::fp8_qat_ref(x, 128)
// bit for bit (tests/unit/test_gemm_lt.cpp). No CUDA types: the kernels (gemm_lt.cu) and the host reference
// (gemm_lt_ref.cpp) share these functions, so host and device cannot drift apart.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/host_device.h"
#include "core/small_float.h"

namespace dsinfer::ops::gemm_lt {

inline constexpr int64_t kActBlock = 128;  // channels per activation scale (1 x 128)
inline constexpr int64_t kWBlock = 128;    // weight scale blocks the engine accepts (128 x 128)

// cuBLASLt's scale layouts (cuBLAS docs 3.1.4.5.1; gemm_lt_cuda.h), shared by the kernels and the host references:
// VEC128_32F activation scales are token-major: block b of token m at b * s_ld + m (s_ld = M, a multiple of 4);
// BLK128x128_32F weight scales are K-major with rows of ceil(K/128) rounded up to 4: block (r, c) at r * ld + c.
DSI_HD constexpr int64_t act_scale_index(int64_t m, int64_t b, int64_t s_ld) { return b * s_ld + m; }
DSI_HD constexpr int64_t wscale_ld(int64_t kb) { return (kb + 3) / 4 * 4; }
DSI_HD constexpr int64_t wscale_index(int64_t r, int64_t c, int64_t ld) { return r * ld + c; }

// 2^ceil(log2(t)) for a normal t > 0 from its fp32 bits (as ops::pow2_ceil_scale).
DSI_HD float pow2_ceil(float t) {
  const uint32_t b = small_float::to_bits(t);
  const int k = int((b >> 23) & 0xffu) - 127 + ((b & 0x7fffffu) != 0u ? 1 : 0);
  return ldexpf(1.0f, k);
}

// Scale of a block with absolute maximum amax (the single multiply is not contracted: no add follows it).
DSI_HD float act_scale(float amax) { return pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)); }

// e4m3fn code of a value that is exactly representable in e4m3 (an output of small_float::round_e4m3):
// sign kept (-0 is 0x80), NaN -> 0x7F | sign.
DSI_HD uint8_t e4m3_code(float r) {
  const uint32_t u = small_float::to_bits(r);
  const uint32_t sign = (u >> 31) << 7, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(0x7Fu | sign);
  if (a == 0u) return uint8_t(sign);
  const int e = int(a >> 23) - 127;
  if (e >= -6) return uint8_t(sign | (uint32_t(e + 7) << 3) | ((a >> 20) & 7u));
  return uint8_t(sign | uint32_t(fabsf(r) * 512.0f));  // subnormal m * 2^-9, m = 1..7 (exact)
}

// The e4m3 code of x in a block with scale s (s a power of two, so x / s is exact unless it underflows).
// Saturates at +-448.
DSI_HD uint8_t quantize(float x, float s) {
#if defined(__CUDA_ARCH__)
  const float v = __fdiv_rn(x, s);
#else
  const float v = x / s;
#endif
  if (!(v == v)) return 0x7F;  // NaN stays NaN (as official act_quant)
  return e4m3_code(small_float::round_e4m3(fminf(fmaxf(v, -448.0f), 448.0f)));
}

// The e4m3 value of code c times the power-of-two scale s (exact).
DSI_HD float dequantize(uint8_t c, float s) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(small_float::from_bits(small_float::e4m3_f32_bits(c)), s);
#else
  return small_float::from_bits(small_float::e4m3_f32_bits(c)) * s;
#endif
}
// What the first term leaves of x: x - dequantize(quantize(x, s), s). Exact in fp32 (the two are within a factor
// of 2 of each other or the code is 0, Sterbenz), so the second term quantizes the true remainder.
DSI_HD float residual(float x, uint8_t c, float s) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(x, dequantize(c, s));
#else
  return x - dequantize(c, s);
#endif
}

// Host reference of the activation quantization kernel: x [M, ldx] fp32 (K % 128 == 0) -> q [M, K] e4m3 codes and
// s [M, K / 128] fp32 scales, row-major (the kernel writes s transposed for cuBLASLt; see gemm_lt_launch.h).
// With q2 / s2 (two-term mode, GemmLtActivations::kFp8x2), also the second term: the residual of each block
// quantized the same way, so x ~= q * s + q2 * s2 with ~2^-8 relative error instead of e4m3's 2^-4.
void quantize_ref(const float* x, int64_t M, int64_t ldx, int64_t K, uint8_t* q, float* s, uint8_t* q2 = nullptr,
                  float* s2 = nullptr);
// Host reference of the activation-scale layout the quantization kernel writes: row-major s [M, kb] ->
// t[act_scale_index(m, b, s_ld)] (s_ld >= M; entries of rows [M, s_ld) are 0).
void act_scales_to_lt_ref(const float* s, int64_t M, int64_t kb, float* t, int64_t s_ld);
// Host reference of the weight-scale conversion kernel: block scales [nb, kb] (E8M0 bytes or fp32, row-major) ->
// fp32 dst[wscale_index(r, c, ld)], ld >= kb; entries [kb, ld) of a row are 0.
void weight_scales_to_lt_ref(const void* src, bool e8m0, int64_t nb, int64_t kb, float* dst, int64_t ld);

}  // namespace dsinfer::ops::gemm_lt
