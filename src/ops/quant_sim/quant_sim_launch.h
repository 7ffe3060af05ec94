// Kernel launchers behind quant_sim_cuda.h (validated by quant_sim_cuda.cpp; no CUDA types, no Status).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {
void launch_fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t n, int64_t block, void* stream);
void launch_hadamard_fp4_sim(float* x, int64_t rows, int64_t dim, int64_t block, void* stream);
void launch_round_bf16(float* x, int64_t rows, int64_t ld, int64_t col0, int64_t col1, void* stream);
}  // namespace dsinfer::ops::cuda::detail
