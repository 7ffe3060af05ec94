// Dense projection y[t, o] = sum_i x[t, i] * W[o, i] (PyTorch nn.Linear layout, W row-major [out, in]).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

// CPU reference: double accumulation. x [T, in], w [out, in], y [T, out] (y must not alias x).
void linear_ref(const float* x, int64_t T, int64_t in, const float* w, int64_t out, float* y);

}  // namespace dsinfer::ops
