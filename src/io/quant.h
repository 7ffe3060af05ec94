// Dequantization reference functions, one per checkpoint storage format, each producing fp32 row-major
// [rows, cols]. Shapes of the packed data and scales are validated by the caller (model/weights.cpp) so the
// messages can name the tensor; these functions assume consistent sizes. At the end, their inverses for writing
// checkpoints in those formats (model/export_v41.*): the official quantizers' rule.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtypes.h"

namespace dsinfer::io {

// Plain float formats (F32, BF16, F16) to fp32.
void convert_to_f32(DType dtype, const uint8_t* src, int64_t n, float* dst);

// FP8 e4m3fn weight [rows, cols] with one scale per block_rows x block_cols block; scale tensor
// [ceil(rows/br), ceil(cols/bc)] in E8M0 (2^(e-127)) or F32. W = e4m3(q) * scale[i/br][j/bc].
void dequant_fp8_block(const uint8_t* q, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                       int64_t block_rows, int64_t block_cols, float* dst);

// FP4 e2m1 weight, logical [rows, cols], packed [rows, cols/2] (element 2c in the low nibble of byte c,
// 2c+1 in the high nibble) with one scale per `group` consecutive inputs of a row: scale [rows, cols/group]
// in E8M0, E4M3 (DeepSeek-V4.1 compressed KV: group 16) or F32.
void dequant_fp4_e2m1(const uint8_t* packed, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                      int64_t group, float* dst);

// DeepSeek-V4.1 storage formats (research/dsv41-architecture.md §3.1), named for their users:
// dense FP8 weights, e4m3 [rows, cols] with one E8M0 scale per 32x32 block (scale [ceil(rows/32), ceil(cols/32)]);
inline void dequant_fp8_32x32(const uint8_t* q, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                              float* dst) {
  dequant_fp8_block(q, rows, cols, scale, scale_dtype, 32, 32, dst);
}
// Engram tables, e4m3 rows [rows, cols] with one E8M0 scale per row and 32 channels (scale [rows, cols/32]);
inline void dequant_fp8_row32(const uint8_t* q, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                              float* dst) {
  dequant_fp8_block(q, rows, cols, scale, scale_dtype, 1, 32, dst);
}
// routed experts, FP4 e2m1 packed [rows, cols/2] with one E8M0 scale per row and 32 inputs (scale [rows, cols/32]).
inline void dequant_fp4_row32(const uint8_t* packed, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                              float* dst) {
  dequant_fp4_e2m1(packed, rows, cols, scale, scale_dtype, 32, dst);
}

// Quantizers (the inverse of the two dequantizers above, E8M0 scales): the scale of a block is the power of two
// 2^ceil(log2(amax / max_code)) (amax floored at 1e-30 so an all-zero block gets a finite scale), values rounded to
// nearest even, so dequantizing gives back every value that is already representable. FP8 e4m3: max 448, q
// [rows, cols], scale [ceil(rows / br), ceil(cols / bc)]; FP4 e2m1: max 6, packed [rows, cols / 2] (low nibble
// first), scale [rows, cols / group], cols % group == 0 and group even.
void quant_fp8_block(const float* w, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols, uint8_t* q,
                     uint8_t* scale_e8m0);
void quant_fp4_e2m1(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* packed, uint8_t* scale_e8m0);
// The E8M0 code of the scale for a block whose largest magnitude is amax, for codes up to max_code.
uint8_t e8m0_scale_for(float amax, float max_code);

}  // namespace dsinfer::io
