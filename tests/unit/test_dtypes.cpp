// Scalar format conversions against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtypes.h"
#include "core/small_float.h"

using namespace dsinfer;

TEST(DTypes, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1+2^-7: ties to even -> 1.0
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DTypes, F16) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

TEST(DTypes, E4M3DecodeHandValues) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);     // exp 7, man 0
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);   // max finite
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
}

TEST(DTypes, E4M3EncodeRoundTripsAllFinite) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    float f = e4m3_to_f32(uint8_t(b));
    if (f == 0.0f) continue;
    EXPECT_EQ(f32_to_e4m3(f), b) << b;
  }
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.0625f)), 1.0f);   // halfway 1 and 1.125 -> even (1.0)
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.1875f)), 1.25f);  // halfway 1.125 and 1.25 -> even (1.25)
}

TEST(DTypes, E8M0) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
}

TEST(DTypes, E2M1) {
  const float expect[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_f32(uint8_t(c)), expect[c]);
    if (c != 8) {
      EXPECT_EQ(f32_to_e2m1(expect[c]), c);
    }
  }
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);   // halfway 4 and 6 -> even mantissa (4)
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);   // halfway 2 and 3 -> 2
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);  // halfway 0 and 0.5 -> 0
  EXPECT_EQ(round_e2m1(100.0f), 6.0f);
}

// The shared host/device decoders (core/small_float.h) against the arithmetic definition of each format, for
// every code.
TEST(SmallFloat, DecodersMatchArithmeticDefinition) {
  namespace sf = dsinfer::small_float;
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : sf::to_bits(a) == sf::to_bits(b); };
  for (uint32_t c = 0; c < 16; ++c) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float want = (c & 8) ? -mag[c & 7] : mag[c & 7];
    EXPECT_TRUE(same(sf::from_bits(sf::e2m1_f32_bits(c)), want)) << c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const float e8 = b == 255 ? NAN : std::ldexp(1.0f, int(b) - 127);
    EXPECT_TRUE(same(sf::from_bits(sf::e8m0_f32_bits(b)), e8)) << b;
    const uint32_t s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float e4 = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(m | 8), int(e) - 10);
    if (e == 15 && m == 7) e4 = NAN;
    EXPECT_TRUE(same(sf::from_bits(sf::e4m3_f32_bits(b)), s ? -e4 : e4)) << b;
  }
  for (uint32_t h : {0x0000u, 0x8000u, 0x3f80u, 0xc000u, 0x7f80u, 0x0001u})
    EXPECT_EQ(sf::bf16_f32_bits(h), h << 16);
}

TEST(SmallFloat, RoundingKeepsSignAndSaturates) {
  namespace sf = dsinfer::small_float;
  EXPECT_EQ(sf::round_e4m3(1000.0f), 448.0f);
  EXPECT_EQ(sf::round_e4m3(-1000.0f), -448.0f);
  EXPECT_EQ(sf::round_e4m3(1.0625f), 1.0f);          // tie -> even
  EXPECT_EQ(sf::round_e4m3(std::ldexp(1.0f, -10)), 0.0f);  // half the smallest subnormal -> even (0)
  EXPECT_TRUE(std::signbit(sf::round_e2m1(-0.1f)));  // rounds to -0
  EXPECT_EQ(sf::round_e2m1(-5.0f), -4.0f);
  EXPECT_EQ(sf::round_e2m1(7.0f), 6.0f);
}
