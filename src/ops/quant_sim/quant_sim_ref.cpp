// CPU reference quantization simulations (see quant_sim.h).
#include "ops/quant_sim/quant_sim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtypes.h"

namespace dsinfer::ops {

namespace {
template <typename Round>
void block_sim(float* x, int64_t n, int64_t block, float qmax, float amax_floor, Round round) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = amax_floor;
    for (int64_t i = b0; i < b1; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = std::ldexp(1.0f, int(std::ceil(std::log2(double(amax) / double(qmax)))));
    for (int64_t i = b0; i < b1; ++i) x[i] = round(std::clamp(x[i] / s, -qmax, qmax)) * s;
  }
}
}  // namespace

void fp8_block_sim_ref(float* x, int64_t n, int64_t block) {
  block_sim(x, n, block, 448.0f, 1e-4f, [](float v) { return round_e4m3(v); });
}

void fp4_block_sim_ref(float* x, int64_t n, int64_t block) {
  block_sim(x, n, block, 6.0f, 6.0f * std::ldexp(1.0f, -126), [](float v) { return round_e2m1(v); });
}

void hadamard_ref(float* x, int64_t n) {
  std::vector<double> v(x, x + n);
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        double a = v[size_t(j)], b = v[size_t(j + h)];
        v[size_t(j)] = a + b;
        v[size_t(j + h)] = a - b;
      }
  const double sc = 1.0 / std::sqrt(double(n));
  for (int64_t i = 0; i < n; ++i) x[i] = float(v[size_t(i)] * sc);
}

}  // namespace dsinfer::ops
