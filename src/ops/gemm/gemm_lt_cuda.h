// cuBLASLt GEMM engine for the CUDA runner's fast path: y[M, N] (+)= x[M, K] . W^T with W an FP8_BLOCK weight in
// its stored format (e4m3 [N, K], 128 x 128 block scales) and fp32 x / y. x is quantized per token and per 128
// channels to e4m3 with a power-of-two scale (the official DeepSeek `act_quant`, gemm_lt_quant.h) - by default in
// two terms (GemmLtActivations below) - then cuBLASLt runs the block-scaled FP8 matmul
// (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for W, VEC128_32F for x; cuBLAS >= 12.9, Hopper): per 128-wide K
// block fp32 partial sums scaled by s_x * s_w, fp32 output (or bf16 output plus an fp32 epilogue where cuBLASLt
// offers only bf16). Not the exact path.
//
// Memory: the weight's block scales are converted once per weight (prepare) to fp32 in cuBLASLt's layout,
// 4 bytes per 128 x 128 block (N * K / 4096 bytes: 8 KB for wq_b 32768 x 1024, ~1/4096 of the FP8 weight); plus a
// 32 MiB cuBLASLt workspace and the activation buffers (M * K bytes of codes and M * K / 32 bytes of scales per
// term and, only for bf16 output, M * N * 2 bytes), grown to the largest call. Buffers replaced while growing are kept until the
// engine dies, because captured CUDA graphs may still point at them.
//
// Plans (matmul descriptor, layouts, algorithm from cublasLtMatmulAlgoGetHeuristic) are cached per (M, N, K,
// accumulate, operand alignments); a shape without an algorithm (e.g. M = 1 on sm_90) is cached as such and every
// call returns the same error, so the caller falls back to the gemm_cuda kernels at the cost of a hash lookup.
// The first use runs a small probe matmul (synchronising the stream once) that establishes how cuBLASLt reads the
// scale tensors where the public descriptions leave it open: the 1 x 128 scales when M % 4 != 0 (leading
// dimension M, or M rounded up to 4) and the weight's block-scale rows when ceil(K / 128) % 4 != 0 (padded to a
// multiple of 4 or not). When the probe matches none of these readings the engine stays off (every call errors).
// Plain C++ header (no CUDA / cuBLAS types): streams are `void*`.
#pragma once
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "ops/gemm/gemm_launch.h"  // DeviceWeight

namespace dsinfer::ops::cuda {

// DSINFER_CUBLASLT=0 turns the engine off in the CUDA runner (any other value or unset: on).
bool gemm_lt_env_enabled();
// The smallest M the CUDA runner sends to the engine: DSINFER_CUBLASLT_MIN_M, default kGemmLtMinM. From the
// H200 side-by-side (bench/NOTES.md, 2026-11-30: wo_b at M = 64 took 26 us in cuBLASLt FP8 block-scaled vs 126 us
// on the streaming kernel; M = 1 has no block-scaled algorithm); bench/gemm_bench.cpp's "lt-runner" column
// (activation quantization included) is the table to re-tune it from.
inline constexpr int64_t kGemmLtMinM = 64;
int64_t gemm_lt_min_rows();

// How the engine represents x (DSINFER_CUBLASLT_ACT=fp8 selects kFp8; default kFp8x2):
//   kFp8    one e4m3 term per element: the official act_quant numerics and the fastest (one matmul), but e4m3's
//           ~2^-4 relative rounding of every activation failed the fidelity gate on the shipped model in a CPU
//           simulation (top-1 97.3 %, mean KL 1.5e-3 vs the exact path, 5 dense projections quantized);
//   kFp8x2  two terms x ~= q s + q2 s2 (the second quantizes what the first leaves, per 128-block): ~2^-8 relative,
//           bf16-class (same simulation: top-1 99.90 %, mean KL 2.5e-6); two matmuls accumulate into y, so twice
//           the FP8 tensor-core work and twice the weight reads (still one FP8 weight copy in memory).
enum class GemmLtActivations { kFp8, kFp8x2 };
GemmLtActivations gemm_lt_env_activations();

class GemmLtEngine {
 public:
  explicit GemmLtEngine(GemmLtActivations act = gemm_lt_env_activations());
  ~GemmLtEngine();
  GemmLtEngine(const GemmLtEngine&) = delete;
  GemmLtEngine& operator=(const GemmLtEngine&) = delete;

  // Whether the weight's format and shape can go through the engine: FP8_BLOCK with 128 x 128 blocks,
  // K % 128 == 0, N % 16 == 0.
  static bool supports(const DeviceWeight& w);
  // Whether `stream` is capturing a CUDA graph (the engine then neither allocates nor synchronises).
  static bool capturing(void* stream);

  // One-time setup for this weight (and, on first use, the cuBLASLt handle, workspace and layout probe) on
  // `stream`, and activation buffers for calls of up to max_rows rows. Does nothing while the stream is capturing
  // (no allocation or synchronisation may enter a graph). An error (unsupported weight, no cuBLASLt, probe
  // failure) is remembered: later calls return it at once.
  Status prepare(const DeviceWeight& w, int64_t max_rows, void* stream);
  // y[M, N] (row stride ldy) (+)= x[M, K] (row stride ldx) . W^T. Outside capture it prepares what is missing;
  // while capturing, an unprepared weight or too small buffers are errors. Any error leaves y untouched, so the
  // caller may fall back to the gemm_cuda kernels - except a failure of kFp8x2's second matmul (same plan and
  // arguments as the first, which succeeded: not expected), after which y holds the first term.
  Status gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool accumulate,
              void* stream);
  // Prepared scales are keyed by the weight's data pointer: a weight whose memory is freed must be forgotten
  // before the address can come back for another weight (tests; the runner's weights live as long as it).
  void forget(const DeviceWeight& w);

  // Device memory held (converted scales, workspace, activation buffers, including retired ones).
  size_t device_bytes() const;
  // Scale layouts found by the probe (0 before it ran, 3 when it matched no reading and the engine is off).
  // scale_layout: 1 x 128 scales with leading dimension 1 = M, 2 = M rounded up to 4; weight_scale_layout: rows of
  // 1 = ceil(K / 128), 2 = ceil(K / 128) rounded up to 4 entries.
  int scale_layout() const;
  int weight_scale_layout() const;
  GemmLtActivations activations() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::ops::cuda
