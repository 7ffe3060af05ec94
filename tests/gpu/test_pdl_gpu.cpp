// Programmatic dependent launch (cuda/pdl.h): chains of dependent decode kernels, each op reading what the one before
// wrote, give bitwise the same result with plain launches, with PDL launches, and with PDL launches captured into a
// CUDA graph and replayed: (1) streaming GEMM -> RMSNorm in place -> GEMV -> scale in place, 24 times; (2) a decode
// layer's mHC skeleton at T = 1 (hc_pre: mix + finalize, whose weights load before the wait -> GEMV -> hc_post), 12
// times. A kernel that touched its input before its pdl_wait_then_release would read a value the previous kernel
// had not yet written (its blocks are scheduled during that kernel's tail) and change the bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/pdl.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::GemmPrecision;
using dsinfer::ops::cuda::WeightFormat;

struct PdlGuard {  // restores the process-wide setting whatever the test does
  bool was = dsinfer::cuda::pdl_enabled();
  ~PdlGuard() { dsinfer::cuda::pdl_set_enabled(was); }
};

// Runs chain() from x0 (copied into x) three times: plain launches eager, PDL eager, PDL captured into a graph and
// replayed 3 times (each replay from x0); expects the three results bitwise equal and different from x0.
template <typename Chain>
void expect_same_bits(Chain&& chain, float* x, const std::vector<float>& x0, cudaStream_t s) {
  PdlGuard guard;
  auto reset = [&]() { return cudaMemcpyAsync(x, x0.data(), x0.size() * 4, cudaMemcpyHostToDevice, s) == cudaSuccess; };
  std::vector<std::vector<float>> got;
  for (int pass = 0; pass < 3; ++pass) {
    dsinfer::cuda::pdl_set_enabled(pass > 0);
    ASSERT_TRUE(reset());
    if (pass < 2) {
      ASSERT_TRUE(chain());
    } else {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t ge = nullptr;
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const bool ok = chain();
      ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
      ASSERT_TRUE(ok);
      ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
      for (int rep = 0; rep < 3; ++rep) {
        ASSERT_TRUE(reset());
        ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
      }
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<float> h(x0.size());
    ASSERT_EQ(cudaMemcpy(h.data(), x, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    got.push_back(std::move(h));
  }
  for (int pass = 1; pass < 3; ++pass)
    EXPECT_EQ(std::memcmp(got[0].data(), got[size_t(pass)].data(), x0.size() * 4), 0)
        << (pass == 1 ? "PDL eager" : "PDL graph") << " differs from plain launches";
  bool moved = false;  // the chain did something: the result is not the start
  for (size_t i = 0; i < x0.size() && !moved; ++i) moved = got[0][i] != x0[i];
  EXPECT_TRUE(moved);
}

TEST(GpuPdl, DependentChainEqualsPlainLaunchesEagerAndInAGraph) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t M = 4, D = 4096, R = 1024;
  const auto wa = dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, R, D, 71);
  const auto wb = dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, D, R, 72);
  auto da = dsinfer::test::upload(wa), db = dsinfer::test::upload(wb);
  const std::vector<float> x0 = dsinfer::test::random_floats(size_t(M * D), 73), nw = dsinfer::test::random_floats(size_t(R), 74);
  auto dx = to_device(x0), dnw = to_device(nw);
  auto dy = to_device(std::vector<float>(size_t(M * R), 0.0f));
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto chain = [&]() {
    for (int i = 0; i < 24; ++i) {
      if (!dsinfer::ops::cuda::gemm_cuda(dx.data(), M, D, da.w, dy.data(), R, false, s, GemmPrecision::kBf16).is_ok()) return false;
      if (!dsinfer::ops::cuda::rmsnorm(dy.data(), M, R, dnw.data(), 1e-6f, dy.data(), s).is_ok()) return false;
      if (!dsinfer::ops::cuda::gemm_cuda(dy.data(), M, R, db.w, dx.data(), D, false, s, GemmPrecision::kGemv).is_ok()) return false;
      if (!dsinfer::ops::cuda::scale_cuda(dx.data(), M * D, 0.25f, s).is_ok()) return false;
    }
    return true;
  };
  expect_same_bits(chain, dx.data(), x0, s);
  cudaStreamDestroy(s);
}

TEST(GpuPdl, MhcDecodeSkeletonEqualsPlainLaunchesEagerAndInAGraph) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t n = 4, D = 4096, mixes = (2 + n) * n;
  const std::vector<float> fn = dsinfer::test::random_floats(size_t(mixes * n * D), 81, 0.02f);
  const std::vector<float> base = dsinfer::test::random_floats(size_t(mixes), 82);
  const std::vector<float> scale = dsinfer::test::random_floats(3, 83), nw = dsinfer::test::random_floats(size_t(D), 84);
  const std::vector<float> x0 = dsinfer::test::random_floats(size_t(n * D), 85);
  auto dfn = to_device(fn), dbase = to_device(base), dscale = to_device(scale), dnw = to_device(nw), dX = to_device(x0);
  const auto wf = dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, D, D, 86);
  auto dw = dsinfer::test::upload(wf);
  auto dy = to_device(std::vector<float>(size_t(D), 0.0f)), df = to_device(std::vector<float>(size_t(D), 0.0f));
  auto dpost = to_device(std::vector<float>(size_t(n), 0.0f)), dcomb = to_device(std::vector<float>(size_t(n * n), 0.0f));
  dsinfer::ops::cuda::HcNormParams p;
  p.fn = dfn.data();
  p.base = dbase.data();
  p.scale = dscale.data();
  p.n = n;
  p.dim = D;
  p.sinkhorn_iters = 20;
  p.norm_w = dnw.data();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto chain = [&]() {
    namespace oc = dsinfer::ops::cuda;
    for (int i = 0; i < 12; ++i) {
      if (!oc::hc_pre_norm(p, dX.data(), 1, dy.data(), dpost.data(), dcomb.data(), s).is_ok()) return false;
      if (!oc::gemm_cuda(dy.data(), 1, D, dw.w, df.data(), D, false, s, GemmPrecision::kGemv).is_ok()) return false;
      if (!oc::hc_post(1, n, D, df.data(), dpost.data(), dcomb.data(), dX.data(), s).is_ok()) return false;
    }
    return true;
  };
  expect_same_bits(chain, dX.data(), x0, s);
  cudaStreamDestroy(s);
}

}  // namespace
