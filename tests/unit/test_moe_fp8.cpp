// CPU checks of the FP8 grouped MoE path's numeric contract (ops/moe/moe_fp8_common.h, shared with moe_grouped_fp8.cu)
// and its CPU reference (ops/moe/moe_fp8.h), each against an independent implementation: the FP4 -> e4m3 code expansion
// against core/dtypes' e4m3 encoder for every code and scale offset; the expanded weights times their block scales
// against io::dequant_fp4_e2m1 (bitwise where the contract says exact); the 1x64 activation quantization and its
// second (lo) term against their error bounds; the block scale bits against ldexp; and the per-stage numerics study
// (one vs two e4m3 terms for x and h against the exact expert and the bf16 numerics) that chose two terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/dtypes.h"
#include "io/quant.h"
#include "ops/moe/moe.h"
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
  EXPECT_NEAR(ops::fp8_dot_ref(qa.data(), nullptr, sa.data(), qb.data(), sb.data(), n, 64), want,
              std::fabs(want) * 1e-12);
}

// The two-term quantization: s * (hi + lo) within 2^-7 of x relative (2^-4 of the residual, itself <= 2^-4 of x) or
// 2^-9 * s absolute (e4m3 subnormals), and never worse than the one-term q.
TEST(MoeFp8, TwoTermQuantization) {
  uint64_t s = 11;
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float(next(s) % 20001) / 10000.0f - 1.0f) * (i < 128 ? 1e-3f : 30.0f);
  std::vector<uint8_t> q(x.size()), lo(x.size()), q1(x.size());
  std::vector<float> sc(x.size() / 128), sc1(sc.size());
  ops::quantize_e4m3_ref(x.data(), int64_t(x.size()), 128, q.data(), sc.data(), lo.data());
  ops::quantize_e4m3_ref(x.data(), int64_t(x.size()), 128, q1.data(), sc1.data());
  double e1 = 0.0, e2 = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(q[i], q1[i]) << "the first term is the one-term code";
    const float sb = sc[i / 128];
    const float d = (dsinfer::e4m3_to_f32(q[i]) + dsinfer::e4m3_to_f32(lo[i])) * sb;
    EXPECT_LE(std::fabs(d - x[i]), std::max(std::ldexp(std::fabs(x[i]), -7), std::ldexp(sb, -9)) * 1.0001f) << i;
    e1 += std::pow(double(dsinfer::e4m3_to_f32(q[i]) * sb - x[i]), 2);
    e2 += std::pow(double(d - x[i]), 2);
  }
  EXPECT_LT(e2, e1 / 64.0) << "the second term must remove most of the first's error";
}

// Per-stage error of the FP8 numerics against the exact expert (fp32 activations, exact FP4 weights) at V4-like
// ratios (D 1024, I 512, clamp 10, unit-variance x with a few 8x outlier channels), beside the bf16 numerics of the
// Fast / Grouped paths (x and h rounded to bf16), which pass the fidelity gate. Measured (normalised L2 over 32
// tokens): one term each 3.56e-2 (two terms for x only 2.07e-2, for h only 2.89e-2), two terms each 8.6e-4, bf16
// 3.06e-3. Bounds: one term > 1.5e-2 (2.4x margin: the study must show the problem), two terms below bf16 (3.6x
// margin) and below one term / 8 (41x measured). This is why the kernels quantize x and h to two e4m3 terms
// (bench/NOTES.md, issue 30, second session).
TEST(MoeFp8, TwoTermsMatchBf16Numerics) {
  const int64_t D = 1024, I = 512, tokens = 32;
  uint64_t s = 5;
  auto weight = [&](int64_t rows, int64_t cols, std::vector<float>& deq, int64_t block) {
    std::vector<uint8_t> codes(size_t(rows * cols / 2)), sc(size_t(rows * cols / 32));
    for (auto& c : codes) c = uint8_t(next(s));
    for (auto& e : sc) e = uint8_t(118 + next(s) % 3);
    deq.resize(size_t(rows * cols));
    dsinfer::io::dequant_fp4_e2m1(codes.data(), rows, cols, sc.data(), dsinfer::DType::F8_E8M0, 32, deq.data());
    return ops::expand_fp4_weight_ref(codes.data(), sc.data(), rows, cols, block);
  };
  std::vector<float> d1, d3, d2;
  const ops::Fp8Weight w1 = weight(I, D, d1, md::kFp8BlockGateUp), w3 = weight(I, D, d3, md::kFp8BlockGateUp);
  const ops::Fp8Weight w2 = weight(D, I, d2, md::kFp8BlockDown);
  const float limit = 10.0f;
  std::vector<float> x(size_t(tokens * D));
  for (size_t i = 0; i < x.size(); ++i) {
    float g = 0.0f;  // ~unit variance: sum of 4 uniforms
    for (int k = 0; k < 4; ++k) g += float(next(s) % 20001) / 10000.0f - 1.0f;
    x[i] = g * 0.866f * ((i % size_t(D)) % 97 == 0 ? 8.0f : 1.0f);
  }
  // reference numerics: exact, and bf16 x / h (as the Fast and Grouped paths)
  std::vector<double> exact(x.size(), 0.0), bf(x.size(), 0.0);
  std::vector<float> xb(static_cast<size_t>(D)), h(static_cast<size_t>(I));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * D;
    ops::expert_accumulate_ref({d1.data(), d3.data(), d2.data(), D, I, limit}, xt, 1.0f, exact.data() + t * D);
    for (int64_t k = 0; k < D; ++k) xb[size_t(k)] = dsinfer::round_bf16(xt[k]);
    for (int64_t j = 0; j < I; ++j) {
      float g = 0.0f, u = 0.0f;
      for (int64_t k = 0; k < D; ++k) {
        g += xb[size_t(k)] * d1[size_t(j * D + k)];
        u += xb[size_t(k)] * d3[size_t(j * D + k)];
      }
      g = std::min(g, limit);
      u = std::min(std::max(u, -limit), limit);
      h[size_t(j)] = dsinfer::round_bf16(g / (1.0f + std::exp(-g)) * u);
    }
    for (int64_t d = 0; d < D; ++d) {
      float y = 0.0f;
      for (int64_t j = 0; j < I; ++j) y += h[size_t(j)] * d2[size_t(d * I + j)];
      bf[size_t(t * D + d)] = y;
    }
  }
  auto nerr = [&](const std::vector<double>& a) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - exact[i]) * (a[i] - exact[i]);
      den += exact[i] * exact[i];
    }
    return std::sqrt(num / den);
  };
  auto fp8 = [&](int xt, int ht) {
    std::vector<double> out(x.size(), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      ops::ExpertFp8Params p{&w1, &w3, &w2, limit};
      p.x_terms = xt;
      p.h_terms = ht;
      ops::expert_fp8_accumulate_ref(p, x.data() + t * D, 1.0f, out.data() + t * D);
    }
    return nerr(out);
  };
  const double e11 = fp8(1, 1), e21 = fp8(2, 1), e12 = fp8(1, 2), e22 = fp8(2, 2), eb = nerr(bf);
  std::printf("[fp8 numerics] vs exact: x1h1 %.3g x2h1 %.3g x1h2 %.3g x2h2 %.3g bf16 %.3g\n", e11, e21, e12, e22, eb);
  EXPECT_GT(e11, 1.5e-2) << "one e4m3 term: ~2.5 % relative noise per quantization";
  EXPECT_LT(e22, eb) << "two terms: no worse than the bf16 numerics that pass the fidelity gate";
  EXPECT_LT(e22, e11 / 8.0);
  EXPECT_LT(e21, e11) << "x's second term alone helps";
  EXPECT_LT(e12, e11) << "h's second term alone helps";
}

// bf16_out (the CUTLASS path's GEMM outputs): g, u and y rounded to bf16. With scale 1 into a zeroed row the
// accumulated outputs are y itself, so each must be a bf16 value; against the fp32 outputs the change is the bf16
// roundings (2^-9 relative) plus the h elements whose e4m3 rounding they flip (~1 in 16 lies within 2^-9 of a
// rounding boundary, each flip one e4m3 step): measured 9.9e-3 here (fixed inputs; one e4m3 term alone is 3.6e-2 from
// exact, so ~+4 % in quadrature); bound 2e-2, and it must not be zero (the option has to do something).
TEST(MoeFp8, Bf16OutputsOfTheCutlassPath) {
  const int64_t D = 512, I = 256, tokens = 8;
  uint64_t s = 11;
  auto weight = [&](int64_t rows, int64_t cols) {
    std::vector<uint8_t> codes(size_t(rows * cols / 2)), sc(size_t(rows * cols / 32));
    for (auto& c : codes) c = uint8_t(next(s));
    for (auto& e : sc) e = uint8_t(118 + next(s) % 3);
    return ops::expand_fp4_weight_ref(codes.data(), sc.data(), rows, cols, 128);
  };
  const ops::Fp8Weight w1 = weight(I, D), w3 = weight(I, D), w2 = weight(D, I);
  std::vector<float> x(size_t(tokens * D));
  for (auto& v : x) v = float(next(s) % 20001) / 10000.0f - 1.0f;
  double num = 0.0, den = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> f32(size_t(D), 0.0), b16(size_t(D), 0.0);
    ops::expert_fp8_accumulate_ref({&w1, &w3, &w2, 10.0f, 1, 1, false}, x.data() + t * D, 1.0f, f32.data());
    ops::expert_fp8_accumulate_ref({&w1, &w3, &w2, 10.0f, 1, 1, true}, x.data() + t * D, 1.0f, b16.data());
    for (int64_t d = 0; d < D; ++d) {
      const float v = float(b16[size_t(d)]);
      EXPECT_EQ(double(v), b16[size_t(d)]);
      EXPECT_EQ(dsinfer::round_bf16(v), v) << "token " << t << " output " << d << " is not a bf16 value";
      num += (b16[size_t(d)] - f32[size_t(d)]) * (b16[size_t(d)] - f32[size_t(d)]);
      den += f32[size_t(d)] * f32[size_t(d)];
    }
  }
  const double rel = std::sqrt(num / den);
  std::printf("[fp8 numerics] bf16 outputs vs fp32 outputs: %.3g\n", rel);
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 2e-2);
}

}  // namespace
