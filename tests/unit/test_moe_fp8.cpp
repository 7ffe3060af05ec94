// CPU checks of the FP8 grouped MoE path's numeric contract (ops/moe/moe_fp8_common.h, shared with moe_grouped_fp8.cu)
// and its CPU reference (ops/moe/moe_fp8.h), each against an independent implementation: the FP4 -> e4m3 code expansion
// against core/dtypes' e4m3 encoder for every code and scale offset; the expanded weights times their block scales
// against io::dequant_fp4_e2m1 (bitwise where the contract says exact); the 1x64 activation quantization against its
// error bound; the block scale bits against ldexp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtypes.h"
#include "io/quant.h"
#include "ops/moe/moe_fp8.h"
#include "ops/moe/moe_fp8_common.h"

namespace md = dsinfer::ops::moe_detail;
namespace ops = dsinfer::ops;

namespace {

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

TEST(MoeFp8, CodeExpansionMatchesTheEncoder) {
  for (uint32_t c = 0; c < 16; ++c)
    for (int d = -24; d <= 0; ++d) {
      const float v = std::ldexp(dsinfer::e2m1_to_f32(uint8_t(c)), d + 6);
      uint32_t want = dsinfer::f32_to_e4m3(v);
      if (c == 8) want = 0x80u;  // e2m1 -0 -> e4m3 -0 (the encoder keeps the sign too)
      EXPECT_EQ(md::fp4_code_e4m3(c, d), want) << "code " << c << " d " << d;
      // exact down to d = -2 (the contract's spread of 14 between the two groups of a block, from both sides)
      if (d >= -2) {
        EXPECT_EQ(dsinfer::e4m3_to_f32(uint8_t(want)), v) << "code " << c << " d " << d;
      }
    }
}

// The kernel's prmt table (fp4_e4m3_table, shifted exponent fields for -11 <= d <= 0) against fp4_mag_e4m3.
TEST(MoeFp8, ExpansionTable) {
  for (int d = -40; d <= 0; ++d) {
    uint32_t t0 = 0, t1 = 0;
    md::fp4_e4m3_table(d, t0, t1);
    for (uint32_t i = 0; i < 8; ++i)
      EXPECT_EQ(((i < 4 ? t0 : t1) >> (8 * (i & 3))) & 0xFFu, md::fp4_mag_e4m3(i, d)) << "mag " << i << " d " << d;
  }
}

TEST(MoeFp8, BlockScaleBits) {
  for (uint32_t m : {0u, 1u, 5u, 6u, 7u, 100u, 127u, 130u, 200u, 254u}) {
    const uint32_t b = md::fp8_block_scale_bits(m);
    float f;
    std::memcpy(&f, &b, 4);
    EXPECT_EQ(f, std::ldexp(1.0f, int(m) - 133)) << m;
  }
  EXPECT_TRUE(std::isnan([] {
    const uint32_t b = md::fp8_block_scale_bits(0xFFu);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }()));
}

// Expanded weights x block scales reproduce the FP4 dequantization exactly when the scales of every block (64 or 128 k)
// are within 2^14; with a wider spread only the smaller groups change (rounded to e4m3 subnormals).
TEST(MoeFp8, ExpansionIsExactWithinTheContract) {
  const int64_t rows = 8, cols = 256;
  uint64_t s = 99;
  std::vector<uint8_t> codes(size_t(rows * cols / 2)), sc(size_t(rows * cols / 32));
  for (auto& c : codes) c = uint8_t(next(s));
  for (int64_t block : {64, 128}) {
    for (int spread : {0, 5, 14, 20}) {
      for (size_t i = 0; i < sc.size(); ++i) sc[i] = uint8_t(110 + (i % 2 ? spread : 0) * ((i / 2) % 2 ? 1 : 0));
      std::vector<float> deq(size_t(rows * cols));
      dsinfer::io::dequant_fp4_e2m1(codes.data(), rows, cols, sc.data(), dsinfer::DType::F8_E8M0, 32, deq.data());
      const ops::Fp8Weight w = ops::expand_fp4_weight_ref(codes.data(), sc.data(), rows, cols, block);
      int64_t differ = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
          const float got =
              dsinfer::e4m3_to_f32(w.q[size_t(r * cols + k)]) * w.s[size_t(r * (cols / block) + k / block)];
          const float want = deq[size_t(r * cols + k)];
          if (got != want) {
            ++differ;
            EXPECT_LE(std::fabs(got - want), 6.0f * std::ldexp(1.0f, 110 - 127)) << "only the small group may round";
          }
        }
      if (spread <= 14)
        EXPECT_EQ(differ, 0) << "block " << block << " spread " << spread;
      else
        EXPECT_GT(differ, 0) << "block " << block << " spread " << spread << ": the check must be able to fail";
    }
  }
}

// 1 x block quantization: q * s within half an e4m3 step of x (relative 2^-4 for normals, 2^-10 * s below), the block's
// largest magnitude lands on 448, an all-zero block gives zeros.
TEST(MoeFp8, ActivationQuantization) {
  for (int64_t blk : {64, 128}) {
    uint64_t s = 7;
    std::vector<float> x(256);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (float(next(s) % 20001) / 10000.0f - 1.0f) * (i < 64 ? 1e-3f : 30.0f);
    for (size_t i = 128; i < 192; ++i) x[i] = 0.0f;
    std::vector<uint8_t> q(x.size());
    std::vector<float> sc(x.size() / size_t(blk));
    ops::quantize_e4m3_ref(x.data(), int64_t(x.size()), blk, q.data(), sc.data());
    if (blk == 64) {
      EXPECT_EQ(sc[2], 0.0f);
    }
    const size_t B = size_t(blk);
    for (size_t b = 0; b < sc.size(); ++b) {
      float amax = 0.0f;
      for (size_t i = B * b; i < B * b + B; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = B * b; i < B * b + B; ++i) {
        const float d = dsinfer::e4m3_to_f32(q[i]) * sc[b];
        EXPECT_LE(std::fabs(d - x[i]), std::max(std::ldexp(std::fabs(x[i]), -4), std::ldexp(sc[b], -10)) * 1.0001f);
        if (amax > 0.0f && std::fabs(x[i]) == amax) {
          EXPECT_EQ(std::fabs(dsinfer::e4m3_to_f32(q[i])), 448.0f);
        }
      }
    }
  }
}

// The FP8 dot product of two quantized rows against the double dot of their dequantized values.
TEST(MoeFp8, DotOfQuantizedRows) {
  uint64_t s = 3;
  const int64_t n = 192;
  std::vector<uint8_t> qa(static_cast<size_t>(n)), qb(static_cast<size_t>(n));
  std::vector<float> sa(3), sb(3);
  for (int64_t i = 0; i < n; ++i) {
    qa[size_t(i)] = uint8_t(next(s) % 0x7E);
    qb[size_t(i)] = uint8_t(0x80 | (next(s) % 0x7E));
  }
  for (int b = 0; b < 3; ++b) {
    sa[size_t(b)] = 0.01f * float(b + 1);
    sb[size_t(b)] = std::ldexp(1.0f, -b);
  }
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i)
    want += double(dsinfer::e4m3_to_f32(qa[size_t(i)])) * sa[size_t(i / 64)] *
            double(dsinfer::e4m3_to_f32(qb[size_t(i)])) * sb[size_t(i / 64)];
  EXPECT_NEAR(ops::fp8_dot_ref(qa.data(), sa.data(), qb.data(), sb.data(), n, 64), want, std::fabs(want) * 1e-12);
}

}  // namespace
