// The kernel launcher behind gemm_widen_cuda.h (no CUDA types, no Status; validated by gemm_widen_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_launch.h"  // DeviceWeight

namespace dsinfer::ops::cuda::detail {
void launch_widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, void* stream);
}  // namespace dsinfer::ops::cuda::detail
