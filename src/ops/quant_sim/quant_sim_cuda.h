// CUDA versions of the official numerics simulations (same semantics as quant_sim.h, bit-identical rounding):
// FP8 e4m3 block simulation of the stored KV's non-RoPE channels and Hadamard + FP4 e2m1 block simulation of
// indexer queries; and the bf16 rounding of DeepSeek-V4.1's official numerics (model/deepseek_v41_numerics.h). All
// pointers are device pointers; x is updated in place.
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// Rows of x [rows, row_stride]: FP8 simulation of channels [0, n) in blocks of `block` (official: 64).
// One block of 128 threads per row.
Status fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t n, int64_t block, void* stream);

// Rows of x [rows, dim] (dim a power of two <= 4096): normalized Hadamard transform (double butterflies, as
// hadamard_ref), then FP4 simulation in blocks of `block` (official: 32). One block of 128 threads per row.
Status hadamard_fp4_sim(float* x, int64_t rows, int64_t dim, int64_t block, void* stream);

// Columns [col0, col1) of every row of x [rows, ld] rounded to bf16 (round to nearest even), as core/dtypes.h
// round_bf16: e.g. a whole activation (col0 0, col1 = ld) or the RoPE channels of each head (rows = tokens * heads).
Status round_bf16_cuda(float* x, int64_t rows, int64_t ld, int64_t col0, int64_t col1, void* stream);

}  // namespace dsinfer::ops::cuda
