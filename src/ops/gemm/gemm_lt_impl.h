// Internals of the cuBLASLt GEMM engine (gemm_lt_cuda.h), shared by gemm_lt_cuda.cpp (weights, buffers, calls) and
// gemm_lt_plan_cuda.cpp (matmul plans and the scale-layout probe). Host code only; includes cuBLASLt.
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda/device_buffer.h"
#include "ops/gemm/gemm_lt_cuda.h"

namespace dsinfer::ops::cuda {

namespace gemm_lt_detail {

inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Everything a cached plan depends on: the problem, the output row stride and the operand alignments the
// heuristic was told about (an algorithm chosen for aligned pointers may not run on less aligned ones).
// kind: the operand types (kFp8Block: e4m3 x e4m3 block-scaled; kBf16: bf16 W x bf16 x; kF32: fp32 W x fp32 x
// with bf16 tensor-core products, CUBLAS_COMPUTE_32F_FAST_16BF).
enum class PlanKind : int { kFp8Block, kBf16, kF32 };
// batch > 1: a strided-batched matmul (the grouped projection): batch g reads W rows [g N, (g + 1) N) (stride
// N * K), x at g * x_stride (row stride ldx) and writes y at g * y_stride (row stride ldy). ldx 0 = K (the
// single matmul's contiguous x). out_bf16 (kBf16 / kF32 only): y is bf16, written by the matmul itself (row stride
// ldy, no accumulation), the fp32 accumulator rounded once by cuBLASLt's epilogue (GemmLtEngine::gemm_bf16_out).
struct PlanKey {
  PlanKind kind = PlanKind::kFp8Block;
  int64_t M = 0, N = 0, K = 0, ldy = 0;
  bool accumulate = false;
  uint32_t align_w = 0, align_x = 0, align_y = 0;
  int64_t batch = 1, ldx = 0, x_stride = 0, y_stride = 0;
  bool out_bf16 = false;
  bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : {int64_t(k.kind), k.M, k.N, k.K, k.ldy, int64_t(k.accumulate), int64_t(k.align_w),
                      int64_t(k.align_x), int64_t(k.align_y), k.batch, k.ldx, k.x_stride, k.y_stride,
                      int64_t(k.out_bf16)})
      h = (h ^ size_t(v)) * 1099511628211ull;
    return h;
  }
};

// One matmul configuration: descriptor (FP8: scale modes set, the scale pointers set per call), the A (W), B (x)
// and D layouts and the heuristic's algorithm. D is y itself (fp32, or bf16 for a key's out_bf16; row stride ldy)
// or, when cuBLASLt offers only bf16 output for an fp32 y (bf16_out), a bf16 [M, N] buffer the epilogue kernel adds
// into y. status: why there is no algorithm.
struct Plan {
  Status status;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bf16_out = false;
  int64_t N = 0;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() { release(); }
  void release();
};

// Creates the plan for key (FP8: A scales at w_scale, B scales at x_scale: the heuristic sees real pointers),
// trying fp32 output first, then (FP8 only) bf16. Never null; plan->status says whether it can run.
std::unique_ptr<Plan> make_plan(cublasLtHandle_t h, const PlanKey& key, const float* w_scale, const float* x_scale);

// Per weight (keyed by its data pointer): FP8 block scales as fp32 [ceil(N/128), ld], or why not (BF16 / F32
// weights: only the shape, scale stays empty).
struct WeightScales {
  Status status;
  dsinfer::cuda::DeviceBuffer<float> scale;
  int64_t rows = 0, cols = 0;
};

// Largest power of two (<= 256) dividing v: the alignment in bytes of an address or stride.
inline uint32_t alignment(uint64_t v) {
  uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return v == 0 ? 256 : a;
}

}  // namespace gemm_lt_detail

struct GemmLtEngine::Impl {
  GemmLtActivations act = GemmLtActivations::kFp8x2;
  GemmLtStack stack = kGemmLtStackDefault;
  cublasLtHandle_t handle = nullptr;
  bool initialized = false;
  Status init_status;  // sticky: the engine is unusable when this is an error
  bool probed = false;
  Status probe_status;    // sticky: FP8 calls are refused when this is an error
  int wscale_layout = 0;  // weight scales: 1 rows of ceil(K/128), 2 rounded up to 4 (documented), 3 neither
  // workspace; activation codes [terms][M, K] (or bf16 x [M, K] for dense weights, [M, groups * K] for the
  // grouped call); bf16 output [M, N]; the grouped call's and the kBf16 route's bf16 copy of an FP8 weight (wide,
  // rebuilt every call);
  // activation scales [terms][K / 128, M] (the second term's matrix at a 256-byte aligned offset, scale_offset)
  dsinfer::cuda::DeviceBuffer<uint8_t> workspace, q, t, wide;
  dsinfer::cuda::DeviceBuffer<float> s;
  // the stacked two-term product [2 M, N] fp32 (GemmLtStack), summed into y by launch_lt_sum2
  dsinfer::cuda::DeviceBuffer<float> d2;
  std::vector<dsinfer::cuda::DeviceBuffer<uint8_t>> retired;  // replaced buffers, kept for graphs that captured them
  std::vector<dsinfer::cuda::DeviceBuffer<float>> retired_f;
  std::unordered_map<const void*, gemm_lt_detail::WeightScales> weights;
  std::unordered_map<gemm_lt_detail::PlanKey, std::unique_ptr<gemm_lt_detail::Plan>, gemm_lt_detail::PlanKeyHash> plans;

  ~Impl();
  Status init();               // handle, workspace (gemm_lt_cuda.cpp)
  Status probe(void* stream);  // sets wscale_layout (gemm_lt_plan_cuda.cpp)
  Status ensure_probe(void* stream) {
    if (!probed) {
      probed = true;
      probe_status = probe(stream);
    }
    return probe_status;
  }
  gemm_lt_detail::Plan& plan(const gemm_lt_detail::PlanKey& key, const float* w_scale, const float* x_scale);
  // Grows a buffer to at least n elements (x1.5 steps), retiring the old one (gemm_lt_cuda.cpp).
  Status grow(dsinfer::cuda::DeviceBuffer<uint8_t>& b, size_t n, const char* what);
  Status grow(dsinfer::cuda::DeviceBuffer<float>& b, size_t n, const char* what);
  // Runs a planned matmul (gemm_lt_plan_cuda.cpp): x as codes / bf16 / fp32 at xq [M, K] with scales xs (FP8),
  // W at wdata with converted scales w_scale (FP8); D = y (fp32, or bf16 for an out_bf16 plan), or t followed by
  // the epilogue into the fp32 y (per plan).
  Status run(gemm_lt_detail::Plan& p, const void* wdata, const float* w_scale, const void* xq, const float* xs,
             int64_t M, void* y, int64_t ldy, bool accumulate, void* stream);
  // The FP8 / dense halves of GemmLtEngine::gemm (gemm_lt_cuda.cpp); M % 4 == 0 for FP8.
  Status gemm_fp8(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool acc,
                  bool cap, void* stream);
  // The dense / widened calls' operands besides the weight: x fp32 (rounded to bf16 into q by the call) or already
  // bf16 (x16, row stride ldx: no rounding pass; q itself in gemm_same_x's later calls); y fp32 (accumulated where
  // acc) or bf16 (y16: rounded once by the matmul's epilogue, no accumulation).
  struct DenseIo {
    const float* x = nullptr;
    const uint16_t* x16 = nullptr;
    int64_t ldx = 0;
    float* y = nullptr;
    uint16_t* y16 = nullptr;
    int64_t ldy = 0;
    bool acc = false;
  };
  Status gemm_dense(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream,
                    const DeviceWeight* widen_from = nullptr);
  // gemm_fp8's two terms as one matmul over 2 M rows (GemmLtStack; gemm_lt_cuda.cpp); ran = false: nothing ran.
  Status gemm_fp8_stacked(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, const float* wscale, float* y,
                          int64_t ldy, bool acc, bool cap, void* stream, bool& ran);
  // GemmLtActivations::kBf16 for an FP8 weight: widened into `wide`, then gemm_dense on the copy.
  Status gemm_widened(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream);
  // gemm_widened / gemm_dense by the weight, for the calls that need a bf16 matmul (gemm_bf16_out, gemm_bf16_in,
  // gemm_same_x): an error naming the weight where it takes none at this M.
  Status gemm_bf16_route(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream, const char* op);
  // Grows q (and, for FP8 weights, wide) for a grouped call of max_rows rows over x spans of `span` values
  // (gemm_lt_cuda.cpp); refused while capturing when too small.
  Status grouped_buffers(const DeviceWeight& w, int64_t max_rows, int64_t span, bool cap);
  // GemmLtEngine::gemm_grouped (x fp32, x16 null) and gemm_grouped_bf16 (x null, x16 bf16; y16: bf16 output
  // instead of y) (gemm_lt_cuda.cpp).
  Status grouped(const float* x, const uint16_t* x16, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                 int64_t groups, float* y, int64_t ldy, int64_t yg, void* stream, uint16_t* y16 = nullptr);
};

}  // namespace dsinfer::ops::cuda
