// The kernel launcher behind gemm_widen_cuda.h (no CUDA types, no Status; validated by gemm_widen_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_launch.h"  // DeviceWeight

namespace dsinfer::ops::cuda::detail {
// loads: 16-byte chunks each thread of the vectorized kernel loads before converting (1, 2 or 4; same values):
// kWidenLoads in production, the others for the bench and the parity test.
inline constexpr int kWidenLoads = 1;
void launch_widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, void* stream, int loads = kWidenLoads);
}  // namespace dsinfer::ops::cuda::detail
