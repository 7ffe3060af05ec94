// GPU checks of the cuBLASLt GEMM engine's dense path (ops/gemm/gemm_lt_cuda.h; the lm head and the compressors'
// wkv in the runner): BF16 weights (x rounded to bf16 by gemm_lt_bf16_kernel, bf16 tensor-core products, fp32
// accumulation) and F32 weights (CUBLAS_COMPUTE_32F_FAST_16BF), against an fp64 GEMM on the host, on an lm-head-like
// shape (N = 8,080: not a multiple of 128; K = 4,096), odd M (no multiple-of-4 rule here), row strides and
// accumulate. The routing rule (gemm_plan.h gemm_lt_wants) is CPU-tested in tests/unit/test_gemm_plan.cpp.
// Tolerances (normalised L2 error): BF16 W, reference with x rounded to bf16 exactly as the kernel does (RNE), so
// only fp32 accumulation order differs: ~sqrt(K) * 2^-24 ~ 4e-6, allowed 2e-4. F32 W, reference unrounded: the
// library rounds both operands to bf16, 2^-9 relative each, rms of a product's error ~ sqrt(2/3) 2^-9 ~ 1.6e-3
// (truncation instead of rounding would double it), allowed 6e-3. A wrong operand order or layout gives O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_lt_cuda.h"
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

// One engine call against the fp64 reference over every `col_step`-th output column; columns past N must stay
// untouched. Returns the normalised error (or -1 when the engine refused; y is then checked untouched).
double check_dense(GemmLtEngine& eng, const HostWeight& hw, const dsinfer::ops::cuda::DeviceWeight& w, int64_t M,
                   int64_t ldx, int64_t ldy, bool acc, int64_t col_step, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << hw.rows << " K=" << hw.cols << " ldx=" << ldx << " ldy="
                                  << ldy << " acc=" << acc);
  const int64_t N = hw.rows, K = hw.cols;
  const std::vector<float> x = dsinfer::test::random_floats(size_t(M * ldx), seed, 2.0f);
  const std::vector<float> y0 = acc ? dsinfer::test::random_floats(size_t(M * ldy), seed + 1)
                                    : std::vector<float>(size_t(M * ldy), NAN);
  auto dx = to_device(x);
  auto dy = to_device(y0);
  const dsinfer::Status st = eng.gemm(dx.data(), M, ldx, w, dy.data(), ldy, acc, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = to_host(dy, y0.size());
  if (!st.is_ok()) {
    EXPECT_EQ(std::memcmp(y.data(), y0.data(), y.size() * 4), 0) << "refused call wrote y: " << st.message();
    return -1.0;
  }
  const bool round_x = hw.fmt == WeightFormat::BF16;
  std::vector<float> ref, got;
  std::vector<double> xd(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const float v = x[size_t(m * ldx + k)];
      xd[size_t(k)] = round_x ? double(sf::from_bits(sf::bf16_f32_bits(sf::f32_to_bf16_bits(v)))) : double(v);
    }
    for (int64_t n = 0; n < ldy; ++n) {
      const float v = y[size_t(m * ldy + n)];
      if (n >= N) {
        if (acc) EXPECT_EQ(v, y0[size_t(m * ldy + n)]) << "write outside N, row " << m;
        else EXPECT_TRUE(std::isnan(v)) << "write outside N, row " << m;
        continue;
      }
      if (n % col_step != 0 && n != N - 1) continue;
      double r = acc ? double(y0[size_t(m * ldy + n)]) : 0.0;
      for (int64_t k = 0; k < K; ++k) r += xd[size_t(k)] * double(hw.deq[size_t(n * K + k)]);
      ref.push_back(float(r));
      got.push_back(v);
    }
  }
  return normalized_error(got, ref);
}

TEST(GemmLtDenseGpu, Bf16HeadShapeParity) {
  DSI_SKIP_WITHOUT_GPU();
  GemmLtEngine eng;
  const HostWeight head = make_host_weight(WeightFormat::BF16, 8080, 4096, 401);
  auto d = dsinfer::test::upload(head);
  ASSERT_TRUE(GemmLtEngine::supports(d.w));
  ASSERT_TRUE(eng.prepare(d.w, 256, nullptr).is_ok());
  uint64_t seed = 410;
  for (int64_t M : {9, 64, 67, 256}) {
    const double err = check_dense(eng, head, d.w, M, 4096, 8080, false, 7, ++seed);
    EXPECT_GE(err, 0.0) << "engine refused M = " << M;
    EXPECT_LT(err, 2e-4) << "M = " << M;
  }
  const double acc = check_dense(eng, head, d.w, 33, 4100, 8084, true, 7, ++seed);  // strides, accumulate
  EXPECT_GE(acc, 0.0);
  EXPECT_LT(acc, 2e-4);
}

TEST(GemmLtDenseGpu, F32WeightParity) {
  DSI_SKIP_WITHOUT_GPU();
  GemmLtEngine eng;
  const HostWeight w = make_host_weight(WeightFormat::F32, 512, 1024, 402);
  auto d = dsinfer::test::upload(w);
  for (int64_t M : {16, 130}) {
    const double err = check_dense(eng, w, d.w, M, 1024, 512, false, 1, 420 + uint64_t(M));
    EXPECT_GE(err, 0.0) << "engine refused M = " << M;
    EXPECT_LT(err, 6e-3) << "M = " << M;
  }
  // ldx != K: F32 x is read in place with ld = K, so the engine refuses and leaves y alone.
  EXPECT_LT(check_dense(eng, w, d.w, 16, 1028, 512, false, 1, 430), 0.0);
}

}  // namespace
