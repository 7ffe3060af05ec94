// CPU reference of the KV storage formats (see kv_format.h).
#include <cmath>
#include <cstring>

#include "ops/kv_format/kv_format.h"

namespace dsinfer::ops {

namespace {
// Largest magnitude of x[0, n), or +inf when a value is not finite (fmax would skip a NaN).
float amax_or_inf(const float* x, int64_t n) {
  float a = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    a = std::fmax(a, std::fabs(x[i]));
  }
  return a;
}
}  // namespace

void kv_encode_row_ref(const float* x, uint8_t* cache, int64_t row, const KvPages& g) {
  uint8_t* data = cache + kv_data_offset(g, row);
  uint8_t* scales = cache + kv_scale_offset(g, row);
  for (int64_t t = 0; t < kKvTiles; ++t) {
    const float* xt = x + t * kKvTile;
    const uint8_t sb = kv_tile_scale_byte(amax_or_inf(xt, kKvTile));
    scales[t] = sb;
    for (int64_t i = 0; i < kKvTile; ++i)
      data[t * kKvTile + i] = sb == 0xFF ? uint8_t(0x7F) : kv_encode_e4m3(xt[i], int(sb) - 127);
  }
  scales[kKvTiles] = 0;
  for (int64_t i = 0; i < kKvRope; ++i) {
    const uint16_t h = small_float::f32_to_bf16_bits(x[kKvNope + i]);
    data[kKvNope + 2 * i] = uint8_t(h & 0xFF);  // little-endian bf16, as the GPU reads it
    data[kKvNope + 2 * i + 1] = uint8_t(h >> 8);
  }
}

void kv_decode_row_ref(const uint8_t* cache, int64_t row, float* out, const KvPages& g) {
  const uint8_t* data = cache + kv_data_offset(g, row);
  const uint8_t* scales = cache + kv_scale_offset(g, row);
  for (int64_t i = 0; i < kKvNope; ++i) {
    const float s = small_float::from_bits(small_float::e8m0_f32_bits(scales[i / kKvTile]));
    out[i] = small_float::from_bits(small_float::e4m3_f32_bits(data[i])) * s;
  }
  for (int64_t i = 0; i < kKvRope; ++i) {
    const uint32_t h = uint32_t(data[kKvNope + 2 * i]) | (uint32_t(data[kKvNope + 2 * i + 1]) << 8);
    out[kKvNope + i] = small_float::from_bits(small_float::bf16_f32_bits(h));
  }
}

void idx_encode_row_ref(const float* x, uint8_t* cache, int64_t row, const KvPages& g) {
  uint8_t* codes = cache + idx_code_offset(g, row);
  const float amax = amax_or_inf(x, kIdxDim);
  float scale = small_float::from_bits(0x7FC00000u);  // the quiet NaN, the same bits on host and device
  if (std::isfinite(amax)) {
    const int k = amax > 0.0f ? kv_pow2_exponent(amax, 448.0f) : 0;
    scale = std::ldexp(1.0f, k);
    for (int64_t i = 0; i < kIdxDim; ++i) codes[i] = kv_encode_e4m3(x[i], k);
  } else {
    std::memset(codes, 0x7F, size_t(kIdxDim));
  }
  std::memcpy(cache + idx_scale_offset(g, row), &scale, 4);
}

void idx_decode_row_ref(const uint8_t* cache, int64_t row, float* out, const KvPages& g) {
  const uint8_t* codes = cache + idx_code_offset(g, row);
  float scale;
  std::memcpy(&scale, cache + idx_scale_offset(g, row), 4);
  for (int64_t i = 0; i < kIdxDim; ++i) out[i] = small_float::from_bits(small_float::e4m3_f32_bits(codes[i])) * scale;
}

}  // namespace dsinfer::ops
