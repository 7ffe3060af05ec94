// Reference dequantization (see quant.h). Scalar loops; obviously right beats fast here.
#include "io/quant.h"

#include <algorithm>
#include <cmath>
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

uint8_t e8m0_scale_for(float amax, float max_code) {
  const double a = std::max(double(amax), 1e-30);
  const int e = int(std::ceil(std::log2(a / double(max_code))));
  return uint8_t(std::clamp(e + 127, 0, 254));  // 0xFF is NaN
}

void quant_fp8_block(const float* w, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols, uint8_t* q,
                     uint8_t* scale_e8m0) {
  const int64_t srows = (rows + block_rows - 1) / block_rows, scols = (cols + block_cols - 1) / block_cols;
  for (int64_t bi = 0; bi < srows; ++bi)
    for (int64_t bj = 0; bj < scols; ++bj) {
      const int64_t i1 = std::min(rows, (bi + 1) * block_rows), j1 = std::min(cols, (bj + 1) * block_cols);
      float amax = 0.0f;
      for (int64_t i = bi * block_rows; i < i1; ++i)
        for (int64_t j = bj * block_cols; j < j1; ++j) amax = std::max(amax, std::fabs(w[i * cols + j]));
      const uint8_t code = e8m0_scale_for(amax, 448.0f);
      scale_e8m0[bi * scols + bj] = code;
      const float inv = 1.0f / e8m0_to_f32(code);  // a power of two: exact
      for (int64_t i = bi * block_rows; i < i1; ++i)
        for (int64_t j = bj * block_cols; j < j1; ++j) q[i * cols + j] = f32_to_e4m3(w[i * cols + j] * inv);
    }
}

void quant_fp4_e2m1(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* packed, uint8_t* scale_e8m0) {
  const int64_t groups = cols / group;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w + i * cols + g * group;
      float amax = 0.0f;
      for (int64_t j = 0; j < group; ++j) amax = std::max(amax, std::fabs(x[j]));
      const uint8_t code = e8m0_scale_for(amax, 6.0f);
      scale_e8m0[i * groups + g] = code;
      const float inv = 1.0f / e8m0_to_f32(code);
      uint8_t* out = packed + i * (cols / 2) + g * group / 2;
      for (int64_t j = 0; j < group; j += 2)
        out[j / 2] = uint8_t(f32_to_e2m1(x[j] * inv) | (f32_to_e2m1(x[j + 1] * inv) << 4));
    }
}

}  // namespace dsinfer::io
