// Kernel launchers behind elementwise_cuda.h (no CUDA types, no Status; validated by elementwise_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {
void launch_scale(float* x, int64_t n, float s, void* stream);  // elementwise.cu ("scale_kernel")
}  // namespace dsinfer::ops::cuda::detail
