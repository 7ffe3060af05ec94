// The FP8 wire of DP attention's expert dispatch, host reference (parallel/fp8_wire.h; the device kernels are held to
// it bit for bit by GpuFp8Wire.*): the row layout (1.03 bytes a value at D = 4096), each block's largest magnitude
// mapped to +-448 exactly, zero blocks, and the round-trip error of every value within e4m3's half ulp of it (2^-4
// relative) or, below e4m3's normal range, half its smallest subnormal (2^-10 of the block's scale).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "parallel/fp8_wire.h"

using namespace dsinfer;

TEST(Fp8Wire, LayoutAndBlockMaximum) {
  EXPECT_EQ(parallel::fp8_wire_row_bytes(4096), 4096 + 32 * 4);  // 1.03125 bytes a value
  EXPECT_EQ(parallel::fp8_wire_row_bytes(7168), 7168 + 56 * 4);
  EXPECT_EQ(parallel::fp8_wire_row_bytes(96), 96 + 4);
  EXPECT_EQ(parallel::fp8_wire_row_bytes(66), 68 + 4);  // scales 4-byte aligned
  std::vector<float> x(300, 0.0f);
  for (int i = 0; i < 128; ++i) x[size_t(i)] = 0.01f * float(i - 64);
  x[200] = -3.5f;  // block 1's maximum; block 2 (256..299) stays zero
  std::vector<uint8_t> row(size_t(parallel::fp8_wire_row_bytes(300)), 0xAB);
  parallel::fp8_wire_pack_ref(x.data(), 300, row.data());
  EXPECT_EQ(e4m3_to_f32(row[200]), -448.0f);
  EXPECT_EQ(e4m3_to_f32(row[0]), -448.0f);  // -0.64 is block 0's largest magnitude
  for (int i = 256; i < 300; ++i) EXPECT_EQ(row[size_t(i)], 0) << i;
  std::vector<uint8_t> odd(size_t(parallel::fp8_wire_row_bytes(66)), 0xAB);
  parallel::fp8_wire_pack_ref(x.data(), 66, odd.data());
  EXPECT_EQ(odd[66], 0);  // the padding before the 4-byte aligned scales
  EXPECT_EQ(odd[67], 0);
  std::vector<float> y(300);
  parallel::fp8_wire_unpack_ref(row.data(), 300, y.data());
  EXPECT_EQ(y[200], -3.5f);
  for (int i = 256; i < 300; ++i) EXPECT_EQ(y[size_t(i)], 0.0f);
}

TEST(Fp8Wire, RoundTripWithinHalfAnE4m3Ulp) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int64_t dim : {64, 96, 256, 4096}) {
    std::vector<float> x(static_cast<size_t>(dim));
    for (int64_t b = 0; b < parallel::fp8_wire_scales(dim); ++b) {
      const float scale = std::ldexp(1.0f, e(rng));  // blocks of very different magnitudes
      for (int64_t i = b * 128; i < std::min(dim, b * 128 + 128); ++i) x[size_t(i)] = g(rng) * scale;
    }
    std::vector<uint8_t> row(size_t(parallel::fp8_wire_row_bytes(dim)));
    std::vector<float> y(static_cast<size_t>(dim));
    parallel::fp8_wire_pack_ref(x.data(), dim, row.data());
    parallel::fp8_wire_unpack_ref(row.data(), dim, y.data());
    const float* scales = reinterpret_cast<const float*>(row.data() + parallel::fp8_wire_scale_offset(dim));
    for (int64_t i = 0; i < dim; ++i) {
      const float s = scales[i / 128];
      const double bound = std::fabs(double(x[size_t(i)])) / 16.0 + double(s) * std::ldexp(1.0, -10) +
                           std::fabs(double(x[size_t(i)])) * 1e-6;  // + the division's and product's roundings
      EXPECT_LE(std::fabs(double(y[size_t(i)]) - double(x[size_t(i)])), bound) << "dim " << dim << " value " << i;
    }
  }
}
