// CPU reference RMSNorm (see rmsnorm.h); mean of squares accumulated in double.
#include "ops/rmsnorm/rmsnorm.h"

#include <cmath>

namespace dsinfer::ops {

void rmsnorm_ref(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * double(xr[i]);
    const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    float* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
  }
}

}  // namespace dsinfer::ops
