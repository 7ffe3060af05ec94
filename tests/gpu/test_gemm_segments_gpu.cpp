// gemm_segments_cuda (several weights over one x in one skinny launch, gemm_cuda.h) against each weight's own
// gemm_cuda call (then scale_cuda where the segment scales): bitwise equal outputs, for V4-Flash's compressor and
// indexer projections (BF16, K = 4,096: N = 1,024 / 1,024 / 64 / 256 / 256, the head weights scaled by 1/8) at the
// decode rows the runner fuses (M = 1..8 under kBf16 and kFp32SmallM) and at batch-invariant sizes (M = 20, 300:
// the skinny kernel walks the rows in chunks of 8), plus odd shapes (N not a multiple of the block's 8 rows, FP8
// and F32 weights, a strided x, an odd scale), inside a CUDA graph, and the argument errors. Also the CPU reference
// (ops::linear_ref, rows 0, M / 2, M - 1) at 1e-5 normalised error (the skinny kernel's fp32 sums of exact
// products: gemm_gpu's kSkinnyTol), so that equal bits are not equal garbage.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/linear/linear.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::gemm_cuda;
using dsinfer::ops::cuda::gemm_segments_cuda;
using dsinfer::ops::cuda::GemmPrecision;
using dsinfer::ops::cuda::GemmSegment;
using dsinfer::ops::cuda::WeightFormat;

struct Shape {
  int64_t N;
  float scale;
};

// Runs the segments launch and the separate calls over the same x; expects every output bitwise equal and near
// the CPU reference.
void check_segments(WeightFormat fmt, int64_t K, const std::vector<Shape>& shapes, int64_t M, int64_t ldx,
                    GemmPrecision prec, uint64_t seed, bool graph = false) {
  SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(fmt) << " K=" << K << " M=" << M
                                  << " ldx=" << ldx << " segments=" << shapes.size() << " graph=" << graph);
  std::vector<dsinfer::test::HostWeight> hw;
  std::vector<dsinfer::ops::cuda::OwnedDeviceWeight> dw;
  for (size_t i = 0; i < shapes.size(); ++i) {
    hw.push_back(dsinfer::test::make_host_weight(fmt, shapes[i].N, K, seed + 11 * i));
    dw.push_back(dsinfer::test::upload(hw.back()));
  }
  const std::vector<float> x = dsinfer::test::random_floats(size_t(M * ldx), seed + 7);
  auto dx = to_device(x);
  std::vector<DeviceBuffer<float>> fused, apart;
  std::vector<GemmSegment> segs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::vector<float> poison(size_t(M * shapes[i].N), NAN);
    fused.push_back(to_device(poison));
    apart.push_back(to_device(poison));
    segs.push_back({dw[i].w, fused.back().data(), shapes[i].N, shapes[i].scale});
  }
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSERT_TRUE(gemm_cuda(dx.data(), M, ldx, dw[i].w, apart[i].data(), shapes[i].N, false, s, prec).is_ok());
    if (shapes[i].scale != 1.0f)
      ASSERT_TRUE(dsinfer::ops::cuda::scale_cuda(apart[i].data(), M * shapes[i].N, shapes[i].scale, s).is_ok());
  }
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const dsinfer::Status st = gemm_segments_cuda(dx.data(), M, ldx, segs.data(), int(segs.size()), s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  } else {
    const dsinfer::Status st = gemm_segments_cuda(dx.data(), M, ldx, segs.data(), int(segs.size()), s);
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t N = shapes[i].N;
    const std::vector<float> a = to_host(fused[i], size_t(M * N)), b = to_host(apart[i], size_t(M * N));
    for (size_t j = 0; j < a.size(); ++j) ASSERT_TRUE(std::isfinite(a[j])) << "segment " << i << " unwritten at " << j;
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "segment " << i << " (N " << N << ") differs";
    // The reference on rows 0, M / 2 and M - 1 (the others are bitwise the separate calls' already).
    std::vector<float> got;
    std::vector<float> ref(static_cast<size_t>(N));
    for (const int64_t m : {int64_t(0), M / 2, M - 1}) {
      got.assign(a.begin() + m * N, a.begin() + (m + 1) * N);
      dsinfer::ops::linear_ref(x.data() + m * ldx, 1, K, hw[i].deq.data(), N, ref.data());
      for (float& v : ref) v *= shapes[i].scale;
      EXPECT_LT(normalized_error(got, ref), 1e-5) << "segment " << i << " row " << m;
    }
  }
}

const std::vector<Shape> kV4FlashCsa = {{1024, 1.0f}, {1024, 1.0f}, {64, 0.125f}, {256, 1.0f}, {256, 1.0f}};
const std::vector<Shape> kV4FlashHca = {{512, 1.0f}, {512, 1.0f}};

TEST(GemmSegmentsGpu, V4FlashCompressorAndIndexerProjectionsEqualSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t M : {1, 2, 3, 8}) {
    check_segments(WeightFormat::BF16, 4096, kV4FlashCsa, M, 4096, GemmPrecision::kBf16, 100 + M);
    check_segments(WeightFormat::BF16, 4096, kV4FlashHca, M, 4096, GemmPrecision::kFp32SmallM, 200 + M);
  }
}

TEST(GemmSegmentsGpu, BatchInvariantRowCountsEqualSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t M : {20, 300})
    check_segments(WeightFormat::BF16, 4096, kV4FlashCsa, M, 4096, GemmPrecision::kBatchInvariant, 300 + M);
}

TEST(GemmSegmentsGpu, OddShapesFormatsStridesAndScalesEqualSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  // N not a multiple of the block's 8 rows, a K tail inside the 512-wide chunk, a strided x, a non-power-of-two scale.
  check_segments(WeightFormat::BF16, 1048, {{13, 1.0f}, {7, 0.3f}, {100, 1.0f}}, 5, 1052, GemmPrecision::kFp32SmallM, 7);
  check_segments(WeightFormat::FP8_BLOCK, 512, {{200, 1.0f}, {72, 0.125f}}, 3, 512, GemmPrecision::kFp32SmallM, 8);
  check_segments(WeightFormat::F32, 260, {{9, 1.0f}, {33, 2.0f}, {1, 1.0f}, {64, 1.0f}}, 8, 260,
                 GemmPrecision::kFp32SmallM, 9);
  check_segments(WeightFormat::BF16, 4096, {{1024, 1.0f}}, 1, 4096, GemmPrecision::kBf16, 10);  // one segment
}

TEST(GemmSegmentsGpu, CapturedInAGraphEqualsSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  check_segments(WeightFormat::BF16, 4096, kV4FlashCsa, 1, 4096, GemmPrecision::kBf16, 400, true);
}

TEST(GemmSegmentsGpu, BadArgumentsAreErrorsNotCrashes) {
  DSI_SKIP_WITHOUT_GPU();
  const auto a = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::BF16, 16, 256, 1));
  const auto b = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::BF16, 16, 128, 2));
  const auto c = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, 16, 256, 3));
  DeviceBuffer<float> x, y;
  ASSERT_TRUE(x.alloc(4 * 256, "x").is_ok());
  ASSERT_TRUE(y.alloc(4 * 64, "y").is_ok());
  GemmSegment ok{a.w, y.data(), 16};
  std::vector<GemmSegment> s = {ok, {b.w, y.data(), 16}};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr).is_ok());  // K differs
  s[1] = {c.w, y.data(), 16};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr).is_ok());  // format differs
  s[1] = {a.w, y.data(), 8};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr).is_ok());  // ldy < N
  s[1] = {a.w, nullptr, 16};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr).is_ok());  // null y
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 0, nullptr).is_ok());
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, nullptr, 2, nullptr).is_ok());
  std::vector<GemmSegment> nine(9, ok);
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, nine.data(), 9, nullptr).is_ok());
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 100, &ok, 1, nullptr).is_ok());  // ldx < K
  EXPECT_TRUE(gemm_segments_cuda(x.data(), 0, 256, &ok, 1, nullptr).is_ok());   // M = 0: nothing to do
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
