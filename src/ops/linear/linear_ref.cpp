// CPU reference of the dense projection (see linear.h).
#include "ops/linear/linear.h"

namespace dsinfer::ops {

void linear_ref(const float* x, int64_t T, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * in;
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w + o * in;
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) acc += double(xr[i]) * double(wr[i]);
      y[t * out + o] = float(acc);
    }
  }
}

}  // namespace dsinfer::ops
