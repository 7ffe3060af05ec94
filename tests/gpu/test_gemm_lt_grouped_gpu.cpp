// GPU checks of the cuBLASLt engine's batched grouped call (ops/gemm/gemm_lt_cuda.h GemmLtEngine::gemm_grouped, the
// runner's wo_a from kGemmGroupedBatchedMinM rows): one strided-batched bf16 GEMM over every group, the FP8 weight
// widened to bf16 per call, x rounded to bf16. Against an fp64 GEMM on the host of the same operands (x rounded to
// bf16 with RNE exactly as the kernel does, W dequantized by io::dequant_fp8_block: exact in bf16 for E8M0 scales),
// on V4-Flash's wo_a (8 groups of 1,024 x 4,096), the shipped model's (2 groups of 128 x 128) and a BF16 grouped
// weight (V4.1's format), at M = 1 .. 256 including odd M, with padded row strides and group strides, every output
// outside the groups' columns checked untouched; a CUDA graph capture; clean refusals (y untouched).
// Tolerance (normalised L2 error 2e-4, as the dense path's test): only the fp32 accumulation order differs from the
// reference, ~sqrt(K) * 2^-24 ~ 4e-6 at K = 4,096; a wrong group stride, batch offset or operand order gives O(1)
// (groups draw independent weights), x left in fp32 would still pass, but x truncated instead of rounded gives
// ~1e-3 and a widening that drops the scales O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/gemm/gemm_plan.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::GemmLtEngine;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
namespace sf = dsinfer::small_float;

struct Layout {
  int64_t M, ldx, xg, ldy, yg;
};

// One grouped call against the fp64 reference over every `col_step`-th column of each group (and its last one);
// every y entry outside the groups' columns must stay NaN. Returns the normalised error, or -1 when the engine
// refused (y then checked untouched).
double check_grouped(GemmLtEngine& eng, const HostWeight& hw, const dsinfer::ops::cuda::DeviceWeight& w, int64_t G,
                     const Layout& l, int64_t col_step, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "G=" << G << " N=" << hw.rows << " K=" << hw.cols << " M=" << l.M << " ldx="
                                  << l.ldx << " xg=" << l.xg << " ldy=" << l.ldy << " yg=" << l.yg);
  const int64_t K = hw.cols, Ng = hw.rows / G;
  const std::vector<float> x = dsinfer::test::random_floats(size_t(l.M * l.ldx), seed, 2.0f);
  const std::vector<float> y0(size_t(l.M * l.ldy), NAN);
  auto dx = to_device(x);
  auto dy = to_device(y0);
  const dsinfer::Status st = eng.gemm_grouped(dx.data(), l.M, l.ldx, l.xg, w, G, dy.data(), l.ldy, l.yg, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = to_host(dy, y0.size());
  if (!st.is_ok()) {
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "refused call wrote y: " << st.message();
    return -1.0;
  }
  std::vector<float> ref, got;
  std::vector<double> xd(static_cast<size_t>(K));
  std::vector<char> in_group(size_t(l.ldy), 0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < Ng; ++n) in_group[size_t(g * l.yg + n)] = 1;
  for (int64_t m = 0; m < l.M; ++m) {
    for (int64_t c = 0; c < l.ldy; ++c)
      if (!in_group[size_t(c)]) EXPECT_TRUE(std::isnan(y[size_t(m * l.ldy + c)])) << "write outside the groups, row " << m << " col " << c;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t k = 0; k < K; ++k)
        xd[size_t(k)] = double(sf::from_bits(sf::bf16_f32_bits(sf::f32_to_bf16_bits(x[size_t(m * l.ldx + g * l.xg + k)]))));
      for (int64_t n = 0; n < Ng; ++n) {
        if (n % col_step != 0 && n != Ng - 1) continue;
        const float* wr = hw.deq.data() + (g * Ng + n) * K;
        double r = 0.0;
        for (int64_t k = 0; k < K; ++k) r += xd[size_t(k)] * double(wr[k]);
        ref.push_back(float(r));
        got.push_back(y[size_t(m * l.ldy + g * l.yg + n)]);
      }
    }
  }
  return normalized_error(got, ref);
}

TEST(GemmLtGroupedGpu, FlashWoAParity) {
  DSI_SKIP_WITHOUT_GPU();
  constexpr int64_t G = 8, Ng = 1024, K = 4096;
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, G * Ng, K, 501);
  auto d = dsinfer::test::upload(hw);
  ASSERT_TRUE(dsinfer::ops::cuda::gemm_lt_grouped_supports(d.w, G));
  GemmLtEngine eng;
  ASSERT_TRUE(eng.prepare_grouped(d.w, G, 256, nullptr).is_ok());
  uint64_t seed = 510;
  // The runner's layout (x rows of G * K, groups back to back; y rows of G * Ng), odd M, then padded strides.
  for (int64_t M : {17, 64, 67, 256}) {
    const double err = check_grouped(eng, hw, d.w, G, {M, G * K, K, G * Ng, Ng}, M > 64 ? 29 : 7, ++seed);
    std::printf("wo_a batched, M = %lld: normalised error %.3g\n", (long long)M, err);
    EXPECT_GE(err, 0.0) << "engine refused M = " << M;
    EXPECT_LT(err, 2e-4) << "M = " << M;
  }
  const double pad = check_grouped(eng, hw, d.w, G, {33, G * (K + 64) + 8, K + 64, G * (Ng + 4) + 12, Ng + 4}, 13, ++seed);
  std::printf("wo_a batched, padded strides: normalised error %.3g\n", pad);
  EXPECT_GE(pad, 0.0);
  EXPECT_LT(pad, 2e-4);
}

TEST(GemmLtGroupedGpu, ShippedShapeAndBf16Weights) {
  DSI_SKIP_WITHOUT_GPU();
  GemmLtEngine eng;
  const HostWeight small = make_host_weight(WeightFormat::FP8_BLOCK, 2 * 128, 128, 521);  // dsv4-small wo_a
  auto ds = dsinfer::test::upload(small);
  for (int64_t M : {1, 5, 64, 130}) {
    const double err = check_grouped(eng, small, ds.w, 2, {M, 256, 128, 256, 128}, 1, 530 + uint64_t(M));
    EXPECT_GE(err, 0.0) << "engine refused M = " << M;
    EXPECT_LT(err, 2e-4) << "M = " << M;
  }
  const HostWeight bf = make_host_weight(WeightFormat::BF16, 4 * 256, 512, 522);  // V4.1's wo_a format
  auto db = dsinfer::test::upload(bf);
  for (int64_t M : {3, 96}) {
    const double err = check_grouped(eng, bf, db.w, 4, {M, 4 * 512 + 4, 512, 4 * 256, 256}, 3, 540 + uint64_t(M));
    EXPECT_GE(err, 0.0) << "engine refused M = " << M;
    EXPECT_LT(err, 2e-4) << "M = " << M;
  }
}

// Refusals leave y untouched (the runner then takes the kernels): FP8 with fp32 scales (no exact widening), one
// group, groups that overlap (xg < K) or leave the rows (span > ldx), y groups that overlap.
TEST(GemmLtGroupedGpu, RefusesWhatItCannotRun) {
  DSI_SKIP_WITHOUT_GPU();
  GemmLtEngine eng;
  const HostWeight f32s = make_host_weight(WeightFormat::FP8_BLOCK, 2 * 128, 128, 551, false);
  auto d1 = dsinfer::test::upload(f32s);
  EXPECT_LT(check_grouped(eng, f32s, d1.w, 2, {8, 256, 128, 256, 128}, 1, 552), 0.0);
  const HostWeight ok = make_host_weight(WeightFormat::FP8_BLOCK, 2 * 128, 128, 553);
  auto d2 = dsinfer::test::upload(ok);
  EXPECT_LT(check_grouped(eng, ok, d2.w, 1, {8, 128, 128, 256, 256}, 1, 554), 0.0);  // one group
  EXPECT_LT(check_grouped(eng, ok, d2.w, 2, {8, 256, 120, 256, 128}, 1, 555), 0.0);  // xg < K
  EXPECT_LT(check_grouped(eng, ok, d2.w, 2, {8, 250, 128, 256, 128}, 1, 556), 0.0);  // span > ldx
  EXPECT_LT(check_grouped(eng, ok, d2.w, 2, {8, 256, 128, 256, 100}, 1, 557), 0.0);  // yg < N_g
  EXPECT_FALSE(eng.prepare_grouped(d1.w, 2, 8, nullptr).is_ok());
}

// Session 24 (s24-sparsep2): gemm_grouped_bf16, wo_a's entry for the split-block sparse prefill kernel's bf16 o. Its
// x is bf16(the fp32 x) computed on the host (RNE, small_float::f32_to_bf16_bits, the bits of the engine's own
// rounding pass), in the runner's layout (ldx = the span), so the same cached plan runs on the same operands: the
// output must equal gemm_grouped's on the fp32 x bit for bit (no tolerance). Also with a padded bf16 row stride
// against the fp64 reference (another plan: 2e-4 as above), and its refusals (misaligned x, ldx % 8 != 0) leave y
// untouched.
TEST(GemmLtGroupedGpu, Bf16EntryEqualsTheFp32Call) {
  DSI_SKIP_WITHOUT_GPU();
  constexpr int64_t G = 8, Ng = 1024, K = 4096;
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, G * Ng, K, 601);
  auto d = dsinfer::test::upload(hw);
  GemmLtEngine eng;
  ASSERT_TRUE(eng.prepare_grouped(d.w, G, 256, nullptr).is_ok());
  for (int64_t M : {17, 256, 521}) {
    SCOPED_TRACE(M);
    const std::vector<float> x = dsinfer::test::random_floats(size_t(M * G * K), 610 + uint64_t(M), 2.0f);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = sf::f32_to_bf16_bits(x[i]);
    auto dx = to_device(x);
    auto dxb = to_device(xb);
    auto ya = to_device(std::vector<float>(size_t(M * G * Ng), NAN)), yb = to_device(std::vector<float>(size_t(M * G * Ng), NAN));
    ASSERT_TRUE(eng.gemm_grouped(dx.data(), M, G * K, K, d.w, G, ya.data(), G * Ng, Ng, nullptr).is_ok());
    const dsinfer::Status st = eng.gemm_grouped_bf16(dxb.data(), M, G * K, K, d.w, G, yb.data(), G * Ng, Ng, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> a = to_host(ya, size_t(M * G * Ng)), b = to_host(yb, size_t(M * G * Ng));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "the bf16 entry's output differs from the fp32 call's";
  }
  // A padded bf16 row stride (ldx > span): against the fp64 reference of the rounded x.
  const int64_t M = 33, ldx = G * K + 64;
  const std::vector<float> x = dsinfer::test::random_floats(size_t(M * ldx), 620, 2.0f);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = sf::f32_to_bf16_bits(x[i]);
  auto dxb = to_device(xb);
  auto dy = to_device(std::vector<float>(size_t(M * G * Ng), NAN));
  ASSERT_TRUE(eng.gemm_grouped_bf16(dxb.data(), M, ldx, K, d.w, G, dy.data(), G * Ng, Ng, nullptr).is_ok());
  const std::vector<float> y = to_host(dy, size_t(M * G * Ng));
  std::vector<float> ref, got;
  for (int64_t m = 0; m < M; m += 4)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < Ng; n += 37) {
        const float* wr = hw.deq.data() + (g * Ng + n) * K;
        double r = 0.0;
        for (int64_t k = 0; k < K; ++k)
          r += double(sf::from_bits(sf::bf16_f32_bits(xb[size_t(m * ldx + g * K + k)]))) * double(wr[k]);
        ref.push_back(float(r));
        got.push_back(y[size_t(m * G * Ng + g * Ng + n)]);
      }
  const double err = normalized_error(got, ref);
  std::printf("wo_a batched, bf16 x with a padded stride: normalised error %.3g\n", err);
  EXPECT_LT(err, 2e-4);
  // Refusals: x not 16-byte aligned, ldx % 8 != 0; y untouched.
  auto dz = to_device(std::vector<float>(size_t(M * G * Ng), NAN));
  EXPECT_FALSE(eng.gemm_grouped_bf16(dxb.data() + 1, M, ldx, K, d.w, G, dz.data(), G * Ng, Ng, nullptr).is_ok());
  EXPECT_FALSE(eng.gemm_grouped_bf16(dxb.data(), M - 1, ldx - 4, K, d.w, G, dz.data(), G * Ng, Ng, nullptr).is_ok());
  for (float v : to_host(dz, size_t(M * G * Ng))) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote y";
}

// Captured into a CUDA graph after an eager call (as the runner's decode graphs are), the call replays to the eager
// result; a call needing more rows than prepared is refused inside the capture without breaking it.
TEST(GemmLtGroupedGpu, GraphCaptureReplaysEagerResult) {
  DSI_SKIP_WITHOUT_GPU();
  constexpr int64_t G = 8, Ng = 256, K = 512, M = 64;
  GemmLtEngine eng;
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, G * Ng, K, 561, true, 128, 128, false);
  auto d = dsinfer::test::upload(hw);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(eng.prepare_grouped(d.w, G, M, s).is_ok());
  auto dx = to_device(dsinfer::test::random_floats(size_t(4 * M * G * K), 562));
  auto dy = to_device(std::vector<float>(size_t(M * G * Ng), 0.0f)), dg = to_device(std::vector<float>(size_t(M * G * Ng), 0.0f));
  ASSERT_TRUE(eng.gemm_grouped(dx.data(), M, G * K, K, d.w, G, dy.data(), G * Ng, Ng, s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  const dsinfer::Status in = eng.gemm_grouped(dx.data(), M, G * K, K, d.w, G, dg.data(), G * Ng, Ng, s);
  const dsinfer::Status big = eng.gemm_grouped(dx.data(), 4 * M, G * K, K, d.w, G, dg.data(), G * Ng, Ng, s);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_TRUE(in.is_ok()) << in.message();
  EXPECT_FALSE(big.is_ok());
  cudaGraphExec_t ex = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> a = to_host(dy, size_t(M * G * Ng)), b = to_host(dg, size_t(M * G * Ng));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "graph replay differs from the eager call";
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace

// Session 27: gemm_grouped_bf16_out (wo_a on the split path: its output as bf16, wo_b's x) against
// gemm_grouped_bf16's fp32 output on the same bf16 x at prefill sizes: every bf16 output within one bf16 ulp of the
// fp32 one (RNE of the same sums is within half an ulp; another algorithm's sum order may cross a rounding boundary)
// and the share bitwise bf16(the fp32 output) printed; then the engine's dense bf16-x entry (gemm_bf16_in, wo_b) on
// that bf16 output against gemm on its fp32 widening: the same bf16 values into the same bf16 matmul, so within
// 1e-6 normalised (bit for bit where the plan is the same; the share printed). Refusals (a misaligned y16, ldy % 8
// != 0) leave y16 untouched.
TEST(GemmLtGroupedGpu, Bf16OutputFeedsTheBf16Entry) {
  DSI_SKIP_WITHOUT_GPU();
  constexpr int64_t G = 8, Ng = 1024, K = 4096, M = 1030, N2 = 4096;
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, G * Ng, K, 701);
  const HostWeight hb = make_host_weight(WeightFormat::FP8_BLOCK, N2, G * Ng, 702);
  auto d = dsinfer::test::upload(hw);
  auto db = dsinfer::test::upload(hb);
  GemmLtEngine eng;
  const std::vector<float> x = dsinfer::test::random_floats(size_t(M * G * K), 710, 2.0f);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = sf::f32_to_bf16_bits(x[i]);
  auto dxb = to_device(xb);
  auto y32 = to_device(std::vector<float>(size_t(M * G * Ng), NAN));
  dsinfer::cuda::DeviceBuffer<uint16_t> y16;
  ASSERT_TRUE(y16.alloc(size_t(M * G * Ng)).is_ok());
  ASSERT_TRUE(eng.gemm_grouped_bf16(dxb.data(), M, G * K, K, d.w, G, y32.data(), G * Ng, Ng, nullptr).is_ok());
  const dsinfer::Status st = eng.gemm_grouped_bf16_out(dxb.data(), M, G * K, K, d.w, G, y16.data(), G * Ng, Ng, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> a = to_host(y32, size_t(M * G * Ng));
  const std::vector<uint16_t> b = to_host(y16, size_t(M * G * Ng));
  int64_t equal = 0, beyond = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double g = double(sf::from_bits(sf::bf16_f32_bits(b[i])));
    equal += b[i] == sf::f32_to_bf16_bits(a[i]);
    beyond += !(std::fabs(g - double(a[i])) <= std::ldexp(std::fabs(double(a[i])), -8));
  }
  EXPECT_EQ(beyond, 0) << "bf16 outputs more than one bf16 ulp from the fp32 call's";
  std::printf("wo_a bf16 out: %.4f %% bitwise bf16(the fp32 output)\n", 100.0 * double(equal) / double(a.size()));
  // wo_b on the bf16 output as it is, against gemm on its exact fp32 widening (rounded back to the same bf16 values).
  std::vector<float> widened(b.size());
  for (size_t i = 0; i < b.size(); ++i) widened[i] = sf::from_bits(sf::bf16_f32_bits(b[i]));
  auto dw = to_device(widened);
  auto za = to_device(std::vector<float>(size_t(M * N2), NAN)), zb = to_device(std::vector<float>(size_t(M * N2), NAN));
  ASSERT_TRUE(eng.gemm(dw.data(), M, G * Ng, db.w, za.data(), N2, false, nullptr).is_ok());
  const dsinfer::Status st2 = eng.gemm_bf16_in(y16.data(), M, G * Ng, db.w, zb.data(), N2, false, nullptr);
  ASSERT_TRUE(st2.is_ok()) << st2.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> p = to_host(za, size_t(M * N2)), q = to_host(zb, size_t(M * N2));
  int64_t same = 0;
  for (size_t i = 0; i < p.size(); ++i) same += std::memcmp(&p[i], &q[i], 4) == 0;
  const double err = normalized_error(q, p);
  std::printf("wo_b bf16 in: normalised error %.3g, %.4f %% bitwise\n", err, 100.0 * double(same) / double(p.size()));
  EXPECT_LT(err, 1e-6);
  // Refusals: y16 misaligned, ldy % 8 != 0; y16 untouched.
  ASSERT_EQ(cudaMemset(y16.data(), 0x7f, size_t(M * G * Ng) * 2), cudaSuccess);
  EXPECT_FALSE(eng.gemm_grouped_bf16_out(dxb.data(), M, G * K, K, d.w, G, y16.data() + 1, G * Ng, Ng, nullptr).is_ok());
  EXPECT_FALSE(eng.gemm_grouped_bf16_out(dxb.data(), M, G * K, K, d.w, G, y16.data(), G * Ng - 4, Ng - 4, nullptr).is_ok());
  for (uint16_t v : to_host(y16, size_t(M * G * Ng))) ASSERT_EQ(v, 0x7f7f) << "a refused call wrote y16";
}
