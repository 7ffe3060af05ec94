// gemm_segments_cuda (several weights over one x in one skinny or streaming launch, gemm_cuda.h) against each
// weight's own gemm_cuda call (then scale_cuda where the segment scales): bitwise equal outputs, for V4-Flash's
// compressor and indexer projections (BF16, K = 4,096: N = 1,024 / 1,024 / 64 / 256 / 256, the head weights scaled by
// 1/8) at the decode rows the runner fuses (M = 1..8 under kBf16 and kFp32SmallM) and at batch-invariant sizes
// (M = 20, 300: the skinny kernel walks the rows in chunks of 8); for V4-Flash's wq_a + wkv (K = 4,096: N = 1,024 /
// 512) on the streaming kernel at M = 1..128 (kBf16; FP8 with E8M0 and with fp32 scales) and on the skinny kernel
// as BF16 weights (M <= 8); plus odd shapes (N not a multiple of the block's rows, FP8 and F32 weights, a strided x,
// an odd scale), inside a CUDA graph, and the argument errors (weights whose own streaming launches differ in their
// K split cannot share one). Also the CPU reference (ops::linear_ref, rows 0, M / 2, M - 1) so that equal bits are
// not equal garbage: 1e-5 normalised error on the skinny kernel (fp32 sums of exact products: gemm_gpu's
// kSkinnyTol), 4e-3 on the streaming kernel (x rounded to bf16: ~1.1e-3 measured scale, test_gemm_stream_gpu.cpp's
// kStreamTol).
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
using dsinfer::ops::cuda::GemmKernel;
using dsinfer::ops::cuda::GemmPrecision;
using dsinfer::ops::cuda::GemmSegment;
using dsinfer::ops::cuda::WeightFormat;
namespace od = dsinfer::ops::cuda::detail;

constexpr double kSkinnyTol = 1e-5, kStreamTol = 4e-3;

struct Shape {
  int64_t N;
  float scale;
};

// The kernel gemm_segments_cuda plans for these weights (plan_gemm_segments_kernel); false when none applies.
bool planned_kernel(const std::vector<dsinfer::ops::cuda::OwnedDeviceWeight>& dw, int64_t M, GemmPrecision prec,
                    GemmKernel& kernel) {
  std::vector<od::GemmArgs> a(dw.size());
  for (size_t i = 0; i < dw.size(); ++i) {
    a[i].M = M;
    a[i].N = dw[i].w.rows;
    a[i].K = dw[i].w.cols;
    od::set_weight_args(a[i], dw[i].w);
  }
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const auto p = dsinfer::ops::cuda::plan_gemm_segments_kernel(a.data(), int(a.size()), dw[0].w.fmt, prec, sms);
  kernel = p.kernel;
  return p.ok;
}

// Runs the segments launch and the separate calls over the same x; expects the planned kernel, every output bitwise
// equal and near the CPU reference.
void check_segments(WeightFormat fmt, int64_t K, const std::vector<Shape>& shapes, int64_t M, int64_t ldx,
                    GemmPrecision prec, uint64_t seed, bool graph = false, GemmKernel expect = GemmKernel::kSkinny,
                    bool e8m0 = true) {
  SCOPED_TRACE(testing::Message() << dsinfer::ops::cuda::weight_format_name(fmt) << (e8m0 ? "" : " f32 scales")
                                  << " K=" << K << " M=" << M << " ldx=" << ldx << " segments=" << shapes.size()
                                  << " graph=" << graph << " prec=" << int(prec));
  std::vector<dsinfer::test::HostWeight> hw;
  std::vector<dsinfer::ops::cuda::OwnedDeviceWeight> dw;
  for (size_t i = 0; i < shapes.size(); ++i) {
    hw.push_back(dsinfer::test::make_host_weight(fmt, shapes[i].N, K, seed + 11 * i, e8m0));
    dw.push_back(dsinfer::test::upload(hw.back()));
  }
  GemmKernel kernel = GemmKernel::kTiled;
  ASSERT_TRUE(planned_kernel(dw, M, prec, kernel));
  ASSERT_EQ(kernel, expect);
  const double tol = expect == GemmKernel::kStream ? kStreamTol : kSkinnyTol;
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
    const dsinfer::Status st = gemm_segments_cuda(dx.data(), M, ldx, segs.data(), int(segs.size()), s, prec);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  } else {
    const dsinfer::Status st = gemm_segments_cuda(dx.data(), M, ldx, segs.data(), int(segs.size()), s, prec);
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
      EXPECT_LT(normalized_error(got, ref), tol) << "segment " << i << " row " << m;
    }
  }
}

const std::vector<Shape> kV4FlashCsa = {{1024, 1.0f}, {1024, 1.0f}, {64, 0.125f}, {256, 1.0f}, {256, 1.0f}};
const std::vector<Shape> kV4FlashHca = {{512, 1.0f}, {512, 1.0f}};
const std::vector<Shape> kV4FlashQkv = {{1024, 1.0f}, {512, 1.0f}};

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
  check_segments(WeightFormat::FP8_BLOCK, 4096, kV4FlashQkv, 1, 4096, GemmPrecision::kBf16, 401, true,
                 GemmKernel::kStream);
  check_segments(WeightFormat::FP8_BLOCK, 4096, kV4FlashQkv, 64, 4096, GemmPrecision::kBf16, 402, true,
                 GemmKernel::kStream);
}

// wq_a (N = 1,024) + wkv (N = 512) of V4-Flash, K = 4,096: the decode rows the runner fuses on the streaming kernel
// (fast mode, M <= kGemmStreamMidMaxM = 128: every tokens-per-block size 8 / 16 / 32 / 64, one and two token chunks,
// partial chunks), with the model's E8M0 scales and with fp32 scales; as BF16 weights (the bf16 fixtures) the
// skinny kernel at M <= 8.
TEST(GemmSegmentsGpu, V4FlashWqaWkvStreamingEqualsSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t M : {1, 2, 3, 5, 8, 9, 16, 17, 31, 33, 64, 65, 100, 128}) {
    check_segments(WeightFormat::FP8_BLOCK, 4096, kV4FlashQkv, M, 4096, GemmPrecision::kBf16, 500 + M, false,
                   GemmKernel::kStream);
    if (M == 1 || M == 17 || M == 128)
      check_segments(WeightFormat::FP8_BLOCK, 4096, kV4FlashQkv, M, 4096, GemmPrecision::kBf16, 600 + M, false,
                     GemmKernel::kStream, false);
  }
  for (int64_t M : {1, 4, 8})
    check_segments(WeightFormat::BF16, 4096, kV4FlashQkv, M, 4096, GemmPrecision::kBf16, 700 + M);
}

// The streaming form at other shapes: N not a multiple of the 64-row block (the walk's last block of a segment is
// partial), three segments, a scaled segment, a strided x, K = 1,024 at 40 rows (64 tokens per block), one weight.
TEST(GemmSegmentsGpu, StreamingOddShapesEqualSeparateCallsBitwise) {
  DSI_SKIP_WITHOUT_GPU();
  check_segments(WeightFormat::FP8_BLOCK, 4096, {{1000, 1.0f}, {72, 0.125f}, {300, 1.0f}}, 7, 4100,
                 GemmPrecision::kBf16, 800, false, GemmKernel::kStream);
  check_segments(WeightFormat::FP8_BLOCK, 1024, {{128, 1.0f}, {64, 1.0f}}, 40, 1024, GemmPrecision::kBf16, 801, false,
                 GemmKernel::kStream);
  check_segments(WeightFormat::FP8_BLOCK, 4096, {{1024, 1.0f}}, 3, 4096, GemmPrecision::kBf16, 802, false,
                 GemmKernel::kStream);
}

// Weights whose own streaming launches split K differently (N = 64: 8 splits at M = 1; N = 16,384: 2) cannot share
// one launch: the plan says so and gemm_segments_cuda refuses rather than change a segment's bits.
TEST(GemmSegmentsGpu, StreamingSegmentsWithDifferentSplitsAreRefused) {
  DSI_SKIP_WITHOUT_GPU();
  std::vector<dsinfer::ops::cuda::OwnedDeviceWeight> dw;
  dw.push_back(dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, 64, 1024, 1)));
  dw.push_back(dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, 16384, 1024, 2)));
  GemmKernel kernel = GemmKernel::kTiled;
  EXPECT_FALSE(planned_kernel(dw, 1, GemmPrecision::kBf16, kernel));
  DeviceBuffer<float> x, y0, y1;
  ASSERT_TRUE(x.alloc(1024, "x").is_ok());
  ASSERT_TRUE(y0.alloc(64, "y0").is_ok());
  ASSERT_TRUE(y1.alloc(16384, "y1").is_ok());
  const GemmSegment s[2] = {{dw[0].w, y0.data(), 64}, {dw[1].w, y1.data(), 16384}};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 1, 1024, s, 2, nullptr, GemmPrecision::kBf16).is_ok());
  // Batch-invariant mode keeps its own streaming chunks: no streaming segments there.
  const auto qa = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, 1024, 1024, 3));
  const GemmSegment t[2] = {{qa.w, y1.data(), 1024}, {qa.w, y1.data() + 1024, 1024}};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 1, 1024, t, 2, nullptr, GemmPrecision::kBatchInvariant).is_ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(GemmSegmentsGpu, BadArgumentsAreErrorsNotCrashes) {
  DSI_SKIP_WITHOUT_GPU();
  const auto a = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::BF16, 16, 256, 1));
  const auto b = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::BF16, 16, 128, 2));
  const auto c = dsinfer::test::upload(dsinfer::test::make_host_weight(WeightFormat::FP8_BLOCK, 16, 256, 3));
  constexpr GemmPrecision kF32 = GemmPrecision::kFp32SmallM;
  DeviceBuffer<float> x, y;
  ASSERT_TRUE(x.alloc(4 * 256, "x").is_ok());
  ASSERT_TRUE(y.alloc(4 * 64, "y").is_ok());
  GemmSegment ok{a.w, y.data(), 16};
  std::vector<GemmSegment> s = {ok, {b.w, y.data(), 16}};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr, kF32).is_ok());  // K differs
  s[1] = {c.w, y.data(), 16};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr, kF32).is_ok());  // format differs
  s[1] = {a.w, y.data(), 8};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr, kF32).is_ok());  // ldy < N
  s[1] = {a.w, nullptr, 16};
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 2, nullptr, kF32).is_ok());  // null y
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, s.data(), 0, nullptr, kF32).is_ok());
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, nullptr, 2, nullptr, kF32).is_ok());
  std::vector<GemmSegment> nine(9, ok);
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 256, nine.data(), 9, nullptr, kF32).is_ok());
  EXPECT_FALSE(gemm_segments_cuda(x.data(), 4, 100, &ok, 1, nullptr, kF32).is_ok());  // ldx < K
  EXPECT_TRUE(gemm_segments_cuda(x.data(), 0, 256, &ok, 1, nullptr, kF32).is_ok());   // M = 0: nothing to do
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
