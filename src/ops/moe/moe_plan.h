// Kernel choice of the MoE expert layer, in one place: which kernels run the routed experts (exact grouped GEMMs,
// the fast decode kernels, the grouped prefill GEMMs), the permutation in one launch or two, the gate/up kernel on
// fp32 x or on gathered bf16 rows, the shared expert's GEMM precision, and how the runners chunk and route a step
// (MoePath from the runner's KernelMode). moe_cuda.cpp and the runners only execute it. Host code without CUDA types
// (dsinfer_core; C++17: moe.cu sizes its shared memory from kMoePrepMaxN); tests/unit/test_moe_plan.cpp pins it.
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_plan.h"
#include "ops/kernel_mode.h"
#include "ops/moe/moe_fast_shared.h"  // MoeFastVariant
#include "ops/moe/moe_grouped_launch.h"  // MoeGroupedRsVariant
#include "ops/moe/moe_launch.h"  // MoeExpertsDevice, MoeSharedDevice

namespace dsinfer::ops::cuda {

// Which kernels run the routed experts. Exact: fp32 streaming GEMMs for T*topk <= 8*experts, else the bf16
// tensor-core tiled GEMMs (the reference-checking path). Fast: the grouped decode kernels of moe_fast.cu (x and the
// SwiGLU output rounded to bf16, each touched expert's FP4 weights read once per 8 of its rows) when
// moe_fast_supported(), else as Exact. The shared expert runs through gemm_cuda, except moe_shared_fused's case.
// Fast runs the shared expert inside the decode kernels at 2..160 tokens (moe_fast_shared.h), else on the side
// stream beside the routed experts; for T*topk <= kMoePrepMaxN the permutation in one launch, which also rounds x's
// rows to the kernels' bf16 operand.
// Invariant (--batch-invariant): as Fast when supported (a token's result does not depend on T there), else the
// tiled grouped GEMMs for every T (never the T-dependent skinny choice); the shared expert with
// GemmPrecision::kBatchInvariant. A token's bits then do not depend on the other tokens or on T.
// Grouped for every T (tests, benches): the bf16 grouped prefill GEMMs of moe_grouped.cu (same numerics as Fast's
// decode kernels: x and h rounded to bf16, exact weights, fp32 sums; a token's result does not depend on the other
// tokens, but differs in the last bits from the decode kernels' k order) when moe_fast_supported(), else as Exact.
// GroupedFp8 for every T (benches, tests; Fast's prefill route from issue 30 to session 17): the FP8 wgmma grouped
// GEMMs of moe_grouped_fp8.cu (x
// and h quantized to two e4m3 terms per row and 128 / 64 k, FP4 weights expanded to e4m3 exactly, fp32 block sums
// promoted per block; contract in moe_fp8_common.h; a token's result does not depend on the other tokens) when
// moe_fast_supported(), else as Exact. Measured on the H200 (bench/NOTES.md, issue 30, third session): 1.19-1.26x
// the bf16 grouped path at every T from 512 to 8,192, slower than the decode kernels up to 1,024 tokens (4.79 vs 3.72
// ms at 1,024), and the fidelity gate passes with it forced for every T (KL 2.3e-5 against the bf16 path's 1.9e-4).
// CutlassFp8 for every T: the CUTLASS grouped FP8 GEMMs of moe_grouped_cutlass.cu for FP8_BLOCK experts (128 x 128
// blocks; DeepSeek's block scaling as DeepGEMM's: x and h one e4m3 term per row and 128 k, fp32 block sums promoted
// per 128 k; contract in moe_grouped_cutlass_launch.h; a token's result does not depend on the other tokens) when
// moe_cutlass_supported(), else as Exact. FP4 experts never take it. Fast does not take it: with one e4m3 term the
// fidelity gate fails on an FP8-expert copy of the shipped model (top-1 97.66 %, KL 1.72e-3; docs/decisions.md
// 2026-12-03), so it is asked for by name (benches, tests) until it has a second term.
// Fast with T > kMoeGroupedMinT, and GroupedRs for every T: the bf16 wgmma grouped GEMMs of moe_grouped_rs.cu (the
// FP4 weights decoded in registers as wgmma's A operand, the activations by TMA; numerics of Grouped: x and h rounded
// to bf16, exact weights, fp32 sums over the whole K; a token's result does not depend on the other tokens) when
// moe_fast_supported(), else as Exact. Measured on the H200 (bench/NOTES.md "Session 18 — the grouped MoE GEMMs as
// one bf16 term"): bitwise the bf16 grouped path's output (so its fidelity), gate/up + down 2.53 ms per V4-Flash
// layer at T = 4,096 against the FP8 kernels' 5.07 (5.04 vs 9.47 at 8,192).
enum class MoePath { Exact, Fast, Invariant, Grouped, GroupedFp8, CutlassFp8, GroupedRs };

// ---- Thresholds (one definition each) ----

// MoePath::Fast takes the grouped prefill GEMMs above this many tokens, the decode kernels up to it. Measured on the
// H200 with the RS kernels' wgmma N per tile (bench/NOTES.md "Session 19 — the RS grouped MoE kernels: wgmma N per
// tile"; moe_cuda per V4-Flash layer, routed experts): the RS route 1.45-1.85x the decode kernels at 640-896 tokens
// (session 18, N 96 / 128: a tie at 512); the fidelity gate at 768-token steps passes (top-1 99.902 %, KL 7.6e-5).
// 1,024 until session 19.
inline constexpr int64_t kMoeGroupedMinT = 640;
// From kMoeSharedFusedMinT to kMoeSharedFusedMaxT tokens MoePath::Fast runs the shared expert inside the decode
// kernels (moe_fast_shared.h: ceil(T / 8) extra grid rows, each streaming the shared weights for 8 tokens), otherwise
// on the side stream through gemm_cuda. Measured on the H200 (bench/NOTES.md "Session 17 — MoE decode", moe_cuda per
// V4-Flash layer, fused vs side stream): T = 1 66.1 vs 64.9 us, 2 99.2 vs 112.4, 8 228.5 vs 294.1, 16 378.1 vs 539.4,
// 128 1,168 vs 1,225, 160 1,239 vs 1,255, 192 1,318 vs 1,323 (a tie), 256 1,495 vs 1,464.
inline constexpr int64_t kMoeSharedFusedMinT = 2, kMoeSharedFusedMaxT = 160;
// MoePath::Fast's decode kernels take the experts with more than 8 rows in the paired kernel (MoeFastArgs::big:
// 16 of their rows a pass, each weight tile streamed and decoded once for them instead of once per 8 rows) from this
// many assignments per expert on average (T * topk >= kMoePairedMinRowsPerExpert * experts: V4-Flash from T = 214;
// Poisson rows then put ~7 % of the experts above 8). Measured on an H100 (bench/NOTES.md "Session 36", stages
// bench, routed gate/up + down a V4-Flash layer, paired vs not): T = 128 +1.2 %, 192 (4.5 rows an expert) 0.0 %,
// 256 -4.9 %, 320 -12.4 %; the model's b256 graph step -0.55 ms (-6 %), b192 unchanged.
inline constexpr int64_t kMoePairedMinRowsPerExpert = 5;
// The paired kernel's grid rows (MoeFastArgs::big_grid; blocks walk the list): at most this many, at most one per
// possible expert with 9 or more rows.
inline constexpr int64_t kMoePairedMaxGridRows = 64;
// Up to this many assignments (T * topk) the permutation is one launch (moe_prep_kernel stages them in shared
// memory: this is also its array size); above, the count and scatter kernels.
inline constexpr int kMoePrepMaxN = 2048;
// Exact / fallback expert GEMMs take the fp32 skinny kernel while the expert rows average at most this many per
// expert (T * topk <= 8 * experts; the skinny kernel's row chunk), else the tiled kernel. Exact mode chunks a step
// so that every chunk qualifies.
inline constexpr int64_t kMoeSkinnyRowsPerExpert = 8;
// Batch-invariant mode runs the MoE in chunks of this many tokens (the fast kernels' per-token sums do not depend
// on the chunk; it bounds the workspace like the fast path's decode range).
inline constexpr int64_t kMoeInvariantChunkT = 1024;
// KernelMode::kDefault (the GPU drafter) takes MoePath::Fast up to this many tokens, the exact path's tiled GEMMs
// beyond (as the V4 runner did before the grouped prefill kernels).
inline constexpr int64_t kMoeDefaultFastMaxT = 1024;

// The CUTLASS grouped GEMMs run 1 x 2 clusters (two CTAs on adjacent 128-wide N tiles of the same rows, the A tile
// loaded once and multicast) from this many rows per expert on average (T * topk / experts) where N / 256 is whole,
// 1 x 1 clusters otherwise. Set to 64 before measuring; measured on the H200 (bench/NOTES.md "Session 14 — issue 30",
// GEMMs alone, V4-Flash routed, same bits): 1 x 2 is faster at every T measured: 1.75 vs 2.12 ms at T = 512 (~12 rows
// per expert), 1.89 vs 1.91 at 4,096, 6.05 vs 6.22 at 16,384, so no row threshold is left.
inline constexpr int64_t kMoeCutlassClusterMinRows = 0;

// FP4_G32 experts with E8M0 scales, dim % 128 == 0 and inter % 128 == 0.
bool moe_fast_supported(const MoeExpertsDevice& experts);
// FP8_BLOCK experts with 128 x 128 scale blocks (E8M0 or fp32), dim % 128 == 0, inter % 128 == 0 and inter <= dim
// (moe_cuda keeps the up projection's bf16 output in the [rows, dim] expert-output scratch).
bool moe_cutlass_supported(const MoeExpertsDevice& experts);
// The cluster width (1 or 2) of the CUTLASS grouped GEMM over `rows` permuted rows of `experts` experts with N
// outputs per row (MoeCutlassGemmArgs::cluster_n).
int moe_cutlass_cluster_n(int64_t rows, int64_t experts, int64_t N);

enum class MoeExpertKernels { kGemm, kFast, kGrouped, kGroupedFp8, kCutlassFp8, kGroupedRs };

// Consumer warpgroups per CTA of the GroupedRs kernels (MoeGroupedRsArgs::cwg: 2 -> 128 weight rows per CTA, 4 ->
// 256 where N allows).
// Measured (session 18, T = 4,096 / 8,192): 4 is 1.19x / 1.27x faster than 2 (the same bits).
inline constexpr int kMoeGroupedRsCwg = 4;

// moe_cuda's choices for one call of T tokens with topk experts each.
struct MoePlan {
  MoeExpertKernels experts = MoeExpertKernels::kGemm;
  bool gemm_skinny_ok = true;   // kGemm: the skinny kernel may run (plan_moe_expert_gemm); false for Invariant
  bool prep_one_launch = false;  // the permutation in one launch (moe_prep_kernel), else count + scatter
  // kFast and prep_one_launch: moe_prep_kernel also writes the bf16 x rows. The gate/up kernel read fp32 x itself
  // at T*topk <= 16 until session 33 (no gather launch); with the rows in the permutation's launch the bf16 operand
  // is faster at every T (H100, T = 1: gate/up 30.4 vs 36.2 us; the permutation 6.5 us with the rows, 6.7 without).
  bool x_bf16_in_prep = false;
  bool side_stream = false;      // the shared expert on the side stream (usable, and not moe_shared_fused)
  // kFast: the experts with more than 8 rows in the paired kernel (the permutation writes their list)
  bool paired = false;
  bool shared_projection = false;  // the shared expert's GEMMs through the caller's projection (MoeSharedGemm)
  // The routed experts' outputs (yp) stored as bf16 (RNE) by the prefill kernels (kGroupedRs, kGrouped), as the
  // CUTLASS path and both references (transformers' and DeepSeek's, whose expert outputs are bf16 tensors) store
  // them: the combine's gather and the down kernel's stores move half the bytes (session 37). The decode and exact
  // paths keep fp32.
  bool yp_bf16 = false;
};
// shared_gemm: the caller gave moe_cuda its projection GEMM (MoeWorkspace::set_shared_gemm). Fast above
// kMoeGroupedMinT (prefill) then runs the shared expert's three GEMMs through it, in line on the main stream: the
// runner's projections take cuBLASLt there (ops/gemm/gemm_plan.h), where gemm_cuda's tiled bf16 kernel measured
// 1.88 ms per V4-Flash layer at T = 4,096 (110 TFLOP/s; bench/NOTES.md "Session 16 — MoE prefill") and the side
// stream hid 0.27 ms of it behind the persistent grouped kernels, which hold every SM.
// The paired kernel's route (MoePlan::paired; the same bits either way): kAuto from kMoePairedMinRowsPerExpert, kOn
// at every T of the decode kernels, kOff never. DSINFER_MOE_PAIRED = auto (or unset) / on / off (an A/B between
// processes). moe_paired_from: nullptr = unset; a value it cannot use gives kAuto and *valid = false.
// moe_paired_route reads the variable once and names a value it cannot use on stderr.
enum class MoePairedRoute { kAuto, kOn, kOff };
MoePairedRoute moe_paired_from(const char* value, bool* valid = nullptr);
MoePairedRoute moe_paired_route();
// MoeFastArgs::big_grid for n assignments over `experts` experts.
int64_t moe_paired_grid(int64_t n, int64_t experts);

// experts, paired: the routed experts' count and the paired kernel's route (MoePlan::paired; experts 0 = never).
MoePlan plan_moe(MoePath path, bool fast_supported, int64_t T, int64_t topk, bool has_shared,
                 bool cutlass_supported = false, bool shared_gemm = false, int64_t experts = 0,
                 MoePairedRoute paired = MoePairedRoute::kAuto);

// The shared expert inside the decode kernels (moe_fast_shared.h; defined in moe_plan.cpp): MoePath::Fast on the
// decode kernels (kFast), T in [kMoeSharedFusedMinT, kMoeSharedFusedMaxT], and a shared expert the kernels can read:
// FP8_BLOCK with 128 x 128 E8M0 scales, its inter equal to the routed experts' (the same grid columns), its dim
// theirs. Otherwise the shared expert runs through gemm_cuda (side stream or in line, MoePlan).
bool moe_shared_fused(MoePath path, MoeExpertKernels experts, int64_t T, const MoeExpertsDevice& ex,
                      const MoeSharedDevice& sh);

// The decode kernels' variant (MoeFastVariant, same bits): kWordDecode; DSINFER_MOE_FAST_VARIANT=0 takes session 18's
// decode (an A/B between processes), 1 or unset the word decode. moe_fast_variant_from: nullptr = unset; a value it
// cannot use gives kWordDecode and *valid = false. moe_fast_variant reads the variable once and names a value it
// cannot use on stderr. Measured on the H200: bench/NOTES.md "Session 23 — helper s23-moed".
MoeFastVariant moe_fast_variant_from(const char* value, bool* valid = nullptr);
MoeFastVariant moe_fast_variant();

// The RS grouped kernels' consumer code (MoeGroupedRsVariant, same bits; moe_grouped_launch.h):
// DSINFER_MOE_RS_VARIANT=3 or unset kWordStageItem (the default since session 26, measured fastest on the H200); 0
// session 23's (kSession23: an A/B between processes). moe_rs_variant_from: nullptr = unset; a value it cannot use
// gives kWordStageItem and *valid = false. moe_rs_variant reads the variable once and names a value it cannot use on
// stderr.
MoeGroupedRsVariant moe_rs_variant_from(const char* value, bool* valid = nullptr);
MoeGroupedRsVariant moe_rs_variant();

// One grouped expert GEMM (kGemm) over total_rows permuted rows of `experts` experts: the skinny kernel when allowed
// and the rows average <= kMoeSkinnyRowsPerExpert per expert (and 16-byte weight vectors are legal), else the tiled
// kernel walking m_tiles_z row tiles per block (the average expert's tiles + 1).
struct MoeExpertGemmPlan {
  GemmKernel kernel = GemmKernel::kTiled;
  int m_tiles_z = 1;
};
MoeExpertGemmPlan plan_moe_expert_gemm(bool skinny_ok, int64_t total_rows, int64_t experts, bool w_vec);

// The shared expert's projections (N outputs over T rows): kBatchInvariant for Invariant; Fast and Grouped take
// kBf16 where gemm_stream_preferred (the streaming GEMM measured faster); else kFp32SmallM.
GemmPrecision moe_shared_precision(MoePath path, int64_t T, int64_t N);

// The runners: MoePath of a step of T tokens (kExact -> Exact, kBatchInvariant -> Invariant, kFast -> Fast,
// kDefault -> Fast up to kMoeDefaultFastMaxT tokens, else Exact), and the tokens per moe_cuda call (kExact: as
// many as keep T * topk <= kMoeSkinnyRowsPerExpert * experts and T <= kGemmSkinnyMaxM, so the routed and the shared
// expert GEMMs stay on the fp32 kernel; kBatchInvariant: kMoeInvariantChunkT; else all T).
MoePath moe_path(KernelMode mode, int64_t T);
int64_t moe_chunk_tokens(KernelMode mode, int64_t T, int64_t experts, int64_t topk);

}  // namespace dsinfer::ops::cuda
