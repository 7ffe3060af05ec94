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

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A value in [0, 2^22) rounded to an integer, ties to even (the float addition rounds; the default rounding mode).
float round_small(float a) {
  volatile float t = a + 0x1p23f;  // volatile: the compiler must not fold (a + 2^23) - 2^23 back to a
  return t - 0x1p23f;
}

// f32_to_e4m3 / f32_to_e2m1 for finite values (what a block scale leaves: |x| <= the format's maximum, up to its
// rounding), by bit arithmetic instead of frexp / ldexp: a checkpoint writer quantizes billions of values. Round to
// nearest even, saturating; the unit tests compare them with the reference encoders.
uint8_t fast_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a < 0x1p-6f) return uint8_t(sign | uint8_t(round_small(a * 512.0f)));  // subnormals: quantum 2^-9
  uint32_t u = bits_of(a);
  u += 0x7FFFFu + ((u >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
  const int e = int(u >> 23) - 127 + 7;
  const uint32_t code = e > 15 ? 0x7Eu : std::min<uint32_t>((uint32_t(e) << 3) | ((u >> 20) & 7u), 0x7Eu);
  return uint8_t(sign | code);
}

uint8_t fast_e2m1(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0;
  const float a = std::fabs(x);
  if (a < 1.0f) return uint8_t(sign | uint8_t(round_small(a * 2.0f)));  // 0, 0.5, 1 (code 2)
  uint32_t u = bits_of(a);
  u += 0x1FFFFFu + ((u >> 22) & 1u);  // round the mantissa to 1 bit, ties to even
  const int e = int(u >> 23) - 127 + 1;
  const uint32_t code = e > 3 ? 7u : std::min<uint32_t>((uint32_t(e) << 1) | ((u >> 22) & 1u), 7u);
  return uint8_t(sign | code);
}

}  // namespace

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
        for (int64_t j = bj * block_cols; j < j1; ++j) q[i * cols + j] = fast_e4m3(w[i * cols + j] * inv);
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
        out[j / 2] = uint8_t(fast_e2m1(x[j] * inv) | (fast_e2m1(x[j + 1] * inv) << 4));
    }
}

}  // namespace dsinfer::io
