// Kernel launchers behind rmsnorm_cuda.h (no CUDA types, no Status: the .cu side stays free of fmt, which
// nvcc compiles very slowly). Arguments are validated by rmsnorm_cuda.cpp.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {
void launch_rmsnorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y, void* stream,
                    bool round_bf16);
}  // namespace dsinfer::ops::cuda::detail
