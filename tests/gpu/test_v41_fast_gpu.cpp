// GPU checks of the V4.1 fast path's widened FP8 GEMM (ops/gemm/gemm_widen_cuda.h, gemm_widen_plan.h): FP8 weights
// of 32 x 32 UE8M0 blocks (the release's format) widened to bf16 and run on cuBLASLt's bf16 GEMM.
// Thresholds: the widening is exact (a power-of-two scale times an e4m3 value fits bf16), so every element equals the
// CPU dequantization (io::dequant_fp8_block) rounded to bf16, bit for bit, NaN codes included. The GEMM on the widened
// weight against an fp64 GEMM of the exact dequantization with x rounded to bf16 as the engine does (RNE): only the
// fp32 accumulation order differs, ~sqrt(K) * 2^-24 ~ 2e-6 normalised; allowed 2e-4 as test_gemm_lt_dense_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtypes.h"
#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/gemm/gemm_widen_cuda.h"
#include "ops/gemm/gemm_widen_plan.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::DeviceWeight;
using dsinfer::ops::cuda::GemmLtEngine;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
namespace sf = dsinfer::small_float;

TEST(GpuV41Fast, WidenFp8IsTheExactBf16Dequantization) {
  DSI_SKIP_WITHOUT_GPU();
  // 32 x 32 blocks on whole blocks, and on a ragged shape (N and K not multiples of the block), with NaN codes.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 160}, {70, 200}}) {
    SCOPED_TRACE(testing::Message() << "[" << n << ", " << k << "]");
    HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, n, k, 501 + uint64_t(n), true, 32, 32);
    hw.data[5] = 0x7F;  // e4m3 NaN codes
    hw.data[size_t(n * k - 3)] = 0xFF;
    hw.deq[5] = NAN;
    hw.deq[size_t(n * k - 3)] = NAN;
    auto d = dsinfer::test::upload(hw);
    DeviceBuffer<uint16_t> out;
    ASSERT_TRUE(out.alloc(size_t(n * k)).is_ok());
    const auto v = dsinfer::ops::cuda::widen_fp8_bf16(d.w, out.data(), n * k, nullptr);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v.value().fmt, WeightFormat::BF16);
    EXPECT_EQ(v.value().rows, n);
    EXPECT_EQ(v.value().cols, k);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> got = to_host(out, size_t(n * k));
    int64_t bad = 0;
    for (int64_t i = 0; i < n * k; ++i) {
      const float want = hw.deq[size_t(i)];
      const bool ok = std::isnan(want) ? std::isnan(dsinfer::bf16_to_f32(got[size_t(i)]))
                                       : got[size_t(i)] == dsinfer::f32_to_bf16(want) &&
                                             dsinfer::bf16_to_f32(got[size_t(i)]) == want;
      if (!ok && bad++ < 5) ADD_FAILURE() << "element " << i << ": got bf16 " << got[size_t(i)] << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
  // Bad input is refused by name, never launched.
  HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, 8, 64, 510, true, 32, 32);
  auto d = dsinfer::test::upload(hw);
  DeviceBuffer<uint16_t> out;
  ASSERT_TRUE(out.alloc(512).is_ok());
  EXPECT_FALSE(dsinfer::ops::cuda::widen_fp8_bf16(d.w, out.data(), 511, nullptr).is_ok()) << "output too small";
  DeviceWeight fp32s = d.w;
  fp32s.scale_e8m0 = false;
  EXPECT_FALSE(dsinfer::ops::cuda::widen_fp8_bf16(fp32s, out.data(), 512, nullptr).is_ok()) << "fp32 scales";
}

TEST(GpuV41Fast, WidenedWeightOnCublasLtMatchesReference) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t N = 512, K = 1024;
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, N, K, 520, true, 32, 32);
  auto d = dsinfer::test::upload(hw);
  ASSERT_TRUE(dsinfer::ops::cuda::gemm_widen_supports(d.w));
  DeviceBuffer<uint16_t> wide;
  ASSERT_TRUE(wide.alloc(size_t(N * K)).is_ok());
  const auto v = dsinfer::ops::cuda::widen_fp8_bf16(d.w, wide.data(), N * K, nullptr);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  GemmLtEngine eng;
  for (int64_t M : {64, 130}) {
    SCOPED_TRACE(testing::Message() << "M = " << M);
    const std::vector<float> x = dsinfer::test::random_floats(size_t(M * K), 530 + uint64_t(M), 2.0f);
    auto dx = to_device(x);
    DeviceBuffer<float> dy;
    ASSERT_TRUE(dy.alloc(size_t(M * N)).is_ok());
    const auto st = eng.gemm(dx.data(), M, K, v.value(), dy.data(), N, false, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> y = to_host(dy, size_t(M * N));
    std::vector<float> ref(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double r = 0.0;
        for (int64_t k = 0; k < K; ++k)
          r += double(sf::from_bits(sf::bf16_f32_bits(sf::f32_to_bf16_bits(x[size_t(m * K + k)])))) *
               double(hw.deq[size_t(n * K + k)]);
        ref[size_t(m * N + n)] = float(r);
      }
    const double err = normalized_error(y, ref);
    std::printf("widened FP8 (32x32) on cuBLASLt bf16, M = %lld: normalised error %.3g\n", static_cast<long long>(M), err);
    EXPECT_LT(err, 2e-4);
  }
}

}  // namespace
