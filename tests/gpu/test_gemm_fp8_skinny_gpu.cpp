// GPU checks of the FP8 skinny wgmma GEMM (ops/gemm/gemm_fp8_skinny_cuda.h; written in session 24 without a device):
//  - the quantization kernel bit-exact against gemm_fp8sk::quantize_ref (the cuBLASLt engine's gemm_lt::quantize_ref
//    in the kernel's token layout; padded tokens zero);
//  - the GEMM against gemm_fp8sk::gemm_ref (fp64 of the same quantized operands) at the V4-Flash shapes (wq_a, wkv,
//    wq_b, wo_b, grouped wo_a) for M = 1..256 across every launch shape the plan makes (tok 8..128, the 64-row x 256
//    token tiles above 128 rows, split-K clusters of 2..8, the persistent grid), one and two terms, E8M0 and fp32
//    weight scales, odd N, padded ldx / ldy, unaligned x, accumulate; outputs past N untouched;
//  - against the cuBLASLt engine's two-term route (GemmLtEngine kFp8x2) on the same inputs;
//  - bitwise determinism (two calls), clean refusals; printed: whether a row's bits depend on M.
// Tolerance (normalised L2 error kSkTol = 1e-3 against the fp64 reference; derived, not yet measured): the operands
// the reference multiplies are exactly the kernel's (e4m3 codes, power-of-two or fp32 scales), so the error is the
// kernel's arithmetic: Hopper's FP8 wgmma sums each 128-k block (four k32 steps) with ~14 mantissa bits before the
// fp32 promotion (the reason DeepGEMM and this kernel promote every 128 k: ~1e-4 relative rms on random-sign data),
// then one fp32 fma per term and block (2^-24 each, ~K/128 of them). 1e-3 leaves ~10x margin over 1e-4; a wrong
// scale index, operand layout, swizzle or split sum gives O(1) (weight scales span 2^5 across blocks, activation
// blocks 1e-3 .. 30). Against cuBLASLt kFp8x2 (fp32 output, the same operands, its own block promotion): each is
// within ~1e-4 of the reference, so kSkLtTol = 2e-3. The first device run prints the measured errors (tighten then).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_fp8_skinny_cuda.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_fp8_skinny_ref.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/gemm/gemm_plan.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
namespace oc = dsinfer::ops::cuda;
namespace sk = dsinfer::ops::gemm_fp8sk;

constexpr double kSkTol = 1e-3;
constexpr double kSkLtTol = 2e-3;

int sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

// Activations whose 128-blocks have very different magnitudes (a wrong scale index shows).
std::vector<float> block_activations(int64_t M, int64_t ldx, uint64_t seed) {
  dsinfer::test::Rng r(seed);
  const float mags[] = {1e-3f, 0.1f, 1.0f, 30.0f, 0.02f};
  std::vector<float> x(size_t(M * ldx));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < ldx; ++k) x[size_t(m * ldx + k)] = mags[size_t(m + 3 * (k / 128)) % 5] * r.sym();
  return x;
}

struct Call {
  int64_t M = 1, groups = 1, ldx = 0, ldy = 0, x_off = 0;  // x_off floats: an x not 16-byte aligned
  bool acc = false;
  int terms = 2;
  int64_t row_step = 1;  // reference rows sampled
};

// One call on poisoned (or random, with accumulate) y against gemm_ref; outputs past N must stay untouched. Returns
// the normalised error (or -1 on refusal).
double check(const HostWeight& hw, const oc::DeviceWeight& w, const Call& c, uint64_t seed) {
  const int64_t G = c.groups, N = hw.rows / G, K = hw.cols;
  const int64_t xg = K, ldx = c.ldx ? c.ldx : G * K, ldy = c.ldy ? c.ldy : G * N, yg = N;
  SCOPED_TRACE(testing::Message() << "M=" << c.M << " N=" << N << " K=" << K << " groups=" << G << " terms=" << c.terms
                                  << " ldx=" << ldx << " ldy=" << ldy << " acc=" << c.acc << " x_off=" << c.x_off
                                  << (hw.e8m0 ? " e8m0" : " f32"));
  std::vector<float> xh = block_activations(c.M, ldx, seed);
  std::vector<float> xpad(size_t(c.x_off), 0.0f);
  xpad.insert(xpad.end(), xh.begin(), xh.end());
  const std::vector<float> y0 = c.acc ? dsinfer::test::random_floats(size_t(c.M * ldy), seed + 1)
                                      : std::vector<float>(size_t(c.M * ldy), NAN);
  auto dx = to_device(xpad);
  auto dy = to_device(y0);
  DeviceBuffer<uint8_t> ws;
  const size_t wsb = oc::gemm_fp8_skinny_workspace_bytes(G * K, c.terms);
  EXPECT_TRUE(ws.alloc(wsb).is_ok());
  const dsinfer::Status st = oc::gemm_fp8_skinny_cuda(dx.data() + c.x_off, c.M, ldx, xg, w, G, dy.data(), ldy, yg,
                                                      c.acc, c.terms, ws.data(), wsb, sm_count(), nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!st.is_ok()) {
    ADD_FAILURE() << st.message();
    return -1.0;
  }
  const std::vector<float> y = to_host(dy, y0.size());
  const std::vector<double> ref = sk::gemm_ref(xh.data(), c.M, ldx, xg, G, N, K, hw.data.data(), hw.scale.data(),
                                               hw.e8m0, c.terms, c.row_step);
  std::vector<float> got, want;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < ldy; ++n) {
      const float v = y[size_t(m * ldy + n)];
      if (n >= G * N) {
        if (c.acc) EXPECT_EQ(v, y0[size_t(m * ldy + n)]) << "write outside N, row " << m;
        else EXPECT_TRUE(std::isnan(v)) << "write outside N, row " << m;
        continue;
      }
      if ((n % N) % c.row_step != 0) continue;
      got.push_back(v);
      want.push_back(float((c.acc ? double(y0[size_t(m * ldy + n)]) : 0.0) + ref[size_t(m * G * N + n)]));
    }
  const double err = normalized_error(got, want);
  EXPECT_LT(err, kSkTol) << "normalized error " << err;
  std::printf("fp8 skinny M=%lld N=%lld K=%lld groups=%lld terms=%d: normalized error %.3e\n", (long long)c.M,
              (long long)N, (long long)K, (long long)G, c.terms, err);
  return err;
}

TEST(GemmFp8SkinnyGpu, QuantKernelMatchesHostReference) {
  DSI_SKIP_WITHOUT_GPU();
  struct Q {
    int64_t M, K, groups;
    int terms;
    bool vec;
  };
  uint64_t seed = 10;
  for (const Q& c : {Q{1, 4096, 1, 2, true}, Q{37, 1024, 1, 2, true}, Q{200, 512, 1, 2, true}, Q{256, 4096, 8, 2, true},
                     Q{64, 4096, 1, 1, true}, Q{5, 384, 2, 2, false}}) {
    SCOPED_TRACE(testing::Message() << "M=" << c.M << " K=" << c.K << " groups=" << c.groups << " terms=" << c.terms);
    oc::detail::Fp8SkinnyParams p;
    ASSERT_TRUE(oc::plan_gemm_fp8_skinny(c.M, 1024, c.K, c.groups, c.terms, sm_count(), p));
    const int64_t ldx = c.groups * c.K + (c.vec ? 0 : 1), kt = c.groups * c.K;
    const std::vector<float> x = block_activations(c.M, ldx, ++seed);
    auto dx = to_device(x);
    DeviceBuffer<uint8_t> ws;
    const int64_t rows = oc::detail::fp8sk_rows(p);
    ASSERT_TRUE(ws.alloc(size_t(rows * kt) + size_t(kt / 128 * rows) * 4).is_ok());
    ASSERT_EQ(cudaMemset(ws.data(), 0xAB, ws.size()), cudaSuccess);  // padding must be written, not left
    oc::detail::Fp8SkinnyArgs a;
    a.x = dx.data();
    a.ldx = ldx;
    a.x_gstride = c.K;
    a.M = c.M;
    a.groups = c.groups;
    a.N = 1024;
    a.K = c.K;
    a.q = ws.data();
    a.s = reinterpret_cast<float*>(ws.data() + rows * kt);
    a.x_vec = c.vec;
    (void)oc::detail::launch_fp8sk_quant(a, p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> q(size_t(rows * kt));
    std::vector<float> s(size_t(kt / 128 * rows));
    ASSERT_EQ(cudaMemcpy(q.data(), a.q, q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(s.data(), a.s, s.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<uint8_t> qr;
    std::vector<float> sr;
    sk::quantize_ref(x.data(), c.M, ldx, c.K, c.groups, c.K, c.terms, p.tok, p.units, qr, sr);
    ASSERT_EQ(qr.size(), q.size());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], qr[i]) << "code " << i;
    for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], sr[i]) << "scale " << i;
  }
}

// Every launch shape of the plan on wq_a's shape, both term counts.
TEST(GemmFp8SkinnyGpu, ParityWqaEveryTokenTile) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  const HostWeight wq_a = make_host_weight(WeightFormat::FP8_BLOCK, 1024, 4096, ++seed, true, 128, 128, false);
  auto d = dsinfer::test::upload(wq_a);
  for (int terms : {2, 1})
    for (int64_t M : {1, 8, 9, 16, 31, 64, 100, 128, 129, 200, 256}) {
      Call c;
      c.M = M;
      c.terms = terms;
      c.row_step = 3;
      check(wq_a, d.w, c, ++seed);
    }
}

// The persistent grid alone (no K split, no cluster): the device script's second smoke step, so that a hang of the
// split-K path can be told from one of the ring itself.
TEST(GemmFp8SkinnyGpu, PersistentGridSmoke) {
  DSI_SKIP_WITHOUT_GPU();
  const HostWeight wq_b = make_host_weight(WeightFormat::FP8_BLOCK, 32768, 1024, 150, true, 128, 128, false);
  auto d = dsinfer::test::upload(wq_b);
  oc::detail::Fp8SkinnyParams p;
  ASSERT_TRUE(oc::plan_gemm_fp8_skinny(8, 32768, 1024, 1, 2, sm_count(), p));
  ASSERT_EQ(p.splits, 1) << "this test is the persistent path";
  Call c;
  c.M = 8;
  c.row_step = 61;
  check(wq_b, d.w, c, 151);
}

// The 32 MB weights: wo_b (K = 8,192, split-K clusters), wq_b (N = 32,768: the persistent grid), wkv (N = 512).
TEST(GemmFp8SkinnyGpu, ParityFlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  const HostWeight wo_b = make_host_weight(WeightFormat::FP8_BLOCK, 4096, 8192, ++seed, true, 128, 128, false);
  const HostWeight wq_b = make_host_weight(WeightFormat::FP8_BLOCK, 32768, 1024, ++seed, true, 128, 128, false);
  const HostWeight wkv = make_host_weight(WeightFormat::FP8_BLOCK, 512, 4096, ++seed, true, 128, 128, false);
  auto d1 = dsinfer::test::upload(wo_b), d2 = dsinfer::test::upload(wq_b), d3 = dsinfer::test::upload(wkv);
  for (int64_t M : {1, 64, 130, 256}) {
    Call c;
    c.M = M;
    c.row_step = 17;
    check(wo_b, d1.w, c, ++seed);
    c.row_step = 61;
    check(wq_b, d2.w, c, ++seed);
    c.row_step = 1;
    check(wkv, d3.w, c, ++seed);
  }
}

// wo_a: 8 groups of 1,024 rows over x columns g * 4,096 (the runner's layout: x [M, 32,768], y [M, 8,192]).
TEST(GemmFp8SkinnyGpu, ParityGroupedWoa) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  const HostWeight wo_a = make_host_weight(WeightFormat::FP8_BLOCK, 8 * 1024, 4096, ++seed, true, 128, 128, false);
  auto d = dsinfer::test::upload(wo_a);
  for (int64_t M : {1, 17, 64, 256}) {
    Call c;
    c.M = M;
    c.groups = 8;
    c.row_step = 13;
    check(wo_a, d.w, c, ++seed);
  }
}

// fp32 weight scales, N not a multiple of the tile, K of 3 blocks, padded x / y rows, unaligned x, accumulate.
TEST(GemmFp8SkinnyGpu, OddShapesStridesAccumulate) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 400;
  const HostWeight odd = make_host_weight(WeightFormat::FP8_BLOCK, 200, 384, ++seed, /*e8m0=*/false, 128, 128, false);
  auto d = dsinfer::test::upload(odd);
  for (int64_t M : {1, 7, 66, 131}) {
    Call c;
    c.M = M;
    c.ldx = 390;
    c.ldy = 203;
    check(odd, d.w, c, ++seed);
    c.acc = true;
    c.x_off = 1;
    check(odd, d.w, c, ++seed);
    c.terms = 1;
    check(odd, d.w, c, ++seed);
  }
}

TEST(GemmFp8SkinnyGpu, MatchesCublasLtTwoTerms) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 500;
  struct S {
    int64_t N, K;
  };
  for (const S& s : {S{1024, 4096}, S{4096, 8192}, S{32768, 1024}}) {
    const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, s.N, s.K, ++seed, true, 128, 128, false);
    auto d = dsinfer::test::upload(hw);
    oc::GemmLtEngine eng(oc::GemmLtActivations::kFp8x2);
    ASSERT_TRUE(eng.prepare(d.w, 256, nullptr).is_ok());
    for (int64_t M : {64, 128, 256}) {
      SCOPED_TRACE(testing::Message() << "N=" << s.N << " K=" << s.K << " M=" << M);
      const std::vector<float> x = block_activations(M, s.K, ++seed);
      auto dx = to_device(x);
      DeviceBuffer<float> y1, y2;
      ASSERT_TRUE(y1.alloc(size_t(M * s.N)).is_ok());
      ASSERT_TRUE(y2.alloc(size_t(M * s.N)).is_ok());
      DeviceBuffer<uint8_t> ws;
      const size_t wsb = oc::gemm_fp8_skinny_workspace_bytes(s.K, 2);
      ASSERT_TRUE(ws.alloc(wsb).is_ok());
      ASSERT_TRUE(oc::gemm_fp8_skinny_cuda(dx.data(), M, s.K, 0, d.w, 1, y1.data(), s.N, 0, false, 2, ws.data(), wsb,
                                           sm_count(), nullptr)
                      .is_ok());
      const dsinfer::Status lt = eng.gemm(dx.data(), M, s.K, d.w, y2.data(), s.N, false, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (!lt.is_ok()) {
        std::printf("cuBLASLt refused M=%lld: %s\n", (long long)M, lt.message().c_str());
        continue;
      }
      const std::vector<float> a = to_host(y1, size_t(M * s.N)), b = to_host(y2, size_t(M * s.N));
      const double err = normalized_error(a, b);
      std::printf("fp8 skinny vs cuBLASLt x2 N=%lld K=%lld M=%lld: normalized difference %.3e\n", (long long)s.N,
                  (long long)s.K, (long long)M, err);
      EXPECT_LT(err, kSkLtTol);
    }
  }
}

// Measurement, not a pass / fail rule: whether a token's row has the same bits at M = 1 as inside M = 9 / 64 / 128
// calls (same K split for every M <= 128 at this N; only the wgmma N and the token tile change). If yes, a
// speculative verify step (1 + k rows) reproduces a decode step's rows with the kernel on.
TEST(GemmFp8SkinnyGpu, RowBitsAcrossMPrinted) {
  DSI_SKIP_WITHOUT_GPU();
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, 4096, 8192, 700, true, 128, 128, false);
  auto d = dsinfer::test::upload(hw);
  const std::vector<float> x = block_activations(256, 8192, 701);
  auto dx = to_device(x);
  DeviceBuffer<uint8_t> ws;
  const size_t wsb = oc::gemm_fp8_skinny_workspace_bytes(8192, 2);
  ASSERT_TRUE(ws.alloc(wsb).is_ok());
  std::vector<std::vector<float>> row0;
  for (int64_t M : {1, 9, 64, 128, 129, 256}) {
    DeviceBuffer<float> y;
    ASSERT_TRUE(y.alloc(size_t(M * 4096)).is_ok());
    ASSERT_TRUE(oc::gemm_fp8_skinny_cuda(dx.data(), M, 8192, 0, d.w, 1, y.data(), 4096, 0, false, 2, ws.data(), wsb,
                                         sm_count(), nullptr)
                    .is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> h = to_host(y, size_t(M * 4096));
    row0.emplace_back(h.begin(), h.begin() + 4096);
    std::printf("fp8 skinny row 0 at M=%lld bit-equal to M=1: %s\n", (long long)M,
                std::memcmp(row0.back().data(), row0.front().data(), 4096 * 4) == 0 ? "yes" : "no");
  }
}

TEST(GemmFp8SkinnyGpu, DeterministicAndRefusesCleanly) {
  DSI_SKIP_WITHOUT_GPU();
  const HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, 4096, 8192, 600, true, 128, 128, false);
  auto d = dsinfer::test::upload(hw);
  const int64_t M = 100;
  const std::vector<float> x = block_activations(M, 8192, 601);
  auto dx = to_device(x);
  DeviceBuffer<float> y1, y2;
  ASSERT_TRUE(y1.alloc(size_t(M * 4096)).is_ok());
  ASSERT_TRUE(y2.alloc(size_t(M * 4096)).is_ok());
  DeviceBuffer<uint8_t> ws;
  const size_t wsb = oc::gemm_fp8_skinny_workspace_bytes(8192, 2);
  ASSERT_TRUE(ws.alloc(wsb).is_ok());
  for (float* y : {y1.data(), y2.data()})
    ASSERT_TRUE(oc::gemm_fp8_skinny_cuda(dx.data(), M, 8192, 0, d.w, 1, y, 4096, 0, false, 2, ws.data(), wsb,
                                         sm_count(), nullptr)
                    .is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> a = to_host(y1, size_t(M * 4096)), b = to_host(y2, size_t(M * 4096));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "two calls differ";
  // M past the kernel's rows, a too-small workspace, K not a multiple of 128: errors before any launch.
  EXPECT_FALSE(oc::gemm_fp8_skinny_cuda(dx.data(), 257, 8192, 0, d.w, 1, y1.data(), 4096, 0, false, 2, ws.data(), wsb,
                                        sm_count(), nullptr)
                   .is_ok());
  EXPECT_FALSE(oc::gemm_fp8_skinny_cuda(dx.data(), M, 8192, 0, d.w, 1, y1.data(), 4096, 0, false, 2, ws.data(), 1024,
                                        sm_count(), nullptr)
                   .is_ok());
  oc::DeviceWeight bad = d.w;
  bad.cols = 8000;
  EXPECT_FALSE(oc::gemm_fp8_skinny_cuda(dx.data(), M, 8192, 0, bad, 1, y1.data(), 4096, 0, false, 2, ws.data(), wsb,
                                        sm_count(), nullptr)
                   .is_ok());
  const std::vector<float> c = to_host(y1, size_t(M * 4096));
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "a refused call wrote y";
}

}  // namespace
