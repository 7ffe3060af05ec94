// GPU parity of the bf16 streaming tensor-core GEMM (GemmPrecision::kBf16, FP8_BLOCK weights, M <= 256) against
// ops::linear_ref on the io::dequant_fp8_block fp32 weights: M = 1..256, V4-Flash shapes, odd N, K not a multiple
// of 128 (partial last scale block), non-128 blocks, fp32 and E8M0 scales, row strides, accumulate, grouped,
// split-K determinism, fallbacks, and that the kernel is really the one planned (detail::plan_gemm_stream).
// Tolerance (normalised L2 error): weights are exact in bf16 (e4m3 has 3 mantissa bits), products are exact in
// fp32 and sums are fp32, so the error is x's bf16 rounding: relative error per element uniform in [-2^-9, 2^-9]
// (rms 2^-9 / sqrt(3) = 1.1e-3), independent across k, so with random signs the normalised error of y is ~1.1e-3
// as well. 4e-3 leaves ~3.5x margin; a wrong fragment, k order or scale gives O(1).
#include <gtest/gtest.h>

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

constexpr double kStreamTol = 4e-3;
constexpr GemmPrecision kBf16 = GemmPrecision::kBf16;

// Whether gemm_cuda / gemm_grouped_cuda with kBf16 take the streaming kernel for this weight and M.
bool planned(const DeviceWeight& w, int64_t M, int64_t groups = 1) {
  od::GemmArgs a;
  a.M = M;
  a.groups = groups;
  a.N = w.rows / groups;
  a.K = w.cols;
  od::set_weight_args(a, w);
  od::StreamParams p;
  return od::plan_gemm_stream(a, w.fmt, 132, p);
}

std::vector<int64_t> sample_rows(int64_t M, int64_t want) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < std::min(M, want); ++i) r.push_back(M <= want ? i : i * (M - 1) / (want - 1));
  return r;
}

// One kBf16 gemm on poisoned (or random, with accumulate) y: every element in [0, N) written and finite, nothing
// written past N, sampled rows against the reference; a second call must give bitwise the same y.
void check_stream(const HostWeight& hw, int64_t M, int64_t ldx, int64_t ldy, bool acc, int64_t max_ref_rows,
                  uint64_t seed, bool expect_stream = true) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << hw.rows << " K=" << hw.cols << " blocks " << hw.bn << "x"
                                  << hw.bk << (hw.e8m0 ? " e8m0" : " f32") << " ldx=" << ldx << " ldy=" << ldy
                                  << " acc=" << acc);
  const int64_t N = hw.rows, K = hw.cols;
  auto dw = dsinfer::test::upload(hw);
  ASSERT_EQ(planned(dw.w, M), expect_stream);
  const std::vector<float> x = random_floats(size_t(M * ldx), seed);
  const std::vector<float> y0 = acc ? random_floats(size_t(M * ldy), seed + 1) : std::vector<float>(size_t(M * ldy), NAN);
  auto dx = to_device(x);
  auto dy = to_device(y0), dy2 = to_device(y0);
  ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw.w, dy.data(), ldy, acc, nullptr, kBf16).is_ok());
  ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw.w, dy2.data(), ldy, acc, nullptr, kBf16).is_ok());
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
  EXPECT_LT(err, kStreamTol) << "normalized error " << err;
}

TEST(GemmStreamGpu, AllSmallMOnFlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 1000;
  HostWeight wq_a = make_host_weight(WeightFormat::FP8_BLOCK, 1024, 4096, ++seed);
  for (int64_t M : {1, 2, 7, 8, 9, 31, 64, 100, 256}) check_stream(wq_a, M, 4096, 1024, false, 12, ++seed);
  HostWeight wo_b = make_host_weight(WeightFormat::FP8_BLOCK, 4096, 8192, ++seed);
  for (int64_t M : {1, 9, 64, 256}) check_stream(wo_b, M, 8192, 4096, false, 4, ++seed);
  HostWeight wq_b = make_host_weight(WeightFormat::FP8_BLOCK, 32768, 1024, ++seed);
  for (int64_t M : {1, 64}) check_stream(wq_b, M, 1024, 32768, false, 3, ++seed);
}

TEST(GemmStreamGpu, OddShapesBlocksAndScales) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 2000;
  // N = 200 (not a multiple of 64 / 128), K = 1024, fp32 scales
  HostWeight a = make_host_weight(WeightFormat::FP8_BLOCK, 200, 1024, ++seed, /*e8m0=*/false);
  for (int64_t M : {1, 8, 31, 100, 256}) check_stream(a, M, 1024, 200, false, 40, ++seed);
  // K = 192: the last 128-wide scale block is half full; N = 77
  HostWeight b = make_host_weight(WeightFormat::FP8_BLOCK, 77, 192, ++seed);
  for (int64_t M : {1, 9, 64, 256}) check_stream(b, M, 192, 77, false, 256, ++seed);
  // 64 x 64 blocks (block_n smaller than the 64-row block tile is fine; every row has its own scale), E8M0 and f32
  for (bool e8 : {true, false}) {
    HostWeight c = make_host_weight(WeightFormat::FP8_BLOCK, 300, 640, ++seed, e8, 64, 64);
    for (int64_t M : {2, 64, 130}) check_stream(c, M, 640, 300, false, 40, ++seed);
  }
  // block_n = 32 (scale changes inside a warp's 16-row tile), block_k = 256 (4 chunks per scale block)
  HostWeight d = make_host_weight(WeightFormat::FP8_BLOCK, 96, 1280, ++seed, true, 32, 256);
  for (int64_t M : {1, 17}) check_stream(d, M, 1280, 96, false, 17, ++seed);
  // e4m3 subnormal codes only (0x01..0x07 and negatives): the bf16 conversion must keep them
  HostWeight e = make_host_weight(WeightFormat::FP8_BLOCK, 128, 256, ++seed, true, 128, 128, false);
  for (size_t i = 0; i < e.data.size(); ++i) e.data[i] = uint8_t((1 + i % 7) | (i % 3 == 0 ? 0x80 : 0));
  e.deq.resize(e.data.size());
  dsinfer::io::dequant_fp8_block(e.data.data(), 128, 256, e.scale.data(), dsinfer::DType::F8_E8M0, 128, 128, e.deq.data());
  check_stream(e, 5, 256, 128, false, 5, ++seed);
}

TEST(GemmStreamGpu, StridesAndAccumulate) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 3000;
  HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, 1024, 4096, ++seed);
  check_stream(w, 3, 4100, 1027, false, 3, ++seed);   // 16-byte x loads, ldy not a multiple of anything
  check_stream(w, 37, 4097, 1024, false, 8, ++seed);  // ldx = K + 1: scalar x loads
  check_stream(w, 1, 4096, 1024, true, 1, ++seed);    // accumulate into y
  check_stream(w, 64, 4096, 1030, true, 8, ++seed);
  check_stream(w, 256, 4104, 1024, true, 6, ++seed);
}

// Shapes the streaming kernel does not take fall back to the old kernels, still correct with kBf16.
TEST(GemmStreamGpu, FallbacksStayCorrect) {
  DSI_SKIP_WITHOUT_GPU();
  uint64_t seed = 4000;
  HostWeight k200 = make_host_weight(WeightFormat::FP8_BLOCK, 64, 200, ++seed);  // K % 64 != 0
  check_stream(k200, 4, 200, 64, false, 4, ++seed, /*expect_stream=*/false);
  HostWeight bk32 = make_host_weight(WeightFormat::FP8_BLOCK, 64, 256, ++seed, true, 64, 32);  // block_k 32
  check_stream(bk32, 20, 256, 64, false, 20, ++seed, false);
  HostWeight w = make_host_weight(WeightFormat::FP8_BLOCK, 128, 512, ++seed);
  check_stream(w, 257, 512, 128, false, 8, ++seed, false);  // M > kGemmStreamMaxM: tiled kernel
  HostWeight b = make_host_weight(WeightFormat::BF16, 128, 512, ++seed);
  check_stream(b, 40, 512, 128, false, 8, ++seed, false);
}

void check_grouped(int64_t G, int64_t Ng, int64_t K, int64_t M, int64_t max_ref_rows, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "G=" << G << " Ng=" << Ng << " K=" << K << " M=" << M);
  HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, G * Ng, K, seed);
  auto dw = dsinfer::test::upload(hw);
  ASSERT_TRUE(planned(dw.w, M, G));
  const int64_t ldx = G * K, ldy = G * Ng;  // the forward's layout
  const std::vector<float> x = random_floats(size_t(M * ldx), seed + 1);
  auto dx = to_device(x);
  auto dy = to_device(std::vector<float>(size_t(M * ldy), NAN));
  ASSERT_TRUE(gemm_grouped_cuda(dx.data(), M, ldx, K, dw.w, G, dy.data(), ldy, Ng, nullptr, kBf16).is_ok());
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
  EXPECT_LT(err, kStreamTol) << "normalized error " << err;
}

TEST(GemmStreamGpu, GroupedProjection) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped(3, 80, 256, 4, 4, 5001);    // scale blocks straddle group boundaries
  check_grouped(3, 80, 256, 70, 70, 5002);
  check_grouped(8, 1024, 4096, 1, 1, 5003);  // V4-Flash wo_a
  check_grouped(8, 1024, 4096, 64, 4, 5004);
}

// The persistent grid (StreamParams::row_grid) and the prefetch depth change which block computes a row and how far
// ahead the weights are loaded, never a sum: every (row_grid, depth) gives bitwise the y of the one-block-per-row-block
// launch, which itself matches the reference. Covers blocks walking 1..all row blocks, row counts that do not divide
// evenly, the prefetch running on into the next row block (chunks per split a multiple of the depth) and not
// (K = 640: 10 chunks), cluster split-K, several token chunks and accumulate.
void check_grids(int64_t N, int64_t K, int64_t M, bool acc, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << N << " K=" << K << " acc=" << acc);
  HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, N, K, seed);
  auto dw = dsinfer::test::upload(hw);
  const std::vector<float> x = random_floats(size_t(M * K), seed + 1);
  const std::vector<float> y0 = acc ? random_floats(size_t(M * N), seed + 2) : std::vector<float>(size_t(M * N), NAN);
  auto dx = to_device(x);
  od::GemmArgs a;
  a.M = M;
  a.N = N;
  a.K = K;
  a.x = dx.data();
  a.ldx = K;
  a.ldy = N;
  a.accumulate = acc;
  od::set_weight_args(a, dw.w);
  od::set_x_vec(a);
  od::StreamParams p;
  ASSERT_TRUE(od::plan_gemm_stream(a, WeightFormat::FP8_BLOCK, 132, p));
  auto run = [&](int row_grid, int depth) {
    auto dy = to_device(y0);
    od::GemmArgs c = a;
    c.y = dy.data();
    od::StreamParams q = p;
    q.row_grid = row_grid;
    q.depth = depth;
    EXPECT_EQ(od::launch_gemm_stream(c, q, nullptr), 0);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return to_host(dy, y0.size());
  };
  const std::vector<float> base = run(0, 4);
  std::vector<float> ref, got;
  for (int64_t m : sample_rows(M, 6)) {
    std::vector<float> r(static_cast<size_t>(N));
    dsinfer::ops::linear_ref(x.data() + m * K, 1, K, hw.deq.data(), N, r.data());
    for (int64_t n = 0; n < N; ++n) {
      ref.push_back(r[size_t(n)] + (acc ? y0[size_t(m * N + n)] : 0.0f));
      got.push_back(base[size_t(m * N + n)]);
    }
  }
  const double err = normalized_error(got, ref);
  EXPECT_LT(err, kStreamTol) << "normalized error " << err;
  const int row_blocks = int((N + 63) / 64);
  for (int depth : {4, 8})
    for (int row_grid : {0, 1, 2, 3, row_blocks - 1, row_blocks}) {
      if (row_grid < 0) continue;
      const std::vector<float> y = run(row_grid, depth);
      EXPECT_EQ(std::memcmp(y.data(), base.data(), y.size() * 4), 0)
          << "row_grid " << row_grid << " depth " << depth << " (splits " << p.splits << ", tokens " << p.tokens << ")";
    }
}

TEST(GemmStreamGpu, PersistentGridAndDepthKeepBits) {
  DSI_SKIP_WITHOUT_GPU();
  check_grids(1000, 1024, 1, false, 6001);
  check_grids(1000, 1024, 20, false, 6002);
  check_grids(1000, 1024, 64, true, 6003);
  check_grids(1000, 1024, 150, false, 6004);
  check_grids(520, 640, 33, false, 6005);   // 10 chunks per row: depth 8 reloads at every row block
  check_grids(4096, 8192, 64, false, 6006);  // wo_b: cluster split-K, 2 token chunks
  // The fast path's plan at the V4-Flash shapes is persistent where the row blocks exceed the resident blocks.
  od::GemmArgs a;
  a.M = 64;
  a.N = 32768;
  a.K = 1024;
  HostWeight hw = make_host_weight(WeightFormat::FP8_BLOCK, 256, 1024, 6007);
  auto dw = dsinfer::test::upload(hw);
  od::set_weight_args(a, dw.w);
  a.N = 32768;
  od::StreamParams p;
  ASSERT_TRUE(od::plan_gemm_stream(a, WeightFormat::FP8_BLOCK, 132, p));
  EXPECT_GT(p.row_grid, 0);
  EXPECT_LT(p.row_grid, 512);
}

}  // namespace
