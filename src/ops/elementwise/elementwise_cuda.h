// Small elementwise helpers of the CUDA runner (plain header).
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// x[i] *= s for i < n (device pointer).
Status scale_cuda(float* x, int64_t n, float s, void* stream);

}  // namespace dsinfer::ops::cuda
