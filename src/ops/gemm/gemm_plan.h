// Kernel choice of the dense GEMMs, in one place: for a weight (format, shape, alignment), M rows, the runner's mode,
// the device's SM count and the environment overrides (read once into GemmSettings), which kernel computes
// y = x . W^T - cuBLASLt, the fp32 GEMV, the bf16 streaming, the fp32 skinny or the bf16 tiled kernel - and with
// which launch parameters. The runners, gemm_cuda.cpp and gemm_lt_cuda.cpp only execute the plan. Host code without
// CUDA types (dsinfer_core; C++17 like the launch headers); tests/unit/test_gemm_plan.cpp pins the decisions at the
// V4-Flash and shipped-model shapes. Measurements behind the thresholds: bench/NOTES.md, docs/kernels.md.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_launch.h"
#include "ops/kernel_mode.h"

namespace dsinfer::ops::cuda {

using ::dsinfer::ops::KernelMode;

// ---- Thresholds (one definition each) ----

// Rows at or below this go through the fp32 streaming (skinny) kernel when the format allows 16-byte weight loads
// (K a multiple of 16 bytes of weight, FP8 block_k a multiple of 16, 16-byte aligned weight data). Exact mode runs
// every GEMM in chunks of this many rows.
inline constexpr int64_t kGemmSkinnyMaxM = 8;
// Rows at or below this may use the GEMV kernel (gemm_gemv.cu; FP8_BLOCK / BF16 weights).
inline constexpr int64_t kGemmGemvMaxM = 16;
// Rows at or below this may use the bf16 streaming tensor-core kernel (FP8_BLOCK weights).
inline constexpr int64_t kGemmStreamMaxM = 256;
// Bytes of the streaming kernel's bf16 x tile per block (two blocks per SM at 64 tokens).
inline constexpr int64_t kGemmStreamXsMax = 96 * 1024;
// The fast path's GEMV kernel takes grouped weights and single weights with more outputs than this
// (gemm_gemv_preferred).
inline constexpr int64_t kGemmGemvMinN = 1024;
// The fast path's streaming kernel above kGemmGemvMaxM rows: N <= kGemmStreamMaxN at every M <= kGemmStreamMaxM, and
// N <= kGemmStreamMidMaxN at kGemmSkinnyMaxM < M <= kGemmStreamMidMaxM (gemm_stream_preferred).
inline constexpr int64_t kGemmStreamMaxN = 1024;
inline constexpr int64_t kGemmStreamMidMaxN = 4096;
inline constexpr int64_t kGemmStreamMidMaxM = 128;
// Streaming kernel residency the plan sizes its persistent grid for (StreamParams::row_grid): blocks per SM (the
// kernel's __launch_bounds__ minimum, 2 x 4 warps, each lane 4-8 K chunks of 2 weight rows in flight: 32-64 KB per
// SM) and the shared memory of one SM (sm_90: 228 KB).
inline constexpr int64_t kGemmStreamBlocksPerSm = 2;
inline constexpr int64_t kGemmStreamSmemPerSm = 228 * 1024;
// The dense projections' FP8 weights take the streaming kernel up to this M (gemm_stream_fp8_preferred).
inline constexpr int64_t kGemmStreamFp8MaxM = kGemmStreamMaxM;
// Batch-invariant mode: single FP8 weights up to this many outputs take the streaming kernel (it beat the default
// kernels for N <= 4096 at M = 9-128 on the H200, bench/NOTES.md); larger N (wq_b) take the tiled kernel.
inline constexpr int64_t kGemmInvariantStreamMaxN = 4096;
// Batch-invariant mode: other single weights up to this many outputs take the skinny fp32 kernel in one launch for
// any M (it walks the rows in chunks of 8, re-reading a small weight from L2): router, indexer weights, compressor
// projections. Larger ones (lm head) and grouped weights (wo_a) take the tiled kernel.
inline constexpr int64_t kGemmInvariantSkinnyMaxN = 1024;
// Weights one skinny or streaming launch may take over the same x (plan_gemm_segments, gemm_segments_cuda): V4's CSA
// layers use 5.
inline constexpr int kGemmMaxSegments = 8;
// Whether the fast path uses cuBLASLt at all when DSINFER_CUBLASLT is unset.
inline constexpr bool kGemmLtDefaultOn = true;
// The smallest M cuBLASLt takes for FP8_BLOCK weights (DSINFER_CUBLASLT_MIN_M overrides). H200 (bench/NOTES.md,
// 2026-11-30): wo_b M = 64 26 us cuBLASLt block-scaled vs 126 us streaming kernel; block scaling needs M % 4 == 0
// (M = 1 has no algorithm). bench/gemm_bench.cpp's "lt-runner" column is the table to re-tune from.
inline constexpr int64_t kGemmLtMinM = 64;
// The smallest M cuBLASLt takes for BF16 / F32 weights (the lm head, the compressors' wkv). cuBLASLt's bf16 GEMM runs
// the lm head at its floor for every M (H200: 250-258 us) and the GEMV kernel only at M <= 2 (330 / 558 us at
// M = 4 / 8), but the lm head decides greedy tokens: a speculative verify step of 1 + k <= 8 rows must compute its
// logits with the kernel of a 1-row decode step (see gemm_gemv_preferred), so cuBLASLt starts above that.
inline constexpr int64_t kGemmLtMinMDense = kGemmSkinnyMaxM + 1;
// A grouped BF16 weight (V4.1's wo_a) goes through cuBLASLt, one call per group, from this M
// (gemm_widen_plan.h gemm_grouped_bf16_lt_wants). Measured for V4's FP8 wo_a before it moved to the batched call
// below: one cuBLASLt call per group cost more than the default kernels below prefill sizes (H200, V4-Flash, 4
// layers: 9.4 -> 6.4 ms at M = 4096, 0.49 -> 1.18 ms at M = 64; bench/NOTES.md wave 5).
inline constexpr int64_t kGemmGroupedLtMinM = 1024;
// A grouped FP8 weight with E8M0 scales (V4's wo_a) goes through the cuBLASLt engine's batched call
// (GemmLtEngine::gemm_grouped: the weight widened to an exact bf16 copy, x rounded to bf16, one strided-batched
// bf16 GEMM over every group) from this M: above the GEMV kernel's rows, where the default path was the tiled
// kernel at 12-15x its floor (session 14: wo_a 0.495 / 0.643 ms over 4 layers at M = 64 / 256). Session 15,
// issue 31: bench/NOTES.md "Session 15 — issue 31/30: wo_a in one launch".
inline constexpr int64_t kGemmGroupedBatchedMinM = kGemmGemvMaxM + 1;
// The cuBLASLt engine's FP8_BLOCK weights (E8M0 scales) run as bf16 x on the per-call widened weight instead of two
// FP8 terms from this M (gemm_lt_fp8_route, kAuto). H200, session 16 (issue 30; bench/NOTES.md "Session 16 — dense
// FP8 GEMMs at prefill sizes"): from 1,024 rows faster on every V4-Flash shape (M = 4,096: wq_b 871 -> 508 us, wo_b
// 712 -> 444, wq_a 203 -> 87, wkv 177 -> 64); at 64 / 256 rows the 32 MB weights lose to the widening's 37 us (wq_b
// 62 vs 48 us at 64). The small weights win there too (wq_a 29 vs 47 us at 256) but are left on two terms: the
// widened route's bf16 x cost the fidelity gate 0.15 points of top-1 when forced at every M (99.71 -> 99.56 %).
inline constexpr int64_t kGemmLtWideMinM = 1024;

// ---- Choices ----

// Which kernels gemm_cuda / gemm_grouped_cuda may use (the kernel-level plan input; plan_gemm_kernel below).
//   kFp32SmallM (default): rows <= kGemmSkinnyMaxM run the fp32 CUDA-core streaming kernel (exact fp32 products),
//     larger M the bf16 tiled kernel. Exact mode relies on it (it calls with chunks of kGemmSkinnyMaxM rows).
//   kGemv: the GEMV kernel wherever it can run (M <= kGemmGemvMaxM and plan_gemm_gemv), else as kBf16: tests and
//     benches force the kernel with it.
//   kBf16: where gemm_gemv_preferred says so, the fp32 GEMV kernel (FP8_BLOCK / BF16, M <= kGemmGemvMaxM, exact
//     fp32 products, K split inside a block summed in a fixed order); else 1 <= M <= kGemmStreamMaxM with FP8_BLOCK
//     weights (K and block_k multiples of 64, 16-byte aligned data) run the bf16 streaming tensor-core kernel (x
//     rounded to bf16, fp32 accumulation, split-K summed in a fixed order); every other case as kFp32SmallM.
//   kBatchInvariant: kernel and K split chosen from the weight alone, never from M (gemm_invariant_plan), so a row's
//     bits do not depend on the batch: FP8 N <= 4096 streaming (chunks of kGemmStreamMaxM rows), small other
//     weights skinny, the rest tiled.
enum class GemmPrecision { kFp32SmallM, kBf16, kGemv, kBatchInvariant };

enum class GemmKernel { kSkinny, kTiled, kStream, kGemv };

// How the cuBLASLt engine computes an FP8_BLOCK weight's GEMM (DSINFER_CUBLASLT_ACT: fp8, fp8x2, bf16, auto; default
// kAuto):
//   kFp8    one e4m3 term per element: the official act_quant numerics and the fastest (one matmul), but e4m3's
//           ~2^-4 relative rounding of every activation failed the fidelity gate on the shipped model in a CPU
//           simulation (top-1 97.3 %, mean KL 1.5e-3 vs the exact path, 5 dense projections quantized);
//   kFp8x2  two terms x ~= q s + q2 s2 (the second quantizes what the first leaves, per 128-block): ~2^-8 relative,
//           bf16-class (same simulation: top-1 99.90 %, mean KL 2.5e-6); two block-scaled matmuls accumulate into
//           y, so twice the FP8 tensor-core work and twice the weight reads (still one FP8 weight copy in memory);
//   kBf16   the weight (E8M0 scales) widened to an exact bf16 copy in an engine buffer on every call
//           (gemm_widen_cuda.h), x rounded to bf16 (RNE), one bf16 matmul with fp32 accumulation: the numerics of
//           the bf16 tiled kernel and of wo_a's batched call (2^-9 relative on x, exact W); one bf16 GEMM's tensor
//           work (= the two FP8 terms') but cuBLASLt's dense bf16 kernels run nearer their peak than its
//           block-scaled FP8 ones; costs the widening (a read of the FP8 weight, a write of 2 bytes a weight) and a
//           buffer of the largest such weight (shared with the grouped call's);
//   kAuto   per call from the shape and M: gemm_lt_fp8_route.
enum class GemmLtActivations { kFp8, kFp8x2, kBf16, kAuto };

// How the engine runs a kFp8x2 call (DSINFER_CUBLASLT_STACK: 0, auto, all; default kGemmLtStackDefault): kOff two
// block-scaled matmuls, the second accumulating into y (the weight read twice); kAuto where gemm_lt_fp8x2_stacked
// says so, one matmul over the two terms stacked as 2 M rows of the B operand (the weight read once, the
// quantization and the scales unchanged) into an engine buffer, then one kernel y = ((y) + term 1) + term 2 in the
// two matmuls' order; kAll stacked at every M <= kGemmLtStackMaxM and every N (benches, A/B).
enum class GemmLtStack { kOff, kAuto, kAll };
// kAuto since session 26: the fidelity gate and check-reference pass with it, and the decode step gained (H200,
// V4-Flash 4 layers, context 4,096: batch 64 5.160 -> 5.087 ms, batch 256 8.636 -> 8.442 ms; bench/NOTES.md).
inline constexpr GemmLtStack kGemmLtStackDefault = GemmLtStack::kAuto;
// The stacked form's limits (kAuto): rows up to kGemmLtStackMaxM (decode sizes: cuBLASLt's block-scaled matmul
// costs about the same at 2 M rows as at M there), outputs up to kGemmLtStackMaxN (the sum kernel moves 3 x M x N x
// 4 bytes: for wq_b's N = 32,768 the stacked call lost from 128 rows). H200, graph-replayed us, two matmuls ->
// stacked at M = 64 / 256: wq_a 33.6 -> 21.2 / 41.7 -> 29.2, wkv 33.2 -> 20.8 / 41.0 -> 27.6, wo_b 41.7 -> 28.4 /
// 66.1 -> 53.0; wq_b 37.3 -> 28.0 / 66.7 -> 74.5 (bench/NOTES.md session 23).
inline constexpr int64_t kGemmLtStackMaxM = 256;
inline constexpr int64_t kGemmLtStackMaxN = 4096;
bool gemm_lt_fp8x2_stacked(int64_t M, int64_t N, GemmLtStack setting);

// The FP8 skinny wgmma kernel (gemm_fp8_skinny_cuda.h; session 24), DSINFER_GEMM_FP8_SKINNY: kAuto (default: two
// activation terms, the cuBLASLt kFp8x2 numerics, in gemm_fp8_skinny_auto's cells only), kOff (the other routes
// everywhere), kTwoTerms (1 or fp8x2: at every M it takes), kOneTerm (fp8: official act_quant numerics, every M).
enum class GemmFp8Skinny { kAuto, kOff, kTwoTerms, kOneTerm };
inline constexpr GemmFp8Skinny kGemmFp8SkinnyDefault = GemmFp8Skinny::kAuto;
// Rows the kernel takes (decode batches).
inline constexpr int64_t kGemmFp8SkinnyMaxM = 256;
// kAuto's grouped weights (wo_a) take the kernel up to this M: every M the kernel takes since session 27, whose
// activation quantization on the hardware conversions runs wo_a's 32K-wide rows 2.2-2.4x faster (10.0 / 17.6 / 32.4
// us at M = 64 / 128 / 256 against 21.9 / 40.6 / 76.8), so that the model measured wo_a 0.286-0.289 -> 0.198 ms at
// batch 128 and 0.330-0.331 -> 0.297 at 256 (4 layers; bench/NOTES.md, session 27).
inline constexpr int64_t kGemmFp8SkinnyAutoGroupedMaxM = kGemmFp8SkinnyMaxM;
// kAuto's cells, where the kernel beat the other routes in the model (H200, session 26, V4-Flash 4 layers, decode at
// context 4,096, us a layer at batch 1 / 64 / 256, the other routes with the stacked cuBLASLt form -> the kernel):
// wq_b (N = 32,768) 22.5 / 46 / 69 -> 19.8 / 25 / 57; wo_a (8 groups) 20.9 / 66 / 83 -> 22.4 / 45 / 119; wq_a + wkv
// 15.7 / 25 / 71-78 -> 22.6 / 32 / 57; wo_b 22.2 / 32 / 58 -> 27.8 / 40 / 72 (bench/NOTES.md, session 26). So:
// rows above kGemmGemvMaxM only (a speculative verify step of up to that many rows keeps the kernels of a 1-row
// decode step: gemm_gemv_preferred), up to kGemmFp8SkinnyMaxM; grouped weights up to kGemmFp8SkinnyAutoGroupedMaxM;
// single weights of N > kGemmStreamMidMaxN (wq_b) at every such M, of N <= kGemmStreamMaxN (wq_a, wkv) above
// kGemmStreamMidMaxM (the streaming kernel's range); never N in between (wo_b).
bool gemm_fp8_skinny_auto(int64_t M, int64_t N, int64_t groups);
// K splits (thread-block cluster size, portable limit).
inline constexpr int kGemmFp8SkinnyMaxSplits = 8;
// Shared memory a block may opt into on sm_90.
inline constexpr int kGemmFp8SkinnySmemMax = 227 * 1024;
// Whether the kernel takes the weight at all: FP8_BLOCK with 128 x 128 scale blocks, K % 128 == 0, non-null data and
// scales; grouped (groups > 1) needs rows % (128 * groups) == 0 (whole 128-row tiles per group).
bool gemm_fp8_skinny_supports(const DeviceWeight& w, int64_t groups);
// Launch shape for M rows of a weight of groups x N rows (per group) and K columns, `terms` activation terms:
// M <= 128: 128 weight rows x tok tokens a CTA (tok = the power of two >= M, at least 8 with two terms, 16 with one);
// 129..256: 64 weight rows x 2 x 128 tokens (the two consumer warpgroups on two token units, the weight read once).
// K split (cluster, rank-order DSMEM sum) doubled while the CTAs (items x splits) stay within the SMs (pairs) or half
// of them (clusters of 4 / 8: each needs that many free SMs of one GPC), the K / 128 blocks divide evenly and each
// split keeps >= 2 blocks, up to kGemmFp8SkinnyMaxSplits (then one item per cluster); without a
// split a persistent grid of ceil(items / ceil(items / sm_count)) CTAs. Ring stages: as many as fit (2..8). False
// when the shape does not apply (M, K, groups, terms), a split would hold more than 128 * detail::kFp8SkWsRegs
// blocks (the consumers' scale registers) or no ring fits.
bool plan_gemm_fp8_skinny(int64_t M, int64_t N, int64_t K, int64_t groups, int terms, int sm_count,
                          detail::Fp8SkinnyParams& p);
// The launch shape at a given consumer layout (wg_rows 1 or 2, tok a power of two the kernel instantiates) with at
// most max_splits K splits: plan_gemm_fp8_skinny's second half, which it calls with its own choice and
// kGemmFp8SkinnyMaxSplits; dsinfer_gemm_bench --fp8skinny sweeps the others. False where plan_gemm_fp8_skinny would
// be, or for a layout or split cap out of range.
bool plan_gemm_fp8_skinny_at(int64_t M, int64_t N, int64_t K, int64_t groups, int terms, int sm_count, int wg_rows,
                             int tok, int max_splits, detail::Fp8SkinnyParams& p);

// The environment overrides of the GEMM choice, read once (gemm_settings_from_env, at runner construction); unset
// or empty keeps the default, any other value is an error naming the variable:
//   DSINFER_CUBLASLT        0 = no cuBLASLt, 1 = cuBLASLt (default kGemmLtDefaultOn)
//   DSINFER_CUBLASLT_MIN_M  smallest M for FP8 weights on cuBLASLt, an integer >= 1 (default kGemmLtMinM)
//   DSINFER_CUBLASLT_ACT    fp8 = one activation term, fp8x2 = two, bf16 = bf16 x on the widened weight, auto =
//                           gemm_lt_fp8_route's per-shape choice (default kAuto)
//   DSINFER_GEMM_SEGMENTS   0 = one launch per projection, skinny = projections of one x in one skinny launch where
//                           plan_gemm_segments allows, 1 = in one skinny or one streaming launch (default; the same
//                           bits either way: the A/B switch)
//   DSINFER_CUBLASLT_STACK  0 = the two-term FP8 route as two matmuls, auto = stacked where gemm_lt_fp8x2_stacked,
//                           all = stacked at every M <= kGemmLtStackMaxM (GemmLtStack; default kGemmLtStackDefault)
//   DSINFER_GEMM_FP8_SKINNY auto = the FP8 skinny wgmma kernel in gemm_fp8_skinny_auto's cells (default
//                           kGemmFp8SkinnyDefault), 0 = off, 1 or fp8x2 = with two activation terms, fp8 = with one,
//                           at every 1..kGemmFp8SkinnyMaxM rows (GemmFp8Skinny): plan_gemm_call /
//                           plan_gemm_grouped_call send the FP8 weights it supports there
struct GemmSettings {
  bool cublaslt = kGemmLtDefaultOn;
  int64_t lt_min_m = kGemmLtMinM;
  GemmLtActivations lt_activations = GemmLtActivations::kAuto;
  bool segments = true;         // DSINFER_GEMM_SEGMENTS != 0
  bool segments_stream = true;  // DSINFER_GEMM_SEGMENTS = 1 (or unset): the streaming kernel's segments too
  GemmLtStack lt_stack = kGemmLtStackDefault;
  GemmFp8Skinny fp8_skinny = kGemmFp8SkinnyDefault;
};
// The settings from these variable values (nullptr = unset); gemm_settings_from_env passes std::getenv's.
Result<GemmSettings> gemm_settings_from(const char* cublaslt, const char* min_m, const char* act,
                                        const char* segments = nullptr, const char* stack = nullptr,
                                        const char* fp8_skinny = nullptr);
Result<GemmSettings> gemm_settings_from_env();

// The fast path's kernel choice for FP8_BLOCK / BF16 weights at few rows:
//  - gemm_gemv_preferred: the fp32 GEMV kernel for grouped weights (wo_a) and N > kGemmGemvMinN at every
//    M <= kGemmGemvMaxM; the bf16 streaming kernel for N <= 1024 (wq_a, wkv). Measured on the H200 (bench/NOTES.md
//    wave 5, dsinfer_gemm_bench --gemv): the GEMV kernel is fastest at M <= 2 for every V4-Flash shape and at every
//    M for wo_a, the streaming kernel at M >= 4 for N <= 2048 and for wq_b (N = 32768). The choice depends on the
//    shape only, never on M, on purpose: a speculative verify step (1 + k rows) runs each row through the same
//    kernel as a plain decode step (1 row) (measured: fast-path greedy output with and without speculation 3/8
//    identical with an M-dependent choice, 8/8 with this one). Same kernel is not always same bits: with one warp
//    on K (GemvParams::wk = 1) a lane sums the same vectors in the same order at every M, so rows are bit-equal;
//    where the plan splits K over warps and wk or the vectors per lane change with M (V4-Flash shared expert and
//    wo_b at M <= 8), the last bits differ. The shipped model and V4-Flash wq_b / wo_a / lm head have wk = 1 at
//    every M (tests/unit/test_gemm_plan.cpp). Bit-equal rows everywhere are what --batch-invariant is for.
//  - gemm_stream_preferred: whether the runner passes GemmPrecision::kBf16 at all: every M <= kGemmGemvMaxM (the
//    GEMV or the streaming kernel, both faster there than the default kernels), plus the bf16 streaming kernel where
//    it measured faster (bench/NOTES.md 2026-11-30: N <= 1024 at every M <= 256 (wq_a, wkv), N <= 4096 at 9 <= M
//    <= 128 (wo_b, the shared expert)); larger N, grouped weights (wo_a) and N > 1024 at M > 128 run faster on the
//    default kernels.
bool gemm_gemv_preferred(int64_t M, int64_t N, bool grouped);
bool gemm_stream_preferred(int64_t M, int64_t N);
// The dense projections' (plan_gemm_call's) FP8 weights at kGemmGemvMaxM < M <= kGemmStreamFp8MaxM: the persistent
// streaming kernel at every N, below cuBLASLt's s.lt_min_m (session 14, issue 31: bench/NOTES.md "Session 14 — issue
// 31"). The MoE's shared expert keeps gemm_stream_preferred.
bool gemm_stream_fp8_preferred(int64_t M, WeightFormat fmt);

// Whether a weight's format and shape can go through cuBLASLt: FP8_BLOCK with 128 x 128 blocks, K % 128 == 0,
// N % 16 == 0; or BF16 / F32 with K % 8 == 0, N % 4 == 0.
bool gemm_lt_supports(const DeviceWeight& w);
// gemm_lt_supports(w) and M at or above the format's threshold (s.lt_min_m for FP8_BLOCK, kGemmLtMinMDense else).
bool gemm_lt_wants(const DeviceWeight& w, int64_t M, const GemmSettings& s);

// The representation of one FP8_BLOCK call of the cuBLASLt engine (never kAuto): `setting` itself when it is not
// kAuto, except that kBf16 needs E8M0 scales (an exact widening; fp32 scales fall back to kFp8x2). kAuto: kBf16 for
// E8M0 weights from kGemmLtWideMinM rows, kFp8x2 below. Monotone in M (kBf16 at M implies kBf16 at every larger M).
GemmLtActivations gemm_lt_fp8_route(const DeviceWeight& w, int64_t M, GemmLtActivations setting);
// The most rows, among calls of 1..max_rows rows, that gemm_lt_fp8_route sends to an FP8 route (kFp8 / kFp8x2); 0
// when none does. The engine's prepare sizes its FP8 activation buffers for these and its bf16 ones for max_rows,
// so a graph capture of any smaller call (a decode step after a prefill) finds its buffers.
int64_t gemm_lt_fp8_max_rows(const DeviceWeight& w, int64_t max_rows, GemmLtActivations setting);

// The runner's plan for one projection call (V4 runner, V4.1 runner, GPU drafter).
struct GemmCallPlan {
  bool lt_prepare = false;  // set the weight up on cuBLASLt (every eager call, so it is ready before a graph captures)
  bool lt = false;          // run it on cuBLASLt; any engine error falls back to the kernels below
  int64_t chunk_rows = 1;   // kernels: rows per gemm_cuda / gemm_grouped_cuda call
  GemmPrecision precision = GemmPrecision::kFp32SmallM;
  // kFast with s.fp8_skinny on: the FP8 skinny wgmma kernel (gemm_fp8_skinny_cuda) with this many activation terms
  // (0 = not); an error from it falls back to the route above.
  int fp8_skinny_terms = 0;
};
// y = x . W^T, M rows. kExact: chunks of kGemmSkinnyMaxM rows, kFp32SmallM (the fp32 kernel throughout);
// kBatchInvariant: kBatchInvariant in one call, never cuBLASLt (its algorithm depends on M); kDefault: kFp32SmallM
// in one call; kFast: cuBLASLt where s.cublaslt and gemm_lt_wants (but FP8 weights of N <= kGemmStreamMaxN stay
// on the streaming kernel up to kGemmStreamMidMaxM rows, where it measured faster: session 14), else kBf16 where
// gemm_stream_preferred or gemm_stream_fp8_preferred. With s.fp8_skinny on, kFast FP8 weights the FP8 skinny kernel
// takes (gemm_fp8_skinny_supports) at 1..kGemmFp8SkinnyMaxM rows also get fp8_skinny_terms (tried first).
GemmCallPlan plan_gemm_call(const DeviceWeight& w, int64_t M, KernelMode mode, const GemmSettings& s);
// Whether the cuBLASLt engine's batched grouped call (GemmLtEngine::gemm_grouped) takes the weight: groups >= 2
// whole groups of rows % 4 == 0, K % 8 == 0, and FP8_BLOCK with E8M0 scales (widened exactly to bf16 per call) or
// BF16; non-null data (and scales).
bool gemm_lt_grouped_supports(const DeviceWeight& w, int64_t groups);
// The grouped projection (wo_a: `groups` groups of w.rows / groups rows). kFast: the engine's batched call
// (p.lt) from kGemmGroupedBatchedMinM rows for FP8 weights it supports (gemm_lt_grouped_supports; BF16 grouped
// weights are V4.1's: gemm_widen_plan.h), else kBf16 where gemm_gemv_preferred (the streaming kernel measured slower
// than the default kernels for wo_a at every M). Never cuBLASLt under kExact / kBatchInvariant.
GemmCallPlan plan_gemm_grouped_call(const DeviceWeight& w, int64_t groups, int64_t M, KernelMode mode,
                                    const GemmSettings& s);
// Group g of a grouped FP8 weight as a weight of its own (its rows and scale blocks): one group's GEMM (benches,
// tests: the per-group cuBLASLt path the batched call replaced).
DeviceWeight gemm_group_view(const DeviceWeight& w, int64_t groups, int64_t g);

// ---- Kernel plans (what gemm_cuda / gemm_grouped_cuda launch) ----

// The weight facts the batch-invariant choice may depend on.
struct GemmWeightShape {
  WeightFormat fmt = WeightFormat::F32;
  int64_t N = 0, K = 0, block_k = 128, groups = 1;
  bool w_vec = false;     // 16-byte weight vectors legal (GemmArgs::w_vec)
  bool gathered = false;  // MoE row gather / per-expert pointers / row offsets
};
GemmWeightShape gemm_weight_shape(const detail::GemmArgs& a, WeightFormat f);

struct GemmInvariantPlan {
  GemmKernel kernel = GemmKernel::kTiled;
  int splits = 1, kb_per_split = 1;  // streaming kernel: fixed K partition (scale blocks per split)
};

// The streaming kernel applies to the weight at all (any M <= kGemmStreamMaxM).
bool gemm_stream_weight_ok(const GemmWeightShape& w);
// x tile bytes of one streaming block: `tokens` rows of kb_per_split scale blocks in bf16, +16 bytes of padding.
inline int64_t gemm_stream_xs_bytes(int64_t tokens, int64_t kb_per_split, int64_t block_k) {
  return tokens * (kb_per_split * block_k * 2 + 16);
}
// Batch-invariant mode (docs/kernels.md "Batch invariance"): kernel and K partition from the weight and the SM count,
// never from M, so the same row gives the same bits in any batch (skinny: a lane chain + fixed butterfly per row;
// tiled: one thread's fixed-order mma chain per element; streaming: per-split chains summed in cluster-rank order,
// tokens per block only change which block holds a row). Streaming split: doubled (<= 8) while one token chunk of
// the weight gives fewer than 2 blocks per SM or the 8-token x tile exceeds kGemmStreamXsMax - the default plan's
// rule at M = 1, so decode keeps its parallelism; larger M only adds token chunks on grid z.
GemmInvariantPlan gemm_invariant_plan(const GemmWeightShape& w, int sm_count);
// Tokens per streaming block for a chunk of M <= kGemmStreamMaxM rows under a fixed K partition: the power of two
// >= M (8..64), halved while the x tile exceeds kGemmStreamXsMax. Changes only which block holds a row, never a
// row's sums. 0 when even 8 tokens do not fit (gemm_invariant_plan never returns such a plan).
int gemm_invariant_stream_tokens(int64_t M, int64_t kb_per_split, int64_t block_k);
// Register prefetch depth of the streaming kernel (StreamParams::depth): 8 chunks when a split's 64-wide chunks are a
// multiple of 8 (the prefetch then runs on across row blocks), else 4; plan_gemm_stream takes 4 at 32 / 64 tokens per
// block (measured faster there).
int gemm_stream_depth(int64_t kb_per_split, int64_t block_k);
// Persistent grid of the streaming kernel (StreamParams::row_grid): as many row-block columns as fit in
// kGemmStreamBlocksPerSm blocks per SM (fewer when the shared memory allows fewer) beside `other_blocks` = splits x
// token chunks x groups, balanced so every block walks the same number of row blocks (+-1); all row blocks when
// they fit.
int64_t gemm_stream_row_grid(int64_t row_blocks, int64_t other_blocks, int64_t smem_bytes, int sm_count);
// Launch shape of one batch-invariant streaming chunk of M <= kGemmStreamMaxM rows; false when no tile fits.
bool gemm_invariant_stream_params(const GemmInvariantPlan& p, int64_t M, int64_t block_k, detail::StreamParams& sp);

namespace detail {
// Fills the weight fields of `a` from `w` (single weight, grouped by rows) and decides w_vec (16-byte weight vectors:
// K a multiple of a vector, 16-byte aligned data, FP8 block_k % 16 == 0) / x_vec (x, ldx, x_gstride 16-byte
// multiples): facts the plans below read.
void set_weight_args(GemmArgs& a, const DeviceWeight& w);
void set_x_vec(GemmArgs& a);
// Streaming kernel: false when it does not apply (format, M, K / block_k / alignment, MoE gathers, shared memory).
// Tokens per block = the power of two >= M (8..64); K split (cluster) doubled while the grid has fewer than 2
// blocks per SM or the x tile exceeds kGemmStreamXsMax; then tokens halved while it still does; then the depth
// (gemm_stream_depth) and the persistent row grid (gemm_stream_row_grid).
bool plan_gemm_stream(const GemmArgs& a, WeightFormat f, int sm_count, StreamParams& p);
// GEMV kernel: false when it does not apply (format, M, !w_vec, MoE gathers, too many row blocks). Block shape:
// wr = row warps, the largest of 8, 4, 2, 1 whose grid still has a block per SM (more rows per block = fewer
// re-reads of the staged x); then wk = K-splitting warps filling the block up to 8 warps (small N: wkv, wq_a), as far
// as the chunk has steps for them and the x chunk fits kGemvXsBudget.
bool plan_gemm_gemv(const GemmArgs& a, WeightFormat f, int sm_count, GemvParams& p);
}  // namespace detail

// The kernel gemm_cuda / gemm_grouped_cuda launch for a filled GemmArgs (weight fields, w_vec, x_vec) and a
// precision. kBatchInvariant: gemm_invariant_plan (streaming in chunks of kGemmStreamMaxM rows,
// gemm_invariant_stream_params per chunk). Else: the GEMV kernel when kGemv, or kBf16 and gemm_gemv_preferred, and
// plan_gemm_gemv applies; the streaming kernel when kBf16 / kGemv and plan_gemm_stream applies; the skinny kernel at
// M <= kGemmSkinnyMaxM with 16-byte weight vectors; the tiled kernel otherwise.
struct GemmKernelPlan {
  GemmKernel kernel = GemmKernel::kTiled;
  detail::GemvParams gemv;        // kGemv
  detail::StreamParams stream;    // kStream outside batch-invariant mode
  GemmInvariantPlan invariant;    // kBatchInvariant: the fixed K partition of the streaming kernel
};
GemmKernelPlan plan_gemm_kernel(const detail::GemmArgs& a, WeightFormat f, GemmPrecision precision, int sm_count);

// The one launch of gemm_segments_cuda for the segments' GemmArgs (each with its own weight fields; one format, K and
// block size) at `precision`: ok when every segment's own gemm_cuda call (plan_gemm_kernel) is the skinny kernel
// (a skinny row's sums depend only on K, the format and its x row), or every one is the streaming kernel outside
// batch-invariant mode with the same launch shape but the row grid (splits, scale blocks per split, tokens per
// block, depth: the K split follows N, so it must agree, as it does for V4-Flash's wq_a and wkv at every M); the
// streaming segments' row grid is gemm_stream_row_grid over all their 64-row blocks. Either way every output has
// its own call's bits.
struct GemmSegmentsKernelPlan {
  bool ok = false;
  GemmKernel kernel = GemmKernel::kSkinny;  // kSkinny or kStream
  detail::StreamParams stream;               // kStream
};
GemmSegmentsKernelPlan plan_gemm_segments_kernel(const detail::GemmArgs* a, int count, WeightFormat f,
                                                 GemmPrecision precision, int sm_count);
// Several weights over the same x (the projections of one normalised input) in one launch (gemm_segments_cuda):
// one_launch when there are 2..kGemmMaxSegments weights of one format, K and block size, each of whose own runner
// call (plan_gemm_call) would be one kernel call (no cuBLASLt, chunk_rows >= M) under one common precision, and
// plan_gemm_segments_kernel finds one launch for them: V4's compressor and indexer projections (skinny: decode and
// batch-invariant mode) and wq_a + wkv (streaming: fast mode, M <= kGemmStreamMidMaxM). Never when s.segments is
// off (nor where a weight's call takes the FP8 skinny kernel: fp8_skinny_terms); the streaming form only when
// s.segments_stream. The caller keeps each weight's lt_prepare (cuBLASLt setup)
// as its own call would, and passes `precision` to gemm_segments_cuda.
struct GemmSegmentsPlan {
  bool one_launch = false;
  GemmPrecision precision = GemmPrecision::kFp32SmallM;
  GemmKernel kernel = GemmKernel::kSkinny;  // of the one launch
};
GemmSegmentsPlan plan_gemm_segments(const DeviceWeight* const* w, int count, int64_t M, KernelMode mode,
                                    const GemmSettings& s, int sm_count);

}  // namespace dsinfer::ops::cuda
