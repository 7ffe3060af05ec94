// CPU checks of the FP8 skinny wgmma GEMM's host side (session 24; the kernel itself: tests/gpu/
// test_gemm_fp8_skinny_gpu.cpp): the setting DSINFER_GEMM_FP8_SKINNY and the routing it adds to the runner's plans
// (by default the measured cells only; fast mode only; 1..256 rows; never in a segments launch), the launch shapes
// at the V4-Flash shapes and the invariants the kernel relies on for every M (whole tokens covered, the token layout's rows, K split
// evenly, one item per cluster, the ring and the split-K partial tile in 227 KB), and the host references (the
// quantization in the token layout = the cuBLASLt engine's reference rearranged; the fp64 GEMM = the dequantized
// operands' product).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/small_float.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_fp8_skinny_ref.h"
#include "ops/gemm/gemm_lt_quant.h"
#include "ops/gemm/gemm_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::ops::KernelMode;
namespace od = dsinfer::ops::cuda::detail;
namespace lt = dsinfer::ops::gemm_lt;
namespace sk = dsinfer::ops::gemm_fp8sk;

namespace {

constexpr int kSms = 132;  // H200

DeviceWeight fp8(int64_t N, int64_t K) {
  DeviceWeight w;
  w.fmt = WeightFormat::FP8_BLOCK;
  w.rows = N;
  w.cols = K;
  w.data = reinterpret_cast<const void*>(uintptr_t(1) << 20);
  w.scale = reinterpret_cast<const void*>(uintptr_t(1) << 21);
  return w;
}

GemmSettings with_skinny(const char* v) {
  auto s = gemm_settings_from(nullptr, nullptr, nullptr, nullptr, nullptr, v);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? s.value() : GemmSettings{};
}

TEST(GemmFp8Skinny, SettingDefaultsToTheMeasuredCells) {
  EXPECT_EQ(GemmSettings{}.fp8_skinny, GemmFp8Skinny::kAuto);
  EXPECT_EQ(with_skinny(nullptr).fp8_skinny, GemmFp8Skinny::kAuto);
  EXPECT_EQ(with_skinny("").fp8_skinny, GemmFp8Skinny::kAuto);
  EXPECT_EQ(with_skinny("auto").fp8_skinny, GemmFp8Skinny::kAuto);
  EXPECT_EQ(with_skinny("0").fp8_skinny, GemmFp8Skinny::kOff);
  EXPECT_EQ(with_skinny("1").fp8_skinny, GemmFp8Skinny::kTwoTerms);
  EXPECT_EQ(with_skinny("fp8x2").fp8_skinny, GemmFp8Skinny::kTwoTerms);
  EXPECT_EQ(with_skinny("fp8").fp8_skinny, GemmFp8Skinny::kOneTerm);
  EXPECT_FALSE(gemm_settings_from(nullptr, nullptr, nullptr, nullptr, nullptr, "yes").is_ok());
}

TEST(GemmFp8Skinny, RoutingWhereMeasuredOrAskedFor) {
  const DeviceWeight wq_a = fp8(1024, 4096), wq_b = fp8(32768, 1024), wo_b = fp8(4096, 8192), wo_a = fp8(8192, 4096);
  const GemmSettings on = with_skinny("1"), one = with_skinny("fp8"), off = with_skinny("0");
  for (int64_t M : {1, 8, 16, 17, 64, 65, 128, 129, 256}) {
    // the default (kAuto): the cells of gemm_fp8_skinny_auto's comment, two terms
    const bool verify_rows = M <= kGemmGemvMaxM;
    EXPECT_EQ(plan_gemm_call(wq_b, M, KernelMode::kFast, GemmSettings{}).fp8_skinny_terms, verify_rows ? 0 : 2) << M;
    EXPECT_EQ(plan_gemm_call(wq_a, M, KernelMode::kFast, GemmSettings{}).fp8_skinny_terms, M > 128 ? 2 : 0) << M;
    EXPECT_EQ(plan_gemm_call(wo_b, M, KernelMode::kFast, GemmSettings{}).fp8_skinny_terms, 0) << M;
    EXPECT_EQ(plan_gemm_grouped_call(wo_a, 8, M, KernelMode::kFast, GemmSettings{}).fp8_skinny_terms,
              verify_rows ? 0 : 2)
        << M;
    for (const DeviceWeight* w : {&wq_a, &wq_b, &wo_b}) {
      EXPECT_EQ(plan_gemm_call(*w, M, KernelMode::kFast, off).fp8_skinny_terms, 0) << "off: the other routes";
      EXPECT_EQ(plan_gemm_call(*w, M, KernelMode::kFast, on).fp8_skinny_terms, 2) << M;
      EXPECT_EQ(plan_gemm_call(*w, M, KernelMode::kFast, one).fp8_skinny_terms, 1) << M;
      for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault, KernelMode::kBatchInvariant})
        EXPECT_EQ(plan_gemm_call(*w, M, m, on).fp8_skinny_terms, 0) << "fast mode only";
    }
    EXPECT_EQ(plan_gemm_grouped_call(wo_a, 8, M, KernelMode::kFast, on).fp8_skinny_terms, 2) << M;
    EXPECT_EQ(plan_gemm_grouped_call(wo_a, 8, M, KernelMode::kFast, off).fp8_skinny_terms, 0);
    for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault, KernelMode::kBatchInvariant})
      EXPECT_EQ(plan_gemm_call(wq_b, M, m, GemmSettings{}).fp8_skinny_terms, 0) << "fast mode only";
  }
  EXPECT_EQ(plan_gemm_call(wq_a, 257, KernelMode::kFast, on).fp8_skinny_terms, 0) << "decode sizes only";
  DeviceWeight odd = fp8(1024, 4000);
  EXPECT_EQ(plan_gemm_call(odd, 64, KernelMode::kFast, on).fp8_skinny_terms, 0) << "K % 128";
  odd = fp8(1024, 4096);
  odd.block_n = 64;
  EXPECT_EQ(plan_gemm_call(odd, 64, KernelMode::kFast, on).fp8_skinny_terms, 0) << "128 x 128 blocks";
  EXPECT_EQ(plan_gemm_grouped_call(fp8(8 * 192, 4096), 8, 64, KernelMode::kFast, on).fp8_skinny_terms, 0)
      << "whole 128-row tiles per group";
  // wq_a + wkv: one streaming segments launch where the kernel is not taken, separate skinny calls where it is
  const DeviceWeight wkv = fp8(512, 4096);
  const DeviceWeight* segs[] = {&wq_a, &wkv};
  EXPECT_TRUE(plan_gemm_segments(segs, 2, 64, KernelMode::kFast, GemmSettings{}, kSms).one_launch);
  EXPECT_FALSE(plan_gemm_segments(segs, 2, 64, KernelMode::kFast, on, kSms).one_launch);
}

od::Fp8SkinnyParams plan(int64_t M, int64_t N, int64_t K, int64_t groups = 1, int terms = 2) {
  od::Fp8SkinnyParams p;
  EXPECT_TRUE(plan_gemm_fp8_skinny(M, N, K, groups, terms, kSms, p)) << M << " " << N << " " << K;
  return p;
}

TEST(GemmFp8Skinny, LaunchShapesAtFlashShapes) {
  od::Fp8SkinnyParams p = plan(1, 1024, 4096);  // wq_a, decode: 8 row tiles x 8 K splits
  EXPECT_EQ(p.tok, 8);
  EXPECT_EQ(p.wg_rows, 2);
  EXPECT_EQ(p.splits, 8);
  EXPECT_EQ(p.kb_per_split, 4);
  EXPECT_EQ(p.grid, 64);
  EXPECT_EQ(p.stages, 8);
  p = plan(256, 1024, 4096);  // 64 rows x 256 tokens a CTA; clusters of 4 on half the SMs
  EXPECT_EQ(p.tok, 128);
  EXPECT_EQ(p.wg_rows, 1);
  EXPECT_EQ(p.units, 2);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.grid, 64);
  EXPECT_EQ(p.stages, 3);
  p = plan(64, 32768, 1024);  // wq_b: 256 items, persistent
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.grid, 128);
  p = plan(64, 4096, 8192);  // wo_b: 32 items x 2 splits of 32 blocks (clusters of 4 would take 128 SMs)
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.kb_per_split, 32);
  EXPECT_EQ(p.grid, 64);
  p = plan(256, 4096, 8192);  // 64 items x 2 splits
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.grid, 128);
  p = plan(64, 1024, 4096, 8);  // wo_a: 8 groups x 8 row tiles x 2 splits
  EXPECT_EQ(p.items, 64);
  EXPECT_EQ(p.splits, 2);
  p = plan(256, 1024, 4096, 8);
  EXPECT_EQ(p.items, 128);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.grid, 128);
  od::Fp8SkinnyParams q;
  EXPECT_FALSE(plan_gemm_fp8_skinny(257, 1024, 4096, 1, 2, kSms, q));
  EXPECT_FALSE(plan_gemm_fp8_skinny(1, 1024, 4000, 1, 2, kSms, q));
  EXPECT_FALSE(plan_gemm_fp8_skinny(1, 1000, 4096, 8, 2, kSms, q));
  EXPECT_FALSE(plan_gemm_fp8_skinny(1, 1024, 4096, 1, 3, kSms, q));
  // A split holds at most 128 x kFp8SkWsRegs blocks (the consumers' scale registers): 256 items keep one split, so
  // K = 32,768 (256 blocks) is taken and K = 32,896 (257) is not.
  EXPECT_TRUE(plan_gemm_fp8_skinny(64, 32768, 128 * 128 * od::kFp8SkWsRegs, 1, 2, kSms, q));
  EXPECT_EQ(q.kb_per_split, 128 * od::kFp8SkWsRegs);
  EXPECT_FALSE(plan_gemm_fp8_skinny(64, 32768, 128 * (128 * od::kFp8SkWsRegs + 1), 1, 2, kSms, q));
}

TEST(GemmFp8Skinny, LaunchShapeAtAGivenLayout) {
  // plan_gemm_fp8_skinny is plan_gemm_fp8_skinny_at at its own layout choice and the full split cap.
  for (int64_t M : {1, 8, 64, 100, 128, 129, 256}) {
    od::Fp8SkinnyParams a, b;
    ASSERT_TRUE(plan_gemm_fp8_skinny(M, 4096, 8192, 1, 2, kSms, a));
    ASSERT_TRUE(plan_gemm_fp8_skinny_at(M, 4096, 8192, 1, 2, kSms, a.wg_rows, a.tok, kGemmFp8SkinnyMaxSplits, b));
    EXPECT_EQ(a.splits, b.splits);
    EXPECT_EQ(a.grid, b.grid);
    EXPECT_EQ(a.stages, b.stages);
    EXPECT_EQ(a.smem, b.smem);
  }
  // wo_b at 64 rows on 64-row tiles (two units of 32 tokens): 64 items x 2 splits fill 128 SMs.
  od::Fp8SkinnyParams p;
  ASSERT_TRUE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 1, 32, kGemmFp8SkinnyMaxSplits, p));
  EXPECT_EQ(p.units, 2);
  EXPECT_EQ(p.items, 64);
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.grid, 128);
  ASSERT_TRUE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 1, 32, 1, p));  // the cap binds
  EXPECT_EQ(p.splits, 1);
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 3, 32, 8, p));   // layout
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 2, 48, 8, p));   // not a power of two
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 1, kSms, 2, 8, 8, p));    // one term starts at 16
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 2, 256, 8, p));  // above 128
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 2, 64, 0, p));   // split cap
  EXPECT_FALSE(plan_gemm_fp8_skinny_at(64, 4096, 8192, 1, 2, kSms, 2, 64, 16, p));
}

TEST(GemmFp8Skinny, LaunchShapeInvariantsEveryM) {
  struct S {
    int64_t N, K, groups;
  };
  for (const S& s : {S{1024, 4096, 1}, S{512, 4096, 1}, S{32768, 1024, 1}, S{4096, 8192, 1}, S{1024, 4096, 8},
                     S{200, 384, 1}, S{64, 128, 1}})
    for (int terms : {1, 2})
      for (int64_t M = 1; M <= kGemmFp8SkinnyMaxM; ++M) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " K=" << s.K << " groups=" << s.groups << " terms=" << terms
                                        << " M=" << M);
        const od::Fp8SkinnyParams p = plan(M, s.N, s.K, s.groups, terms);
        const int halves = 2 / p.wg_rows;
        EXPECT_TRUE(p.tok == 8 || p.tok == 16 || p.tok == 32 || p.tok == 64 || p.tok == 128);
        EXPECT_TRUE(terms == 2 || p.tok >= 16) << "one-term instances start at 16 tokens";
        EXPECT_LE(terms * p.tok, 256) << "wgmma N";
        EXPECT_GE(int64_t(p.units) * p.tok, M) << "every token in a unit";
        EXPECT_EQ(p.units, p.token_tiles * halves);
        EXPECT_EQ(p.items, p.row_tiles * p.token_tiles);
        EXPECT_GE(p.row_tiles * 64 * p.wg_rows, s.N * s.groups);
        EXPECT_EQ(int64_t(p.kb_per_split) * p.splits, s.K / 128) << "K split evenly";
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, kGemmFp8SkinnyMaxSplits);
        if (p.splits > 1) {
          EXPECT_EQ(p.grid, p.items * p.splits) << "one item per cluster";
          EXPECT_LE(p.grid, p.splits <= 2 ? kSms : kSms / 2) << "every cluster resident";
          EXPECT_GE(p.stages * od::fp8sk_stage_bytes(terms, p.tok, p.wg_rows), od::fp8sk_partial_bytes(p.tok))
              << "the partial tile over the ring";
        } else {
          EXPECT_LE(p.grid, kSms);
          EXPECT_GE(p.grid * ((p.items + p.grid - 1) / p.grid), p.items);
        }
        EXPECT_GE(p.stages, 2);
        EXPECT_LE(p.smem, kGemmFp8SkinnySmemMax);
        EXPECT_GE(p.smem, 1024 + p.stages * od::fp8sk_stage_bytes(terms, p.tok, p.wg_rows) + 16 * p.stages +
                              8 * p.kb_per_split);
        EXPECT_EQ(od::fp8sk_stage_bytes(terms, p.tok, p.wg_rows) % 1024, 0);
        EXPECT_EQ(od::fp8sk_stage_w(p.wg_rows) % 1024, 0);
        EXPECT_EQ((terms * p.tok * 128) % 1024, 0) << "each unit's activation tile 1024-aligned";
      }
}

std::vector<float> activations(int64_t M, int64_t ldx, uint64_t seed) {
  std::vector<float> x(size_t(M * ldx));
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  const float mags[] = {1e-3f, 0.1f, 1.0f, 30.0f};
  for (size_t i = 0; i < x.size(); ++i) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    x[i] = mags[(i / 128) % 4] * (float(r >> 40) / 8388608.0f - 1.0f);
  }
  return x;
}

TEST(GemmFp8Skinny, QuantizeRefIsTheEnginesQuantizationRearranged) {
  const int64_t M = 13, K = 256, G = 2, ldx = G * K + 3;
  const std::vector<float> x = activations(M, ldx, 7);
  for (int terms : {1, 2}) {
    const int tok = 16, units = 1;
    std::vector<uint8_t> q;
    std::vector<float> s;
    sk::quantize_ref(x.data(), M, ldx, K, G, K, terms, tok, units, q, s);
    const int64_t rows = int64_t(units) * terms * tok, kt = G * K;
    ASSERT_EQ(q.size(), size_t(rows * kt));
    for (int64_t g = 0; g < G; ++g) {
      std::vector<uint8_t> q1(size_t(M * K)), q2(size_t(M * K));
      std::vector<float> s1(size_t(M * K / 128)), s2(size_t(M * K / 128));
      lt::quantize_ref(x.data() + g * K, M, ldx, K, q1.data(), s1.data(), q2.data(), s2.data());
      for (int64_t m = 0; m < tok; ++m)
        for (int t = 0; t < terms; ++t) {
          const int64_t r = od::fp8sk_row(m, t, terms, tok);
          for (int64_t k = 0; k < K; ++k)
            ASSERT_EQ(q[size_t(r * kt + g * K + k)], m < M ? (t ? q2 : q1)[size_t(m * K + k)] : 0) << m << " " << k;
          for (int64_t b = 0; b < K / 128; ++b)
            ASSERT_EQ(s[size_t((g * K / 128 + b) * rows + r)], m < M ? (t ? s2 : s1)[size_t(m * K / 128 + b)] : 0.0f);
        }
    }
  }
}

TEST(GemmFp8Skinny, GemmRefIsTheDequantizedProduct) {
  const int64_t M = 5, N = 130, K = 384;
  const std::vector<float> x = activations(M, K, 11);
  std::vector<uint8_t> w(size_t(N * K)), ws(size_t((N + 127) / 128 * (K / 128)));
  for (size_t i = 0; i < w.size(); ++i) {
    const uint8_t c = uint8_t((i * 37 + 11) % 256);
    w[i] = (c & 0x7F) == 0x7F ? 0 : c;  // every e4m3 code but NaN
  }
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = uint8_t(120 + i % 9);
  std::vector<uint8_t> q1(size_t(M * K)), q2(size_t(M * K));
  std::vector<float> s1(size_t(M * K / 128)), s2(size_t(M * K / 128));
  lt::quantize_ref(x.data(), M, K, K, q1.data(), s1.data(), q2.data(), s2.data());
  const std::vector<double> y = sk::gemm_ref(x.data(), M, K, 0, 1, N, K, w.data(), ws.data(), true, 2);
  namespace sf = dsinfer::small_float;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = size_t(m * K + k), j = size_t(m * K / 128 + k / 128);
        const double xv = double(lt::dequantize(q1[i], s1[j])) + double(lt::dequantize(q2[i], s2[j]));
        const double wv = double(sf::from_bits(sf::e4m3_f32_bits(w[size_t(n * K + k)]))) *
                          double(sf::from_bits(sf::e8m0_f32_bits(ws[size_t(n / 128 * (K / 128) + k / 128)])));
        want += xv * wv;
        mag += std::fabs(xv * wv);
      }
      EXPECT_NEAR(y[size_t(m * N + n)], want, 1e-13 * mag) << m << " " << n;
    }
}

// The kernel's arithmetic emulated on the CPU with its index functions (gemm_fp8_skinny_launch.h) and the launch shape
// of the plan: token layout, units and halves, term columns, the stage's token-scale offsets, the K split, the
// persistent / cluster items, the partial tile and the output mapping. Each block's wgmma sum is taken exactly (fp64,
// rounded to fp32 as the tensor core's result), the promotion is the kernel's fp32 fma sequence, and the split-K sum
// goes in rank order. What it cannot check is the hardware side (descriptors, TMA boxes, barriers): the GPU tests do.
std::vector<float> emulate(const std::vector<float>& x, int64_t M, int64_t N, int64_t K, int64_t G, int terms,
                           const std::vector<uint8_t>& w, const std::vector<uint8_t>& ws, od::Fp8SkinnyParams& p) {
  EXPECT_TRUE(plan_gemm_fp8_skinny(M, N, K, G, terms, kSms, p));
  std::vector<uint8_t> q;
  std::vector<float> s;
  sk::quantize_ref(x.data(), M, G * K, K, G, K, terms, p.tok, p.units, q, s);
  const int64_t rows_q = od::fp8sk_rows(p), kt = G * K, kbg = K / 128, nt = G * N;
  const int tok = p.tok, ncol = terms * tok, nj = tok / 8, nf = tok / 2, halves = 2 / p.wg_rows;
  namespace sf = dsinfer::small_float;
  auto e4m3 = [](uint8_t c) { return double(sf::from_bits(sf::e4m3_f32_bits(c))); };
  std::vector<float> y(size_t(M * nt), NAN);
  auto store = [&](int64_t row0, int64_t group, int64_t unit0, int wg, int t, int j, int i, float v) {
    const int row_off = p.wg_rows == 2 ? 64 * wg : 0, half = p.wg_rows == 2 ? 0 : wg;
    const int64_t m = od::fp8sk_out_token(unit0, half, tok, t, j, i);
    const int64_t n = od::fp8sk_out_row(row0, row_off, t, i) - group * N;
    if (m < M && n < N) y[size_t(m * nt + group * N + n)] = v;
  };
  for (int64_t item = 0; item < p.items; ++item) {
    const int64_t row0 = item / p.token_tiles * 64 * p.wg_rows, unit0 = item % p.token_tiles * halves;
    const int64_t group = G > 1 ? row0 / N : 0;
    std::vector<std::vector<float>> part(size_t(p.splits), std::vector<float>(size_t(256 * nf), 0.0f));
    for (int split = 0; split < p.splits; ++split) {
      const int64_t kb0 = int64_t(split) * p.kb_per_split, kb1 = std::min<int64_t>(kb0 + p.kb_per_split, kbg);
      for (int wg = 0; wg < 2; ++wg) {
        const int row_off = p.wg_rows == 2 ? 64 * wg : 0, half = p.wg_rows == 2 ? 0 : wg;
        for (int t = 0; t < 128; ++t) {
          std::vector<float> f(size_t(nf), 0.0f), d(size_t(ncol / 2));
          for (int64_t kb = kb0; kb < kb1; ++kb) {
            const int64_t kx = group * K + kb * 128;
            const float wsc = float(sf::from_bits(sf::e8m0_f32_bits(ws[size_t((row0 + row_off) / 128 * kbg + kb)])));
            for (int jj = 0; jj < ncol / 8; ++jj)
              for (int i = 0; i < 4; ++i) {
                const int64_t r = od::fp8sk_out_row(row0, row_off, t, i);
                const int64_t qr = (unit0 + half) * ncol + od::fp8sk_acc_col(t, jj, i);
                double acc = 0.0;
                for (int64_t k = 0; k < 128 && r < G * N; ++k)
                  acc += e4m3(w[size_t(r * K + kb * 128 + k)]) * e4m3(q[size_t(qr * kt + kx + k)]);
                d[size_t(4 * jj + i)] = float(acc);
              }
            const float* ss = s.data() + (kx / 128) * rows_q + unit0 * ncol;  // the stage's token scales
            for (int j = 0; j < nj; ++j)
              for (int i = 0; i < 4; ++i) {
                const size_t fi = size_t(4 * j + i);
                f[fi] = std::fma(d[fi], wsc * ss[od::fp8sk_scale_index(half, ncol, tok, 0, t, j, i)], f[fi]);
                if (terms == 2)
                  f[fi] = std::fma(d[size_t(4 * (j + nj) + i)], wsc * ss[od::fp8sk_scale_index(half, ncol, tok, 1, t, j, i)],
                                   f[fi]);
              }
          }
          for (int fi = 0; fi < nf; ++fi) {
            if (p.splits == 1) store(row0, group, unit0, wg, t, fi / 4, fi % 4, f[size_t(fi)]);
            else part[size_t(split)][size_t(od::fp8sk_partial_index(fi, wg * 128 + t))] = f[size_t(fi)];
          }
        }
      }
    }
    if (p.splits == 1) continue;
    for (int e = 0; e < 256 * nf; ++e) {
      float v = 0.0f;
      for (int r = 0; r < p.splits; ++r) v += part[size_t(r)][size_t(e)];
      const int ct = e % 256, i = e / 256;
      store(row0, group, unit0, ct / 128, ct % 128, i / 4, i % 4, v);
    }
  }
  return y;
}

TEST(GemmFp8Skinny, KernelIndexMathEmulatedMatchesReference) {
  struct S {
    int64_t M, N, K, G;
    int terms;
  };
  int cases = 0;
  bool saw_split = false, saw_halves = false, saw_persistent = false;
  for (const S& c : {S{5, 256, 512, 1, 2}, S{37, 200, 384, 1, 2}, S{130, 128, 256, 1, 2}, S{9, 128, 256, 2, 2},
                     S{20, 128, 256, 1, 1}, S{64, 256, 1024, 1, 2}, S{200, 256, 512, 2, 1}, S{1, 64, 128, 1, 2}}) {
    SCOPED_TRACE(testing::Message() << "M=" << c.M << " N=" << c.N << " K=" << c.K << " G=" << c.G << " terms=" << c.terms);
    const int64_t rows = c.G * c.N;
    std::vector<uint8_t> w(size_t(rows * c.K)), ws(size_t((rows + 127) / 128 * (c.K / 128)));
    for (size_t i = 0; i < w.size(); ++i) {
      const uint8_t code = uint8_t((i * 151 + 7) % 256);
      w[i] = (code & 0x7F) == 0x7F ? 0 : code;
    }
    for (size_t i = 0; i < ws.size(); ++i) ws[i] = uint8_t(118 + (i * 5) % 11);
    const std::vector<float> x = activations(c.M, c.G * c.K, uint64_t(c.M * 7 + c.N));
    od::Fp8SkinnyParams p;
    const std::vector<float> y = emulate(x, c.M, c.N, c.K, c.G, c.terms, w, ws, p);
    saw_split |= p.splits > 1;
    saw_halves |= p.wg_rows == 1;
    saw_persistent |= p.splits == 1 && p.grid < p.items;
    const std::vector<double> ref = sk::gemm_ref(x.data(), c.M, c.G * c.K, c.K, c.G, c.N, c.K, w.data(), ws.data(), true, c.terms);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_FALSE(std::isnan(y[i])) << "output " << i << " never written";
      num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "splits " << p.splits << " wg_rows " << p.wg_rows << " tok " << p.tok;
    ++cases;
  }
  EXPECT_EQ(cases, 8);
  EXPECT_TRUE(saw_split) << "a case with a K split";
  EXPECT_TRUE(saw_halves) << "a case with two token units per CTA";
  (void)saw_persistent;  // needs more items than SMs: the GPU test's wq_b covers it
}

}  // namespace
