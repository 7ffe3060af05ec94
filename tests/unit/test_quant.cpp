// Dequantization of every checkpoint format against hand-computed values, and the official numerics
// simulations (FP8 1x64 / FP4 1x32 power-of-two scales, Walsh-Hadamard).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtypes.h"
#include "io/quant.h"
#include "ops/quant_sim/quant_sim.h"

using namespace dsinfer;

TEST(Dequant, Fp8BlockWithE8M0Scales) {
  // 3 x 5 weight, blocks of 2 x 4 -> scale grid 2 x 2.
  std::vector<uint8_t> q(15, 0x38);  // every element e4m3 1.0
  q[0] = 0x3c;                        // 1.5
  q[4] = 0xb8;                        // -1.0 (row 0, col 4: block (0,1))
  q[14] = 0x40;                       // 2.0 (row 2, col 4: block (1,1))
  std::vector<uint8_t> scale = {127, 128, 126, 130};  // 1, 2, 0.5, 8
  std::vector<float> out(15);
  io::dequant_fp8_block(q.data(), 3, 5, scale.data(), DType::F8_E8M0, 2, 4, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[4], -2.0f);
  EXPECT_EQ(out[5 + 3], 1.0f);   // row 1 col 3: block (0,0)
  EXPECT_EQ(out[10 + 0], 0.5f);  // row 2 col 0: block (1,0)
  EXPECT_EQ(out[14], 16.0f);
}

TEST(Dequant, Fp8BlockWithF32Scales) {
  std::vector<uint8_t> q = {0x38, 0x40};  // 1, 2
  float s = 0.25f;
  std::vector<uint8_t> scale(4);
  std::memcpy(scale.data(), &s, 4);
  std::vector<float> out(2);
  io::dequant_fp8_block(q.data(), 1, 2, scale.data(), DType::F32, 128, 128, out.data());
  EXPECT_EQ(out[0], 0.25f);
  EXPECT_EQ(out[1], 0.5f);
}

TEST(Dequant, Fp4LowNibbleFirstWithPerGroupScale) {
  // One row of 64 inputs: two groups of 32. Byte c holds element 2c (low nibble) and 2c+1 (high nibble).
  std::vector<uint8_t> packed(32, 0);
  packed[0] = 0x72;   // elem0 = code 2 (1.0), elem1 = code 7 (6.0)
  packed[1] = 0x9f;   // elem2 = code 15 (-6), elem3 = code 9 (-0.5)
  packed[16] = 0x03;  // elem32 = code 3 (1.5), elem33 = 0
  std::vector<uint8_t> scale = {128, 125};  // group 0 x2, group 1 x0.25
  std::vector<float> out(64);
  io::dequant_fp4_e2m1(packed.data(), 1, 64, scale.data(), DType::F8_E8M0, 32, out.data());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 12.0f);
  EXPECT_EQ(out[2], -12.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[32], 0.375f);
  EXPECT_EQ(out[33], 0.0f);
}

TEST(Dequant, PlainFloatFormats) {
  std::vector<uint16_t> bf = {0x3f80, 0xc040};  // 1, -3
  std::vector<float> out(2);
  io::convert_to_f32(DType::BF16, reinterpret_cast<const uint8_t*>(bf.data()), 2, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  std::vector<uint16_t> h = {0x3800};  // 0.5
  io::convert_to_f32(DType::F16, reinterpret_cast<const uint8_t*>(h.data()), 1, out.data());
  EXPECT_EQ(out[0], 0.5f);
}

TEST(QuantSim, Fp8BlockUsesPowerOfTwoScaleAndRoundsToE4M3) {
  // amax = 3 -> s = 2^ceil(log2(3/448)) = 2^-7; x/s = 384 (exact in e4m3), 1.1/s = 140.8 -> 144 (e4m3 step 16).
  std::vector<float> x = {3.0f, 1.1f, -0.0001f};
  ops::fp8_block_sim_ref(x.data(), 3, 64);
  EXPECT_EQ(x[0], 3.0f);
  EXPECT_EQ(x[1], 144.0f / 128.0f);
  EXPECT_EQ(x[2], -7 * std::ldexp(1.0f, -16));  // -0.0128 in e4m3 subnormals (step 2^-9) -> -7 * 2^-9, times s
  // Blocks are independent: a large value in block 2 does not coarsen block 1.
  std::vector<float> y(128, 0.01f);
  y[100] = 1000.0f;
  ops::fp8_block_sim_ref(y.data(), 128, 64);
  EXPECT_NEAR(y[0], 0.01f, 0.01f / 16);
  EXPECT_EQ(y[100], 1024.0f);  // s = 4, 1000/4 = 250 -> 256 (e4m3 step 16 in [128,256))
}

TEST(QuantSim, Fp4BlockUsesPowerOfTwoScaleAndRoundsToE2M1) {
  // amax = 6 -> s = 1: values round to the e2m1 grid.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = 2.4f;   // -> 2
  x[2] = -0.8f;  // -> -1 (0.75 would be a tie; 0.8 is nearer 1)
  x[3] = 5.0f;   // tie between 4 and 6 -> even mantissa (4)
  ops::fp4_block_sim_ref(x.data(), 32, 32);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], -1.0f);
  EXPECT_EQ(x[3], 4.0f);
  // amax = 0.3 -> s = 2^ceil(log2(0.05)) = 2^-4: 0.3/s = 4.8 -> 4 (nearest: 4 vs 6) -> 0.25
  std::vector<float> y(32, 0.0f);
  y[0] = 0.3f;
  ops::fp4_block_sim_ref(y.data(), 32, 32);
  EXPECT_EQ(y[0], 0.25f);
}

TEST(QuantSim, HadamardIsOrthonormalSylvester) {
  std::vector<float> e(8, 0.0f);
  e[1] = 1.0f;  // column 1 of H8 / sqrt(8): alternating signs
  ops::hadamard_ref(e.data(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(e[size_t(i)], (i % 2 ? -1.0f : 1.0f) / std::sqrt(8.0f));
  std::vector<float> v = {1, 2, 3, 4};
  ops::hadamard_ref(v.data(), 4);
  ops::hadamard_ref(v.data(), 4);  // H is its own inverse when normalized
  EXPECT_NEAR(v[0], 1, 1e-6);
  EXPECT_NEAR(v[3], 4, 1e-6);
}

// The quantizers that write checkpoints (model/export_v41.*): dequant(quant(w)) is the nearest representable weight
// under the block's power-of-two scale, and a weight that is already representable comes back bit for bit.
TEST(Quant, Fp8BlockRoundTripsWithinHalfAStepAndKeepsRepresentableValues) {
  const int64_t rows = 37, cols = 70, br = 32, bc = 32;  // partial blocks on both edges
  std::vector<float> w(size_t(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 11)) * 1e-2f;
  w[5] = 0.0f;
  std::vector<uint8_t> q(w.size()), s(size_t(2 * 3));
  io::quant_fp8_block(w.data(), rows, cols, br, bc, q.data(), s.data());
  std::vector<float> back(w.size());
  io::dequant_fp8_block(q.data(), rows, cols, s.data(), DType::F8_E8M0, br, bc, back.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float scale = e8m0_to_f32(s[size_t((i / br) * 3 + j / bc)]);
      const float x = w[size_t(i * cols + j)], y = back[size_t(i * cols + j)];
      // e4m3 has 3 mantissa bits: half an ulp is 2^-4 relative, and subnormals step 2^-9 times the scale.
      ASSERT_LE(std::fabs(x - y), std::max(std::fabs(x) / 16.0f, scale * 0x1p-10f)) << i << "," << j;
      EXPECT_LE(std::fabs(x) / scale, 448.0f);
    }
  EXPECT_EQ(back[5], 0.0f);
  // Representable weights come back exactly (a block's scale may halve when its largest value rounded down to
  // 224 x scale, with the codes doubled: the same values).
  std::vector<uint8_t> q2(q.size()), s2(s.size());
  io::quant_fp8_block(back.data(), rows, cols, br, bc, q2.data(), s2.data());
  std::vector<float> again(w.size());
  io::dequant_fp8_block(q2.data(), rows, cols, s2.data(), DType::F8_E8M0, br, bc, again.data());
  EXPECT_EQ(again, back);
  // The block's largest magnitude lands in e4m3's top binade: amax 3.0 -> scale 2^-7 (3 / 2^-7 = 384 <= 448).
  EXPECT_EQ(io::e8m0_scale_for(3.0f, 448.0f), 127 - 7);
  EXPECT_EQ(io::e8m0_scale_for(0.0f, 448.0f), uint8_t(std::ceil(std::log2(1e-30 / 448.0)) + 127));
}

TEST(Quant, Fp4GroupsPackLowNibbleFirstAndRoundTrip) {
  const int64_t rows = 3, cols = 64, group = 32;
  std::vector<float> w(size_t(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.91f * float(i)) * float(1 + i % 5);
  w[0] = 6.0f;   // row 0 group 0: amax 6 -> scale 1, 6.0 is code 7
  w[1] = -0.5f;  // code 8 | 1 = 9
  std::vector<uint8_t> p(size_t(rows * cols / 2)), s(size_t(rows * cols / group));
  io::quant_fp4_e2m1(w.data(), rows, cols, group, p.data(), s.data());
  EXPECT_EQ(s[0], 127);
  EXPECT_EQ(p[0], uint8_t(7 | (9 << 4)));
  std::vector<float> back(w.size());
  io::dequant_fp4_e2m1(p.data(), rows, cols, s.data(), DType::F8_E8M0, group, back.data());
  for (size_t i = 0; i < w.size(); ++i) {
    const float scale = e8m0_to_f32(s[i / size_t(group)]);
    // e2m1 steps are at most 2 (between 4 and 6) times the scale: half of it bounds the error.
    ASSERT_LE(std::fabs(w[i] - back[i]), 1.0f * scale) << i;
  }
  std::vector<uint8_t> p2(p.size()), s2(s.size());
  io::quant_fp4_e2m1(back.data(), rows, cols, group, p2.data(), s2.data());
  std::vector<float> again(w.size());
  io::dequant_fp4_e2m1(p2.data(), rows, cols, s2.data(), DType::F8_E8M0, group, again.data());
  EXPECT_EQ(again, back);
}

// The writer's encoders against the reference scalar encoders (core/dtypes.h), over a dense sweep of each format's
// range with every midpoint (ties to even) and subnormal: a block whose largest value is the format's maximum has
// scale 1, so its codes are the plain encodings.
TEST(Quant, BlockEncodersEqualTheReferenceEncoders) {
  std::vector<float> v = {448.0f, -448.0f, 0.0f, -0.0f, 0x1p-9f, 0x1p-10f, 3 * 0x1p-10f, 0x1p-6f, 15 * 0x1p-10f};
  for (int k = 0; k < 255; ++k) {
    const float a = e4m3_to_f32(uint8_t(k)), b = e4m3_to_f32(uint8_t(k + 1));
    if (!std::isfinite(a) || !std::isfinite(b) || a < 0 || b < 0) continue;
    for (float t : {0.0f, 0.25f, 0.5f, 0.75f}) v.push_back(a + t * (b - a));
  }
  for (int k = 0; k < 20000; ++k) v.push_back(448.0f * std::sin(0.013f * float(k)) * std::pow(2.0f, -float(k % 12)));
  while (v.size() % 32) v.push_back(0.0f);
  const int64_t n = int64_t(v.size());
  std::vector<uint8_t> q(v.size());
  std::vector<uint8_t> s(v.size());
  io::quant_fp8_block(v.data(), 1, n, 1, n, q.data(), s.data());
  ASSERT_EQ(s[0], 127);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(q[size_t(i)], f32_to_e4m3(v[size_t(i)])) << v[size_t(i)];
  std::vector<float> f = {6.0f, -6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.9f, 0.0f, -0.0f};
  for (int k = 0; k < 4000; ++k) f.push_back(6.0f * std::cos(0.37f * float(k)) * std::pow(2.0f, -float(k % 5)));
  while (f.size() % 32) f.push_back(0.0f);
  // One group per row of 32 with 6.0 first, so every group has scale 1.
  const int64_t rows = int64_t(f.size()) / 32;
  for (int64_t r = 0; r < rows; ++r) f[size_t(r * 32)] = 6.0f;
  std::vector<uint8_t> p(f.size() / 2);
  std::vector<uint8_t> ps(static_cast<size_t>(rows));
  io::quant_fp4_e2m1(f.data(), rows, 32, 32, p.data(), ps.data());
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(ps[size_t(r)], 127);
  for (size_t i = 0; i < f.size(); ++i) {
    const uint8_t code = i % 2 ? uint8_t(p[i / 2] >> 4) : uint8_t(p[i / 2] & 0xF);
    ASSERT_EQ(code, f32_to_e2m1(f[i])) << f[i];
  }
}
