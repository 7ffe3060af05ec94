// cuBLASLt GEMM engine for the CUDA runner's fast path: y[M, N] (+)= x[M, K] . W^T with fp32 x / y and W in its
// stored format. One class runs both kinds (which calls it takes: gemm_plan.h gemm_lt_wants):
//   FP8_BLOCK W (e4m3 [N, K], 128 x 128 block scales): x is quantized per token and per 128 channels to e4m3 with a
//     power-of-two scale (the official DeepSeek `act_quant`, gemm_lt_quant.h) - in one or two terms
//     (GemmLtActivations, gemm_plan.h) - then cuBLASLt runs the block-scaled FP8 matmul (cuBLAS >= 12.9, Hopper);
//     or, on the kBf16 route (gemm_lt_fp8_route: by default from kGemmLtWideMinM rows), the weight is widened to
//     an exact bf16 copy in an engine buffer on every call and the BF16 path below runs on it;
//   BF16 W (or F32 W): x is rounded to bf16 (F32 W: cuBLASLt rounds both operands, CUBLAS_COMPUTE_32F_FAST_16BF),
//     then a bf16 tensor-core matmul with fp32 accumulation: the lm head (N = 129,280) and the compressors' wkv.
// fp32 output (or, where cuBLASLt offers only bf16 output for the block-scaled mode, bf16 plus an fp32 epilogue).
// Not the exact path, never in batch-invariant mode (cuBLASLt picks algorithms and split-K by M).
//
// cuBLASLt's rules for the block-scaled mode (cuBLAS docs 3.1.4.5 "128-element 1D and 128x128 2D block scaling",
// cublasLtMatmul "tensor- or block-scaled FP8 kernels"; the NVIDIA sample LtBlk128x128Fp8Matmul):
//   "TN" only: A transposed, B not; compute CUBLAS_COMPUTE_32F, scale type CUDA_R_32F; D fp32, bf16 or fp16.
//   A (our W, after the row-major -> column-major swap: K x N column-major, op T) takes BLK128x128_32F; B (our x,
//     K x M column-major, op N) VEC128_32F. (A = VEC128 / B = BLK is the other supported pairing; BLK x BLK is not.)
//   cuBLAS's m and n (our N and M) must be multiples of 4; pointers and leading dimensions 16-byte aligned; scale
//     tensors 16-byte aligned.
//   VEC128_32F scales of B: shape n x ceil(K/128), n-major: block b of token m at b * M + m.
//   BLK128x128_32F scales of A: K-major, shape ceil4(ceil(K/128)) x ceil(N/128): block (nb, kb) at nb * L4 + kb
//     with L4 = ceil(K/128) rounded up to 4.
// M % 4 != 0 (including M < 4) is not supported by the library: the engine runs the first M - M % 4 rows on
// cuBLASLt and the last M % 4 rows on gemm_cuda's fp32 streaming kernel (exact fp32 products). The 2026-11-30
// engine failed because its first-use probe ran M = 66 (chosen to tell the possible activation-scale layouts apart):
// no algorithm for n % 4 != 0, and the failed probe switched the whole engine off.
//
// Memory: FP8 weight scales converted once per weight to fp32 in cuBLASLt's layout (N * K / 4096 bytes: 8 KB for
// wq_b), a 32 MiB workspace and activation buffers (M * K bytes of codes and M * K / 32 bytes of scales per term;
// M * K * 2 bytes of bf16 x), grown to the largest call. Buffers replaced while growing are kept until the engine
// dies, because captured CUDA graphs may still point at them.
//
// Plans (matmul descriptor, layouts, algorithm from cublasLtMatmulAlgoGetHeuristic) are cached per (kind, M, N, K,
// ldy, accumulate, alignments); a shape without an algorithm is cached as such and every call returns the same
// error, so the caller falls back to the gemm_cuda kernels at the cost of a hash lookup. The first FP8 use runs a
// probe matmul (M = 64, N = K = 256; one stream synchronisation) that checks the documented weight-scale layout
// (rows of ceil4(ceil(K/128))) against the unpadded reading; when neither matches, FP8 calls error (engine off).
// Plain C++ header (no CUDA / cuBLAS types): streams are `void*`.
#pragma once
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "ops/gemm/gemm_launch.h"  // DeviceWeight
#include "ops/gemm/gemm_plan.h"    // GemmLtActivations

namespace dsinfer::ops::cuda {

// When the runner uses the engine (DSINFER_CUBLASLT*, the M thresholds, the activation terms): gemm_plan.h
// (GemmSettings, plan_gemm_call, gemm_lt_supports / gemm_lt_wants, GemmLtActivations).

class GemmLtEngine {
 public:
  // act: the FP8 weights' activation terms (gemm_lt_fp8_route); stack: how a two-term call runs (GemmLtStack).
  explicit GemmLtEngine(GemmLtActivations act = GemmSettings{}.lt_activations,
                        GemmLtStack stack = GemmSettings{}.lt_stack);
  ~GemmLtEngine();
  GemmLtEngine(const GemmLtEngine&) = delete;
  GemmLtEngine& operator=(const GemmLtEngine&) = delete;

  // Whether the weight's format and shape can go through the engine (gemm_plan.h gemm_lt_supports).
  static bool supports(const DeviceWeight& w) { return gemm_lt_supports(w); }
  // Whether `stream` is capturing a CUDA graph (the engine then neither allocates nor synchronises).
  static bool capturing(void* stream);

  // One-time setup for this weight (and, on first use, the cuBLASLt handle, workspace and, for FP8, the layout
  // probe) on `stream`, and activation buffers for calls of up to max_rows rows. Does nothing while the stream is
  // capturing (no allocation or synchronisation may enter a graph). An error (unsupported weight, no cuBLASLt,
  // probe failure) is remembered: later calls return it at once.
  Status prepare(const DeviceWeight& w, int64_t max_rows, void* stream);
  // y[M, N] (row stride ldy) (+)= x[M, K] (row stride ldx) . W^T. Outside capture it prepares what is missing;
  // while capturing, an unprepared weight or too small buffers are errors. Every plan is resolved before the first
  // launch, so any error leaves y untouched and the caller may fall back to the gemm_cuda kernels (a failing
  // launch after that - not expected - returns its error with y partly written).
  Status gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool accumulate,
              void* stream);
  // y16[M, N] (bf16, row stride ldy) = x[M, K] . W^T rounded once to bf16 (RNE) by the matmul's epilogue: gemm's
  // arithmetic without the fp32 output (no accumulation), for the weights gemm runs on a bf16 matmul (an FP8 weight
  // on the widened kBf16 route at this M, a BF16 weight); any other is an error, before any launch (y16 untouched),
  // and the caller takes gemm. Session 27: wq_b's output at prefill, the split-block sparse prefill kernel's bf16 q.
  Status gemm_bf16_out(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, uint16_t* y16, int64_t ldy,
                       void* stream);
  // y[M, N] (+)= x16 . W^T with x already bf16 (row stride ldx, 16-byte aligned, ldx % 8 == 0): gemm's bf16 matmul
  // read on x as it is, no rounding pass, for the weights gemm_bf16_out takes (else an error before any launch, y
  // untouched). For the same bf16 values it is gemm's arithmetic on the widened route (session 27: wo_b on the split
  // path, x = wo_a's bf16 output).
  Status gemm_bf16_in(const uint16_t* x16, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy,
                      bool accumulate, void* stream);
  // Several weights over the same x [M, K] (a layer's projections of one normalised input: wq_a + wkv, the
  // compressor's and indexer's projections), y_i = x . W_i^T (row stride ldys[i], no accumulation) as gemm computes
  // each, with x rounded to bf16 once for all of them instead of once a call (session 27: ~23 us of rounding pass a
  // call at 4,096 tokens of 4,096 channels): the same bits as the separate calls (the same rounding into the same
  // buffer, the same plans). Every weight must take a bf16 matmul at this M (FP8 on the widened route, BF16) with
  // the same K, else an error before any launch; an error after one (not expected: a plan without an algorithm)
  // leaves some y_i written, which the caller's separate calls then overwrite.
  Status gemm_same_x(const float* x, int64_t M, int64_t ldx, const DeviceWeight* const* ws, float* const* ys,
                     const int64_t* ldys, int count, void* stream);
  // The grouped projection (wo_a) in one strided-batched cuBLASLt GEMM: for g < groups,
  // y_g[M, N_g] = x_g[M, K] . W_g^T with N_g = w.rows / groups, W_g = rows [g N_g, (g + 1) N_g), x_g = x + g * xg
  // and y_g = y + g * yg (row strides ldx / ldy; y overwritten). An FP8 weight (E8M0 scales) is widened to an exact
  // bf16 copy in an engine buffer on every call (gemm_widen_cuda.h), a BF16 weight read as stored; x is rounded to
  // bf16 (RNE) over the span of every group's columns, (groups - 1) * xg + K values a row, into one buffer; then one
  // bf16 x bf16 -> fp32 matmul over `groups` batches: the bf16 tiled kernel's numerics (exact W, x to bf16, fp32
  // accumulation), one launch for all groups. Needs gemm_lt_grouped_supports(w, groups), xg >= K, yg >= N_g and
  // the groups inside the rows ((groups - 1) * xg + K <= ldx, likewise y). Errors (no algorithm, a layout it does
  // not take, buffers too small inside a graph capture) come before the first launch and leave y untouched.
  // Device memory: the bf16 weight copy (2 bytes per weight) and M x span bf16 values of x.
  Status gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w, int64_t groups,
                      float* y, int64_t ldy, int64_t yg, void* stream);
  // The same call with x already bf16 (session 24: the split-block sparse prefill kernel's output, wo_a's x): x
  // [M, ldx] bf16 (row stride ldx values, 16-byte aligned), read as it is - no rounding pass, no activation buffer.
  // For the same bf16 values it gives gemm_grouped's bits: where ldx equals gemm_grouped's span ((groups - 1) * xg
  // + K, as wo_a's calls) and x is aligned like the engine's buffer, the same cached plan (the same algorithm) runs
  // on the same operands. Errors as gemm_grouped (before any launch, y untouched).
  Status gemm_grouped_bf16(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w, int64_t groups,
                           float* y, int64_t ldy, int64_t yg, void* stream);
  // gemm_grouped_bf16 with the result rounded once to bf16 by the matmul's epilogue into y16 (row stride ldy, group
  // stride yg; 16-byte aligned, ldy and yg % 8 == 0) instead of an fp32 y (session 27: wo_a on the split path, its
  // output wo_b's bf16 x). Errors as gemm_grouped_bf16's.
  Status gemm_grouped_bf16_out(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                               int64_t groups, uint16_t* y16, int64_t ldy, int64_t yg, void* stream);
  // gemm_grouped's buffers for calls of up to max_rows rows with the groups' columns back to back (xg == K), made
  // outside a graph capture (does nothing while capturing, like prepare).
  Status prepare_grouped(const DeviceWeight& w, int64_t groups, int64_t max_rows, void* stream);

  // Prepared scales are keyed by the weight's data pointer: a weight whose memory is freed must be forgotten
  // before the address can come back for another weight (tests; the runner's weights live as long as it).
  void forget(const DeviceWeight& w);

  // Device memory held (converted scales, workspace, activation buffers, including retired ones).
  size_t device_bytes() const;
  // Weight-scale rows found by the FP8 probe: 0 before it ran, 2 = ceil(K/128) rounded up to 4 (documented),
  // 1 = ceil(K/128), 3 = neither matched (FP8 calls error). Both agree when ceil(K/128) % 4 == 0 (every V4-Flash
  // projection).
  int weight_scale_layout() const;
  GemmLtActivations activations() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::ops::cuda
