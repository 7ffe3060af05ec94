// Scalar format conversions against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtypes.h"

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
