// Host reference of the cuBLASLt engine's activation quantization (see gemm_lt_quant.h).
#include <cmath>

#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::gemm_lt {

void quantize_ref(const float* x, int64_t M, int64_t ldx, int64_t K, uint8_t* q, float* s) {
  const int64_t kb = K / kActBlock;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < kb; ++b) {
      const float* xb = x + m * ldx + b * kActBlock;
      float amax = 0.0f;
      for (int64_t i = 0; i < kActBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      const float sc = act_scale(amax);
      s[m * kb + b] = sc;
      for (int64_t i = 0; i < kActBlock; ++i) q[m * K + b * kActBlock + i] = quantize(xb[i], sc);
    }
}

}  // namespace dsinfer::ops::gemm_lt
