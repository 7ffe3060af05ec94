// Host reference of the cuBLASLt engine's activation quantization (see gemm_lt_quant.h).
#include <cmath>

#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::gemm_lt {

void quantize_ref(const float* x, int64_t M, int64_t ldx, int64_t K, uint8_t* q, float* s, uint8_t* q2, float* s2) {
  const int64_t kb = K / kActBlock;
  float r[kActBlock];
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < kb; ++b) {
      const float* xb = x + m * ldx + b * kActBlock;
      uint8_t* qb = q + m * K + b * kActBlock;
      float amax = 0.0f;
      for (int64_t i = 0; i < kActBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      const float sc = act_scale(amax);
      s[m * kb + b] = sc;
      for (int64_t i = 0; i < kActBlock; ++i) qb[i] = quantize(xb[i], sc);
      if (!q2 || !s2) continue;
      float amax2 = 0.0f;
      for (int64_t i = 0; i < kActBlock; ++i) {
        r[i] = residual(xb[i], qb[i], sc);
        amax2 = std::fmax(amax2, std::fabs(r[i]));
      }
      const float sc2 = act_scale(amax2);
      s2[m * kb + b] = sc2;
      for (int64_t i = 0; i < kActBlock; ++i) q2[m * K + b * kActBlock + i] = quantize(r[i], sc2);
    }
}

void act_scales_to_lt_ref(const float* s, int64_t M, int64_t kb, float* t, int64_t s_ld) {
  for (int64_t b = 0; b < kb; ++b)
    for (int64_t m = 0; m < s_ld; ++m) t[act_scale_index(m, b, s_ld)] = m < M ? s[m * kb + b] : 0.0f;
}

void weight_scales_to_lt_ref(const void* src, bool e8m0, int64_t nb, int64_t kb, float* dst, int64_t ld) {
  for (int64_t r = 0; r < nb; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      float v = 0.0f;
      if (c < kb) {
        const int64_t j = r * kb + c;
        v = e8m0 ? small_float::from_bits(small_float::e8m0_f32_bits(static_cast<const uint8_t*>(src)[j]))
                 : static_cast<const float*>(src)[j];
      }
      dst[wscale_index(r, c, ld)] = v;
    }
}

}  // namespace dsinfer::ops::gemm_lt
