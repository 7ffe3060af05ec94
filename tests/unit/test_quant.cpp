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
