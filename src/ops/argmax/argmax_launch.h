// Kernel launcher behind argmax_cuda.h (no CUDA types, no Status; validated by argmax_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {
void launch_argmax_rows(const float* logits, int64_t R, int64_t V, int32_t* out, void* stream);
}  // namespace dsinfer::ops::cuda::detail
