// CUDA RMSNorm (same semantics as rmsnorm.h): y = x * rsqrt(mean(x^2) + eps) [* w] per row, sum of squares in
// double, the two products rounded separately as in rmsnorm_ref. All pointers are device pointers.
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// x, y: [rows, dim] contiguous fp32 (may alias); w: [dim] or nullptr (unweighted).
// One block of 256 threads per row. round_bf16: the output rounded to bf16 (round_bf16_cuda fused: DeepSeek-V4.1's
// official numerics store the norm's output in bf16; the same bits as the two launches).
Status rmsnorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y, void* stream,
               bool round_bf16 = false);

}  // namespace dsinfer::ops::cuda
