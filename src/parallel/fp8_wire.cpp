// FP8 dispatch wire, host reference (see fp8_wire.h).
#include "parallel/fp8_wire.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtypes.h"

namespace dsinfer::parallel {

void fp8_wire_pack_ref(const float* x, int64_t dim, uint8_t* row) {
  std::memset(row, 0, size_t(fp8_wire_row_bytes(dim)));
  float* scales = reinterpret_cast<float*>(row + fp8_wire_scale_offset(dim));
  for (int64_t b = 0; b < fp8_wire_scales(dim); ++b) {
    const int64_t lo = b * kFp8WireBlock, hi = std::min(dim, lo + kFp8WireBlock);
    float amax = 0.0f;
    for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t i = lo; i < hi; ++i) row[i] = f32_to_e4m3(x[i] / s);
    std::memcpy(scales + b, &s, 4);
  }
}

void fp8_wire_unpack_ref(const uint8_t* row, int64_t dim, float* out) {
  const float* scales = reinterpret_cast<const float*>(row + fp8_wire_scale_offset(dim));
  for (int64_t i = 0; i < dim; ++i) {
    float s;
    std::memcpy(&s, scales + i / kFp8WireBlock, 4);
    out[i] = e4m3_to_f32(row[i]) * s;
  }
}

}  // namespace dsinfer::parallel
