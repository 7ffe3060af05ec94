// GPU parity of the GEMV kernel (gemm_gemv.cu: GemmPrecision::kGemv, any M <= kGemmGemvMaxM, FP8_BLOCK / BF16
// weights) against ops::linear_ref on the io::dequant_* fp32 weights: every M = 1..16, the V4-Flash decode shapes
// (wq_a, wkv, wq_b, wo_b, grouped wo_a), odd N, K not a multiple of the scale block, non-128 blocks, fp32 scales,
// unaligned x strides, accumulate, grouped, bitwise determinism, and that the GEMV kernel is the one planned.
// Tolerance (normalised L2 error): e4m3 / bf16 weights and their e8m0 scales are exact in fp32, so every product is
// exact and only the fp32 summation order differs from the reference (per-output relative error ~ sqrt(K) * 2^-24,
// < 4e-6 at K = 8192, far below that in the L2 norm): 1e-5, as the fp32 skinny kernel's bound in test_gemm_gpu.cpp
// (fp32 scales add one fp32 rounding per product: same order). A wrong vector, k slot, scale or split gives O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/linear/linear.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::DeviceWeight;
using dsinfer::ops::cuda::gemm_cuda;
using dsinfer::ops::cuda::gemm_grouped_cuda;
using dsinfer::ops::cuda::GemmPrecision;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
using dsinfer::test::random_floats;
namespace od = dsinfer::ops::cuda::detail;

constexpr double kGemvTol = 1e-5;
constexpr GemmPrecision kGemv = GemmPrecision::kGemv;  // the kernel wherever it can run

// Whether gemm_cuda / gemm_grouped_cuda with kGemv take the GEMV kernel for this weight, M and x layout.
bool planned(const DeviceWeight& w, int64_t M, int64_t groups = 1) {
  od::GemmArgs a;
  a.M = M;
  a.groups = groups;
  a.N = w.rows / groups;
  a.K = w.cols;
  od::set_weight_args(a, w);
  od::GemvParams p;
  return M <= dsinfer::ops::cuda::kGemmGemvMaxM && od::plan_gemm_gemv(a, w.fmt, 132, p);
}

std::vector<int64_t> sample_rows(int64_t M, int64_t want) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < std::min(M, want); ++i) r.push_back(M <= want ? i : i * (M - 1) / (want - 1));
  return r;
}

// One kGemv gemm on poisoned (or random, with acc) y, twice: bitwise equal, every element in [0, N) written and
// finite, nothing written past N, sampled rows against the reference.
void check_gemv(const HostWeight& hw, int64_t M, int64_t ldx, int64_t ldy, bool acc, int64_t max_ref_rows,
                uint64_t seed) {
  SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(hw.fmt) << " M=" << M << " N=" << hw.rows
                                  << " K=" << hw.cols << " blocks " << hw.bn << "x" << hw.bk
                                  << (hw.e8m0 ? " e8m0" : " f32") << " ldx=" << ldx << " ldy=" << ldy
                                  << " acc=" << acc);
  const int64_t N = hw.rows, K = hw.cols;
  auto dw = dsinfer::test::upload(hw);
  ASSERT_TRUE(planned(dw.w, M));
  const std::vector<float> x = random_floats(size_t(M * ldx), seed);
  const std::vector<float> y0 =
      acc ? random_floats(size_t(M * ldy), seed + 1) : std::vector<float>(size_t(M * ldy), NAN);
  auto dx = to_device(x);
  auto dy = to_device(y0), dy2 = to_device(y0);
  ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw.w, dy.data(), ldy, acc, nullptr, kGemv).is_ok());
  ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw.w, dy2.data(), ldy, acc, nullptr, kGemv).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = to_host(dy, y0.size()), y2 = to_host(dy2, y0.size());
  EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * 4), 0) << "not deterministic";
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ldy; ++n) {
      const float v = y[size_t(m * ldy + n)];
      if (n < N) ASSERT_TRUE(std::isfinite(v)) << "unwritten/NaN output at row " << m << " col " << n;
      else if (!acc) ASSERT_TRUE(std::isnan(v)) << "write outside N at row " << m << " col " << n;
      else ASSERT_EQ(v, y0[size_t(m * ldy + n)]) << "write outside N at row " << m << " col " << n;
    }
  std::vector<float> ref, got;
  for (int64_t m : sample_rows(M, max_ref_rows)) {
    std::vector<float> r(static_cast<size_t>(N));
    dsinfer::ops::linear_ref(x.data() + m * ldx, 1, K, hw.deq.data(), N, r.data());
    for (int64_t n = 0; n < N; ++n) {
      ref.push_back(r[size_t(n)] + (acc ? y0[size_t(m * ldy + n)] : 0.0f));
      got.push_back(y[size_t(m * ldy + n)]);
    }
  }
  const double err = normalized_error(got, ref);
  EXPECT_LT(err, kGemvTol) << "normalized error " << err;
}

TEST(GemvGpu, EveryMOnOddShapes) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 7000;
  // N = 333 (odd, crosses row blocks and scale blocks), K = 2064 (16 full 128-blocks + a 16-wide partial one;
  // several K steps and chunks at every M).
  HostWeight w8 = make_host_weight(WeightFormat::FP8_BLOCK, 333, 2064, ++seed);
  for (int64_t M = 1; M <= 16; ++M) check_gemv(w8, M, 2064, 333, false, 16, ++seed);
  HostWeight wb = make_host_weight(WeightFormat::BF16, 77, 1000, ++seed);  // K % 8 == 0, not a step multiple
  for (int64_t M = 1; M <= 16; ++M) check_gemv(wb, M, 1000, 77, false, 16, ++seed);
}

TEST(GemvGpu, FlashDecodeShapes) {
  DSI_SKIP_WITHOUT_GPU();
  struct S {
    int64_t N, K;
  };
  uint64_t seed = 7100;
  // wq_a, wkv (512 + 64 rope), wq_b, wo_b, the shared expert's w2
  for (S s : {S{1024, 4096}, S{576, 4096}, S{32768, 1024}, S{4096, 8192}, S{4096, 2048}}) {
    HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, s.N, s.K, ++seed);
    for (int64_t M : {1, 2, 4, 6, 8, 16}) check_gemv(w, M, s.K, s.N, false, 3, ++seed);
  }
  HostWeight cmp = make_host_weight(WeightFormat::BF16, 512, 4096, ++seed);  // a compressor's wkv
  for (int64_t M : {1, 5, 16}) check_gemv(cmp, M, 4096, 512, false, 3, ++seed);
}

TEST(GemvGpu, BlocksScalesStridesAccumulate) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 7200;
  HostWeight f32s = make_host_weight(WeightFormat::FP8_BLOCK, 150, 208, ++seed, /*e8m0=*/false);  // fp32 scales
  for (int64_t M : {1, 3, 9}) check_gemv(f32s, M, 208, 150, false, 9, ++seed);
  HostWeight small = make_host_weight(WeightFormat::FP8_BLOCK, 100, 256, ++seed, true, 64, 32);  // 64 x 32 blocks
  for (int64_t M : {2, 7, 16}) check_gemv(small, M, 256, 100, false, 16, ++seed);
  HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, 259, 1536, ++seed);
  check_gemv(w, 3, 1537, 263, false, 3, ++seed);   // ldx = K + 1: x rows not 16-byte aligned (scalar x staging)
  check_gemv(w, 5, 1536, 270, true, 5, ++seed);    // accumulate, ldy > N
  check_gemv(w, 16, 1540, 259, true, 16, ++seed);  // accumulate at the largest M
  HostWeight b = make_host_weight(WeightFormat::BF16, 130, 520, ++seed);
  check_gemv(b, 4, 521, 131, true, 4, ++seed);
}

void check_grouped(WeightFormat f, int64_t G, int64_t Ng, int64_t K, int64_t M, int64_t max_ref_rows, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "G=" << G << " Ng=" << Ng << " K=" << K << " M=" << M);
  HostWeight hw = make_host_weight(f, G * Ng, K, seed);
  auto dw = dsinfer::test::upload(hw);
  ASSERT_TRUE(planned(dw.w, M, G));
  const int64_t ldx = G * K, ldy = G * Ng;  // the forward's layout
  const std::vector<float> x = random_floats(size_t(M * ldx), seed + 1);
  auto dx = to_device(x);
  auto dy = to_device(std::vector<float>(size_t(M * ldy), NAN));
  ASSERT_TRUE(gemm_grouped_cuda(dx.data(), M, ldx, K, dw.w, G, dy.data(), ldy, Ng, nullptr, kGemv).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = to_host(dy, size_t(M * ldy));
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  std::vector<float> ref, got;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t m : sample_rows(M, max_ref_rows)) {
      std::vector<float> r(static_cast<size_t>(Ng));
      dsinfer::ops::linear_ref(x.data() + m * ldx + g * K, 1, K, hw.deq.data() + g * Ng * K, Ng, r.data());
      ref.insert(ref.end(), r.begin(), r.end());
      got.insert(got.end(), y.begin() + m * ldy + g * Ng, y.begin() + m * ldy + (g + 1) * Ng);
    }
  const double err = normalized_error(got, ref);
  EXPECT_LT(err, kGemvTol) << "normalized error " << err;
}

TEST(GemvGpu, GroupedProjection) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t M : {1, 6, 16}) check_grouped(WeightFormat::FP8_BLOCK, 8, 1024, 4096, M, 2, 7300 + uint64_t(M));  // wo_a
  check_grouped(WeightFormat::FP8_BLOCK, 3, 80, 256, 5, 5, 7320);  // scale blocks straddle group boundaries
  check_grouped(WeightFormat::BF16, 3, 40, 72, 11, 11, 7321);
}

// What the GEMV kernel does not take stays on the older kernels (and correct: test_gemm_gpu / test_gemm_stream_gpu).
TEST(GemvGpu, PlanCoversOnlyItsRange) {
  DSI_SKIP_WITHOUT_GPU();
  HostWeight w8 = make_host_weight(WeightFormat::FP8_BLOCK, 64, 256, 7400, true, 128, 128, false);
  auto d8 = dsinfer::test::upload(w8);
  EXPECT_TRUE(planned(d8.w, 16));
  EXPECT_FALSE(planned(d8.w, 17));
  HostWeight w4 = make_host_weight(WeightFormat::FP4_G32, 64, 256, 7401, true, 128, 128, false);
  EXPECT_FALSE(planned(dsinfer::test::upload(w4).w, 1));
  HostWeight k200 = make_host_weight(WeightFormat::FP8_BLOCK, 64, 200, 7402, true, 128, 128, false);  // K % 16 != 0
  EXPECT_FALSE(planned(dsinfer::test::upload(k200).w, 1));
}

// The plan of a weight shape at M rows, on a fake 16-byte aligned weight (host only: no device needed).
od::GemvParams plan_for(WeightFormat f, int64_t groups, int64_t Ng, int64_t K, int64_t M) {
  DeviceWeight w;
  w.fmt = f;
  w.rows = groups * Ng;
  w.cols = K;
  w.data = reinterpret_cast<const void*>(uintptr_t(4096));
  od::GemmArgs a;
  a.M = M;
  a.groups = groups;
  a.N = Ng;
  a.K = K;
  od::set_weight_args(a, w);
  od::GemvParams p;
  EXPECT_TRUE(od::plan_gemm_gemv(a, f, 132, p)) << "N=" << Ng << " K=" << K << " M=" << M;
  return p;
}

// What the plan test promises (tests/unit/test_gemm_plan.cpp GemvPlan.OneKWarpAtEveryMWhereRowsMustMatchDecode),
// on the device: row 0 of x gives the same bits at every M = 1..16 for one-K-warp shapes (the other rows random),
// as a decode row (M = 1) and the rows of a verify step (M = 1 + k) must.
TEST(GemvGpu, OneKWarpRowsBitEqualAtEveryM) {
  DSI_SKIP_WITHOUT_GPU();
  struct S {
    WeightFormat f;
    int64_t N, K;
  };
  uint64_t seed = 7500;
  for (S s : {S{WeightFormat::BF16, 3072, 256}, S{WeightFormat::FP8_BLOCK, 32768, 1024}, S{WeightFormat::FP8_BLOCK, 8192, 1040}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " K=" << s.K);
    HostWeight hw = make_host_weight(s.f, s.N, s.K, ++seed);
    auto dw = dsinfer::test::upload(hw);
    std::vector<float> first;
    for (int64_t M = 1; M <= dsinfer::ops::cuda::kGemmGemvMaxM; ++M) {
      ASSERT_EQ(plan_for(s.f, 1, s.N, s.K, M).wk, 1);
      std::vector<float> x = random_floats(size_t(M * s.K), seed + 100 + uint64_t(M));
      const std::vector<float> row0 = random_floats(size_t(s.K), seed);  // the same row 0 at every M
      std::copy(row0.begin(), row0.end(), x.begin());
      auto dx = to_device(x);
      auto dy = to_device(std::vector<float>(size_t(M * s.N), NAN));
      ASSERT_TRUE(gemm_cuda(dx.data(), M, s.K, dw.w, dy.data(), s.N, false, nullptr, kGemv).is_ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> y = to_host(dy, size_t(s.N));  // row 0
      if (M == 1) first = y;
      else EXPECT_EQ(std::memcmp(y.data(), first.data(), y.size() * 4), 0) << "row 0 differs at M=" << M;
    }
  }
}

// The whole-tile form (GemvParams::even: no bounds checks, shifts, one scale a vector for a warp's rows, applied to
// x at 1-2 rows) gives the general form's bits: the same products (w * s * x, s a power of two) summed in the same
// order. Every V4-Flash decode shape (the plan marks them all even up to 8 rows) and small whole-tile ones, M from 1
// to 8; x of moderate magnitude, as activations are (the equality needs x * s to stay a normal float).
TEST(GemvGpu, EvenTilesGiveTheGeneralFormsBits) {
  DSI_SKIP_WITHOUT_GPU();
  struct S {
    WeightFormat f;
    int64_t groups, Ng, K;
  };
  uint64_t seed = 7600;
  const S shapes[] = {{WeightFormat::FP8_BLOCK, 1, 32768, 1024}, {WeightFormat::FP8_BLOCK, 1, 4096, 8192},
                      {WeightFormat::FP8_BLOCK, 8, 1024, 4096},  {WeightFormat::FP8_BLOCK, 1, 2048, 4096},
                      {WeightFormat::FP8_BLOCK, 1, 576, 4096},   {WeightFormat::BF16, 1, 1024, 512},
                      {WeightFormat::BF16, 1, 4096, 4096},       {WeightFormat::FP8_BLOCK, 2, 128, 1024}};
  for (const S& s : shapes) {
    HostWeight hw = make_host_weight(s.f, s.groups * s.Ng, s.K, ++seed, true, 128, 128, /*want_deq=*/false);
    auto dw = dsinfer::test::upload(hw);
    for (int64_t M : {1, 2, 3, 5, 8}) {
      SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(s.f) << " groups=" << s.groups
                                      << " N=" << s.Ng << " K=" << s.K << " M=" << M);
      od::GemvParams p = plan_for(s.f, s.groups, s.Ng, s.K, M);
      ASSERT_TRUE(p.even);
      const int64_t ldx = s.groups * s.K, ldy = s.groups * s.Ng;
      auto dx = to_device(random_floats(size_t(M * ldx), ++seed));
      auto dy_even = to_device(std::vector<float>(size_t(M * ldy), NAN));
      auto dy_gen = to_device(std::vector<float>(size_t(M * ldy), NAN));
      od::GemmArgs a;
      a.M = M;
      a.groups = s.groups;
      a.N = s.Ng;
      a.K = s.K;
      a.x = dx.data();
      a.ldx = ldx;
      a.x_gstride = s.groups > 1 ? s.K : 0;
      a.ldy = ldy;
      a.y_gstride = s.groups > 1 ? s.Ng : 0;
      od::set_weight_args(a, dw.w);
      od::set_x_vec(a);
      a.y = dy_even.data();
      ASSERT_EQ(od::launch_gemm_gemv(s.f, a, p, nullptr), 0);
      p.even = false;
      a.y = dy_gen.data();
      ASSERT_EQ(od::launch_gemm_gemv(s.f, a, p, nullptr), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> ye = to_host(dy_even, size_t(M * ldy)), yg = to_host(dy_gen, size_t(M * ldy));
      for (float v : ye) ASSERT_TRUE(std::isfinite(v));
      EXPECT_EQ(std::memcmp(ye.data(), yg.data(), ye.size() * 4), 0);
    }
  }
}

}  // namespace
