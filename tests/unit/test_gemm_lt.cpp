// CPU checks of the cuBLASLt engine's activation quantization (ops/gemm/gemm_lt_quant.h, shared with the kernel):
// the e4m3 encoder against the decoder for every code, the power-of-two scale against ops::pow2_ceil_scale, and
// the host reference dequantized against ops::fp8_qat_ref (the official act_quant simulation) bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/small_float.h"
#include "ops/gemm/gemm_lt_quant.h"
#include "ops/qat/qat.h"

namespace {

namespace lt = dsinfer::ops::gemm_lt;
namespace sf = dsinfer::small_float;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GemmLtQuant, E4m3EncoderInvertsDecoder) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = sf::from_bits(sf::e4m3_f32_bits(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_EQ(lt::e4m3_code(v) & 0x7F, 0x7F) << "NaN code " << c;
      continue;
    }
    EXPECT_EQ(lt::e4m3_code(v), c) << "code " << c << " value " << v;
  }
}

TEST(GemmLtQuant, ScaleIsPow2CeilOfAmaxOver448) {
  for (float amax : {0.0f, 1e-7f, 1e-4f, 0.0447f, 1.0f, 3.5f, 448.0f, 449.0f, 896.0f, 1e6f, 7.0e30f}) {
    const float s = lt::act_scale(amax);
    EXPECT_EQ(s, dsinfer::ops::pow2_ceil_scale(std::fmax(amax, 1e-4f) * (1.0f / 448.0f))) << amax;
    EXPECT_EQ(bits(s) & 0x7FFFFFu, 0u) << "power of two, amax " << amax;
    EXPECT_LE(std::fmax(amax, 1e-4f) / s, 448.0f * (1.0f + 1e-6f)) << amax;  // the block fits the e4m3 range
    EXPECT_GT(std::fmax(amax, 1e-4f) / s, 224.0f * (1.0f - 1e-6f)) << amax;  // and uses at least half of it
  }
}

// Rows with blocks of very different magnitudes (zeros, tiny, subnormal e4m3 codes, exact powers of two, values
// near +-448 s, negative zero): the dequantized codes must equal the official act_quant simulation bit for bit.
TEST(GemmLtQuant, RefMatchesOfficialActQuantSimulation) {
  const int64_t M = 5, K = 512, ldx = 520, kb = K / 128;
  std::vector<float> x(size_t(M * ldx), 0.0f);
  uint64_t st = 12345;
  auto uni = [&] {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return float(st >> 40) / float(1 << 24) * 2.0f - 1.0f;
  };
  const float mags[] = {0.0f, 1e-9f, 3e-4f, 1.0f, 7.5f, 300.0f, 2.0e5f};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < kb; ++b) {
      const float mag = mags[size_t(m * kb + b) % 7];
      for (int64_t i = 0; i < 128; ++i) x[size_t(m * ldx + b * 128 + i)] = mag * uni();
    }
  x[size_t(1 * ldx + 5)] = 4.0f;                 // an exact power of two as the block maximum
  x[size_t(1 * ldx + 6)] = -0.0f;
  x[size_t(2 * ldx + 130)] = 448.0f * 1024.0f;  // amax / 448 exactly a power of two
  x[size_t(3 * ldx + 260)] = std::nextafter(1.0f, 2.0f) * 300.0f;
  std::vector<uint8_t> q(size_t(M * K)), q2(size_t(M * K)), q1(size_t(M * K));
  std::vector<float> s(size_t(M * kb)), s2(size_t(M * kb)), s1(size_t(M * kb));
  lt::quantize_ref(x.data(), M, ldx, K, q.data(), s.data(), q2.data(), s2.data());
  lt::quantize_ref(x.data(), M, ldx, K, q1.data(), s1.data());  // one term: the same first term
  EXPECT_EQ(q1, q);
  EXPECT_EQ(s1, s);
  for (int64_t m = 0; m < M; ++m) {
    // First term: act_quant(x). Second term: act_quant(x - first term), the remainder computed in fp32.
    std::vector<float> hi(x.begin() + m * ldx, x.begin() + m * ldx + K), lo(static_cast<size_t>(K));
    dsinfer::ops::fp8_qat_ref(hi.data(), K, 128);
    for (int64_t k = 0; k < K; ++k) lo[size_t(k)] = x[size_t(m * ldx + k)] - hi[size_t(k)];
    dsinfer::ops::fp8_qat_ref(lo.data(), K, 128);
    double err1 = 0, err2 = 0, norm = 0;
    for (int64_t k = 0; k < K; ++k) {
      const size_t i = size_t(m * K + k), j = size_t(m * kb + k / 128);
      const float got = sf::from_bits(sf::e4m3_f32_bits(q[i])) * s[j];
      const float got2 = sf::from_bits(sf::e4m3_f32_bits(q2[i])) * s2[j];
      ASSERT_EQ(bits(got), bits(hi[size_t(k)])) << "m=" << m << " k=" << k << " x=" << x[size_t(m * ldx + k)];
      ASSERT_EQ(bits(got2), bits(lo[size_t(k)])) << "second term, m=" << m << " k=" << k;
      const double xv = x[size_t(m * ldx + k)];
      err1 += (xv - got) * (xv - got);
      err2 += (xv - got - got2) * (xv - got - got2);
      norm += xv * xv;
    }
    // The second term cuts the error from e4m3's ~2^-4 relative to ~2^-8.
    EXPECT_LT(std::sqrt(err2 / norm), 0.2 * std::sqrt(err1 / norm) + 1e-30) << "row " << m;
    EXPECT_LT(std::sqrt(err2 / norm), std::ldexp(1.0, -7)) << "row " << m;
  }
}

TEST(GemmLtQuant, SaturatesAndKeepsNaN) {
  EXPECT_EQ(lt::quantize(1000.0f, 1.0f), lt::e4m3_code(448.0f));
  EXPECT_EQ(lt::quantize(-1000.0f, 1.0f), lt::e4m3_code(-448.0f));
  EXPECT_EQ(lt::quantize(NAN, 1.0f) & 0x7F, 0x7F);
  EXPECT_EQ(lt::quantize(0.001953125f, 1.0f), 0x01);  // 2^-9: the smallest subnormal code
}

}  // namespace

// cuBLASLt's documented scale layouts (cuBLAS docs 3.1.4.5.1), as the kernels index them: VEC128_32F activation
// scales token-major (block b of token m at b * M + m), BLK128x128_32F weight scales K-major in rows of
// ceil(K/128) rounded up to 4.
TEST(GemmLtLayout, IndexHelpersFollowTheDocumentedLayouts) {
  EXPECT_EQ(lt::wscale_ld(1), 4);
  EXPECT_EQ(lt::wscale_ld(2), 4);
  EXPECT_EQ(lt::wscale_ld(4), 4);
  EXPECT_EQ(lt::wscale_ld(5), 8);
  EXPECT_EQ(lt::wscale_ld(64), 64);  // wo_b: K = 8192
  EXPECT_EQ(lt::act_scale_index(0, 0, 64), 0);
  EXPECT_EQ(lt::act_scale_index(1, 0, 64), 1);   // consecutive tokens are adjacent
  EXPECT_EQ(lt::act_scale_index(0, 1, 64), 64);  // the next K block starts after all M tokens
  EXPECT_EQ(lt::wscale_index(1, 0, 4), 4);
  EXPECT_EQ(lt::wscale_index(2, 3, 8), 19);
}

TEST(GemmLtLayout, ActivationScalesTransposedAndPadded) {
  const int64_t M = 5, kb = 3, s_ld = 8;
  std::vector<float> s(size_t(M * kb)), t(size_t(kb * s_ld), -1.0f);
  for (size_t i = 0; i < s.size(); ++i) s[i] = float(i + 1);  // s[m * kb + b] = m * kb + b + 1
  lt::act_scales_to_lt_ref(s.data(), M, kb, t.data(), s_ld);
  for (int64_t b = 0; b < kb; ++b)
    for (int64_t m = 0; m < s_ld; ++m)
      EXPECT_EQ(t[size_t(b * s_ld + m)], m < M ? float(m * kb + b + 1) : 0.0f) << "token " << m << " block " << b;
}

TEST(GemmLtLayout, WeightScalesPaddedRowsE8m0AndF32) {
  const int64_t nb = 2, kb = 3, ld = lt::wscale_ld(kb);
  const std::vector<uint8_t> e8 = {127, 128, 126, 130, 117, 127};  // 1, 2, 0.5, 8, 2^-10, 1
  std::vector<float> got(size_t(nb * ld), -1.0f);
  lt::weight_scales_to_lt_ref(e8.data(), true, nb, kb, got.data(), ld);
  const std::vector<float> want = {1.0f, 2.0f, 0.5f, 0.0f, 8.0f, std::ldexp(1.0f, -10), 1.0f, 0.0f};
  EXPECT_EQ(got, want);
  const std::vector<float> f = {0.5f, 0.25f, 3.0f, -1.0f, 7.0f, 0.125f};
  lt::weight_scales_to_lt_ref(f.data(), false, nb, kb, got.data(), ld);
  EXPECT_EQ(got, (std::vector<float>{0.5f, 0.25f, 3.0f, 0.0f, -1.0f, 7.0f, 0.125f, 0.0f}));
}
