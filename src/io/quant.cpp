// Reference dequantization (see quant.h). Scalar loops; obviously right beats fast here.
#include "io/quant.h"

#include <cstring>

namespace dsinfer::io {

static float scale_at(const uint8_t* scale, DType dt, int64_t idx) {
  if (dt == DType::F8_E8M0) return e8m0_to_f32(scale[idx]);
  if (dt == DType::F8_E4M3) return e4m3_to_f32(scale[idx]);
  if (dt == DType::BF16) {
    uint16_t v;
    std::memcpy(&v, scale + 2 * idx, 2);
    return bf16_to_f32(v);
  }
  float f;
  std::memcpy(&f, scale + 4 * idx, 4);
  return f;
}

void convert_to_f32(DType dtype, const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      std::memcpy(dst + i, src + 4 * i, 4);
    } else {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = dtype == DType::BF16 ? bf16_to_f32(v) : f16_to_f32(v);
    }
  }
}

void dequant_fp8_block(const uint8_t* q, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                       int64_t block_rows, int64_t block_cols, float* dst) {
  const int64_t scols = (cols + block_cols - 1) / block_cols;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      dst[i * cols + j] = e4m3_to_f32(q[i * cols + j]) * scale_at(scale, scale_dtype, (i / block_rows) * scols + j / block_cols);
}

void dequant_fp4_e2m1(const uint8_t* packed, int64_t rows, int64_t cols, const uint8_t* scale, DType scale_dtype,
                      int64_t group, float* dst) {
  const int64_t groups = cols / group;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t byte = packed[i * (cols / 2) + j / 2];
      uint8_t code = (j % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      dst[i * cols + j] = e2m1_to_f32(code) * scale_at(scale, scale_dtype, i * groups + j / group);
    }
}

}  // namespace dsinfer::io
