// CPU reference QAT quantizers (see qat.h).
#include "ops/qat/qat.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtypes.h"

namespace dsinfer::ops {

float pow2_ceil_scale(float t) {
  uint32_t bits;
  std::memcpy(&bits, &t, 4);
  const int k = int((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return std::ldexp(1.0f, k);
}

void fp8_qat_ref(float* x, int64_t n, int64_t block) {
  if (n % block) return;
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = pow2_ceil_scale(std::fmax(amax, 1e-4f) * (1.0f / 448.0f));
    for (int64_t i = b; i < b + block; ++i) x[i] = round_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f)) * s;
  }
}

void fp4_qat_ref(float* x, int64_t n, int64_t block, bool e4m3_scale) {
  if (n % block) return;
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = e4m3_scale ? round_e4m3(std::fmax(amax, 6.0f * std::ldexp(1.0f, -9)) / 6.0f)
                               : pow2_ceil_scale(std::fmax(amax, 6.0f * std::ldexp(1.0f, -126)) * (1.0f / 6.0f));
    for (int64_t i = b; i < b + block; ++i) x[i] = round_e2m1(std::clamp(x[i] / s, -6.0f, 6.0f)) * s;
  }
}

}  // namespace dsinfer::ops
