// GPU parity of gemm_cuda / gemm_grouped_cuda against ops::linear_ref on the io::dequant_* fp32 weights, for every
// weight format, both kernel paths, odd shapes (K tails, unaligned strides), the real V4-Flash projection sizes,
// accumulate, determinism, and argument errors.
// Thresholds (normalised L2 error): rows <= kGemmSkinnyMaxM with a vector-eligible weight run the fp32 streaming
// kernel (exact products, only summation order differs): 1e-5. Everything else runs the bf16 tensor-core kernel:
// x (and non-bf16-exact weights) rounded to bf16 (rel. 2^-9 per operand) gives ~1-2e-3 on random data: 6e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/linear/linear.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::DeviceWeight;
using dsinfer::ops::cuda::gemm_cuda;
using dsinfer::ops::cuda::gemm_grouped_cuda;
using dsinfer::ops::cuda::kGemmSkinnyMaxM;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
using dsinfer::test::random_floats;

constexpr double kSkinnyTol = 1e-5;
constexpr double kTiledTol = 6e-3;

bool skinny_eligible(const HostWeight& w) {
  const int64_t ve = w.fmt == WeightFormat::F32 ? 4 : w.fmt == WeightFormat::BF16 ? 8 : w.fmt == WeightFormat::FP8_BLOCK ? 16 : 32;
  return w.cols % ve == 0 && (w.fmt != WeightFormat::FP8_BLOCK || w.bk % 16 == 0);
}
double tol_for(int64_t M, const HostWeight& w) { return M <= kGemmSkinnyMaxM && skinny_eligible(w) ? kSkinnyTol : kTiledTol; }

// Reference rows `rows` of y = x W^T (x rows at stride ldx).
std::vector<float> ref_rows(const std::vector<float>& x, int64_t ldx, const std::vector<int64_t>& rows, int64_t K,
                            const float* w, int64_t N) {
  std::vector<float> out(rows.size() * size_t(N));
  for (size_t i = 0; i < rows.size(); ++i)
    dsinfer::ops::linear_ref(x.data() + rows[i] * ldx, 1, K, w, N, out.data() + i * size_t(N));
  return out;
}

std::vector<int64_t> sample_rows(int64_t M, int64_t want) {
  std::vector<int64_t> r;
  if (M <= want) {
    for (int64_t i = 0; i < M; ++i) r.push_back(i);
  } else {
    for (int64_t i = 0; i < want; ++i) r.push_back(i * (M - 1) / (want - 1));  // includes first and last row
  }
  return r;
}

// Runs one gemm (poisoned output), checks every element was written (finite) and the sampled rows against the
// reference. With accumulate, y starts from random values that are added to the reference.
void check_gemm(const HostWeight& hw, int64_t M, int64_t ldx, int64_t ldy, bool accumulate, int64_t max_ref_rows,
                uint64_t seed) {
  SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(hw.fmt) << " M=" << M << " N=" << hw.rows
                                  << " K=" << hw.cols << " ldx=" << ldx << " ldy=" << ldy << " acc=" << accumulate);
  const int64_t N = hw.rows, K = hw.cols;
  auto dw = dsinfer::test::upload(hw);
  std::vector<float> x = random_floats(size_t(M * ldx), seed);
  std::vector<float> y0(size_t(M * ldy), NAN);
  if (accumulate) y0 = random_floats(size_t(M * ldy), seed + 1);
  auto dx = to_device(x);
  auto dy = to_device(y0);
  ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw.w, dy.data(), ldy, accumulate, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y = to_host(dy, y0.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ldy; ++n) {
      const float v = y[size_t(m * ldy + n)];
      if (n < N) ASSERT_TRUE(std::isfinite(v)) << "unwritten/NaN output at row " << m << " col " << n;
      else if (!accumulate) ASSERT_TRUE(std::isnan(v)) << "write outside N at row " << m << " col " << n;
    }
  const std::vector<int64_t> rows = sample_rows(M, max_ref_rows);
  std::vector<float> ref = ref_rows(x, ldx, rows, K, hw.deq.data(), N), got(ref.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t n = 0; n < N; ++n) {
      got[i * size_t(N) + size_t(n)] = y[size_t(rows[i] * ldy + n)];
      if (accumulate) ref[i * size_t(N) + size_t(n)] += y0[size_t(rows[i] * ldy + n)];
    }
  const double err = normalized_error(got, ref), tol = tol_for(M, hw);
  EXPECT_LT(err, tol) << "normalized error " << err;
}

TEST(GemmGpu, SmallShapesAllFormatsBothPaths) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  const WeightFormat fmts[] = {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_G32};
  for (WeightFormat f : fmts) {
    // K = 96: multiple of 32 (FP4) but not of 128; N = 77 not a multiple of any tile or FP8 block.
    HostWeight w = make_host_weight(f, 77, 96, ++seed);
    for (int64_t M : {1, 3, 8, 9, 37, 64, 200}) check_gemm(w, M, 96, 77, false, 200, ++seed);
    // larger K spanning several K chunks / tiles; N crossing a 128-wide tile
    HostWeight w2 = make_host_weight(f, 130, 1056, ++seed);
    for (int64_t M : {2, 7, 70}) check_gemm(w2, M, 1056, 130, false, 70, ++seed);
  }
}

TEST(GemmGpu, OddKAndStridesUseTheGeneralPath) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  // K = 131: no 16-byte weight vectors for F32/BF16 (scalar loads + K tail in the tiled kernel).
  for (WeightFormat f : {WeightFormat::F32, WeightFormat::BF16}) {
    HostWeight w = make_host_weight(f, 45, 131, ++seed);
    for (int64_t M : {1, 5, 66}) check_gemm(w, M, 131, 45, false, 66, ++seed);
  }
  // FP8 with K = 200 (not a multiple of 16: scalar path), a partial last scale block, and fp32 scales.
  HostWeight w8 = make_host_weight(WeightFormat::FP8_BLOCK, 150, 200, ++seed, /*e8m0=*/false);
  for (int64_t M : {1, 4, 33}) check_gemm(w8, M, 200, 150, false, 33, ++seed);
  // FP8 with non-128 blocks (64 x 32) and E8M0 scales (vector path, several scale columns per tile).
  HostWeight w8b = make_host_weight(WeightFormat::FP8_BLOCK, 100, 256, ++seed, true, 64, 32);
  for (int64_t M : {2, 80}) check_gemm(w8b, M, 256, 100, false, 80, ++seed);
  // FP4 with fp32 scales.
  HostWeight w4 = make_host_weight(WeightFormat::FP4_G32, 64, 160, ++seed, /*e8m0=*/false);
  for (int64_t M : {3, 65}) check_gemm(w4, M, 160, 64, false, 65, ++seed);
  // Row strides larger than K / N (x rows not 16-byte aligned: ldx = K + 1), both paths.
  HostWeight wb = make_host_weight(WeightFormat::BF16, 72, 256, ++seed);
  for (int64_t M : {3, 70}) check_gemm(wb, M, 257, 75, false, 70, ++seed);
}

TEST(GemmGpu, Accumulate) {
  DSI_SKIP_WITHOUT_GPU();
  HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, 256, 512, 301);
  check_gemm(w, 2, 512, 256, true, 2, 302);
  check_gemm(w, 100, 512, 256, true, 100, 303);
  HostWeight w4 = make_host_weight(WeightFormat::FP4_G32, 96, 128, 304);
  check_gemm(w4, 5, 128, 96, true, 5, 305);
  check_gemm(w4, 17, 128, 96, true, 17, 306);
}

// Real V4-Flash projections (FP8 128x128 E8M0): wq_a [1024, 4096], wq_b [32768, 1024], wo_b [4096, 8192];
// decode (1, 3 rows), M = 64 and prefill M = 4096 (reference on sampled rows; every element checked written).
TEST(GemmGpu, RealFlashShapesFp8) {
  DSI_SKIP_WITHOUT_GPU();
  struct S {
    int64_t N, K;
  };
  uint64_t seed = 400;
  for (S s : {S{1024, 4096}, S{32768, 1024}, S{4096, 8192}}) {
    HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, s.N, s.K, ++seed);
    for (int64_t M : {1, 3, 64, 4096}) check_gemm(w, M, s.K, s.N, false, M == 4096 ? 12 : 16, ++seed);
  }
  // the MoE expert and shared-expert shapes in FP4 / BF16
  HostWeight w4 = make_host_weight(WeightFormat::FP4_G32, 2048, 4096, ++seed);
  for (int64_t M : {1, 6, 300}) check_gemm(w4, M, 4096, 2048, false, 12, ++seed);
  HostWeight wb = make_host_weight(WeightFormat::BF16, 4096, 2048, ++seed);
  for (int64_t M : {2, 129}) check_gemm(wb, M, 2048, 4096, false, 12, ++seed);
}

void check_grouped(WeightFormat f, int64_t G, int64_t Ng, int64_t K, int64_t M, int64_t max_ref_rows, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(f) << " G=" << G << " Ng=" << Ng
                                  << " K=" << K << " M=" << M);
  HostWeight hw = make_host_weight(f, G * Ng, K, seed);
  auto dw = dsinfer::test::upload(hw);
  // The forward's layout: x [M, G*K] (group g = columns [g*K, (g+1)*K)), y [M, G*Ng].
  const int64_t ldx = G * K, ldy = G * Ng;
  std::vector<float> x = random_floats(size_t(M * ldx), seed + 1);
  auto dx = to_device(x);
  auto dy = to_device(std::vector<float>(size_t(M * ldy), NAN));
  ASSERT_TRUE(gemm_grouped_cuda(dx.data(), M, ldx, K, dw.w, G, dy.data(), ldy, Ng, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y = to_host(dy, size_t(M * ldy));
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  const std::vector<int64_t> rows = sample_rows(M, max_ref_rows);
  std::vector<float> ref, got;
  for (int64_t g = 0; g < G; ++g) {
    std::vector<float> xg(size_t(M * K));
    for (int64_t m = 0; m < M; ++m)
      std::copy(x.begin() + m * ldx + g * K, x.begin() + m * ldx + (g + 1) * K, xg.begin() + m * K);
    std::vector<float> r = ref_rows(xg, K, rows, K, hw.deq.data() + g * Ng * K, Ng);
    ref.insert(ref.end(), r.begin(), r.end());
    for (int64_t m : rows)
      for (int64_t n = 0; n < Ng; ++n) got.push_back(y[size_t(m * ldy + g * Ng + n)]);
  }
  const double err = normalized_error(got, ref), tol = tol_for(M, hw);
  EXPECT_LT(err, tol) << "normalized error " << err;
}

TEST(GemmGpu, GroupedProjection) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped(WeightFormat::FP8_BLOCK, 4, 128, 256, 3, 3, 501);
  check_grouped(WeightFormat::FP8_BLOCK, 4, 128, 256, 70, 70, 502);
  check_grouped(WeightFormat::FP8_BLOCK, 3, 80, 256, 4, 4, 507);   // scale blocks straddle group boundaries
  check_grouped(WeightFormat::FP8_BLOCK, 3, 80, 256, 70, 70, 508);
  check_grouped(WeightFormat::FP4_G32, 2, 48, 64, 3, 3, 509);
  check_grouped(WeightFormat::BF16, 3, 40, 72, 5, 5, 503);
  check_grouped(WeightFormat::BF16, 3, 40, 72, 20, 20, 504);
  // V4-Flash wo_a: 8 groups of [1024, 4096]
  check_grouped(WeightFormat::FP8_BLOCK, 8, 1024, 4096, 2, 2, 505);
  check_grouped(WeightFormat::FP8_BLOCK, 8, 1024, 4096, 65, 6, 506);
}

// Same inputs -> bitwise same outputs; in the tiled path a row's result does not depend on the other rows.
TEST(GemmGpu, DeterministicAndRowIndependent) {
  DSI_SKIP_WITHOUT_GPU();
  HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, 384, 1024, 601, true, 128, 128, false);
  auto dw = dsinfer::test::upload(hw);
  const int64_t M = 200, N = 384, K = 1024;
  auto dx = to_device(random_floats(size_t(M * K), 602));
  DeviceBuffer<float> a, b, c;
  ASSERT_TRUE(a.alloc(size_t(M * N)).is_ok() && b.alloc(size_t(M * N)).is_ok() && c.alloc(size_t(100 * N)).is_ok());
  ASSERT_TRUE(gemm_cuda(dx.data(), M, K, dw.w, a.data(), N, false, nullptr).is_ok());
  ASSERT_TRUE(gemm_cuda(dx.data(), M, K, dw.w, b.data(), N, false, nullptr).is_ok());
  ASSERT_TRUE(gemm_cuda(dx.data() + 50 * K, 100, K, dw.w, c.data(), N, false, nullptr).is_ok());  // rows 50..149
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto ha = to_host(a, size_t(M * N)), hb = to_host(b, size_t(M * N)), hc = to_host(c, size_t(100 * N));
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), ha.size() * 4), 0);
  EXPECT_EQ(std::memcmp(ha.data() + 50 * N, hc.data(), hc.size() * 4), 0);
}

TEST(GemmGpu, ArgumentErrorsAreStatuses) {
  DSI_SKIP_WITHOUT_GPU();
  HostWeight h4 = make_host_weight(WeightFormat::FP4_G32, 16, 64, 701, true, 128, 128, false);
  auto dw = dsinfer::test::upload(h4);
  auto dx = to_device(random_floats(16 * 64, 702));
  DeviceBuffer<float> dy;
  ASSERT_TRUE(dy.alloc(16 * 64).is_ok());
  DeviceWeight bad = dw.w;
  bad.cols = 48;  // FP4 needs K % 32 == 0
  auto s = gemm_cuda(dx.data(), 2, 64, bad, dy.data(), 16, false, nullptr);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("divisible by 32"), std::string::npos) << s.message();
  EXPECT_FALSE(gemm_cuda(dx.data(), 2, 32, dw.w, dy.data(), 16, false, nullptr).is_ok());  // ldx < K
  EXPECT_FALSE(gemm_cuda(dx.data(), 2, 64, dw.w, dy.data(), 8, false, nullptr).is_ok());   // ldy < N
  EXPECT_FALSE(gemm_cuda(nullptr, 2, 64, dw.w, dy.data(), 16, false, nullptr).is_ok());
  bad = dw.w;
  bad.scale = nullptr;
  EXPECT_FALSE(gemm_cuda(dx.data(), 2, 64, bad, dy.data(), 16, false, nullptr).is_ok());
  bad = dw.w;
  bad.fmt = WeightFormat(17);
  EXPECT_FALSE(gemm_cuda(dx.data(), 2, 64, bad, dy.data(), 16, false, nullptr).is_ok());
  EXPECT_FALSE(gemm_grouped_cuda(dx.data(), 2, 64, 0, dw.w, 3, dy.data(), 16, 0, nullptr).is_ok());  // 3 !| 16
  EXPECT_FALSE(gemm_grouped_cuda(dx.data(), 2, 64, -64, dw.w, 2, dy.data(), 8, 8, nullptr).is_ok());  // stride < 0
  EXPECT_FALSE(gemm_grouped_cuda(dx.data(), 2, 64, 0, dw.w, 0, dy.data(), 16, 0, nullptr).is_ok());   // 0 groups
  EXPECT_TRUE(gemm_cuda(dx.data(), 0, 64, dw.w, dy.data(), 16, false, nullptr).is_ok());  // M = 0: no-op
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
