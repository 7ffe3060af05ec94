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

}  // namespace dsinfer::ops::gemm_lt
