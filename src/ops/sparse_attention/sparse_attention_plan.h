// Kernel choice of the sparse attention, in one place: the fp32 or the bf16 tensor-core kernel, the number of key
// splits per (token, head block) and the fixed split size of batch-invariant mode, from the runner's KernelMode, the
// step (tokens, longest key list), the head shape and the SM count. The runners only execute it. Host code without
// CUDA types (dsinfer_core); tests/unit/test_sparse_attention_plan.cpp pins it at the V4-Flash and shipped shapes.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/kernel_mode.h"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"  // the FP8-state kernel's tile constants
#include "ops/sparse_attention/sparse_attention_launch.h"  // the kernels' tile constants (detail::kTc*, kAttnTile)
#include "ops/sparse_attention/sparse_attention_prefill_launch.h"  // the split kernel's variants (detail::kSplitVar*)

namespace dsinfer::ops::cuda {

using ::dsinfer::ops::KernelMode;

// Batch-invariant attention (SparseAttentionCudaParams::split_keys): keys per split, fixed for every step and
// batch (four 32-key tiles: decode batch 1 on V4-Flash gets 5-6 CSA splits, batch 64+ stays one wave or two).
inline constexpr int64_t kAttnInvariantSplitKeys = 128;

// Grid splits that cover a step whose longest key list has max_keys keys under fixed split_keys (>= 1). A token's
// own splits are ceil(its keys / split_keys), whatever this count is.
int64_t sparse_attention_fixed_splits(int64_t max_keys, int64_t split_keys);
// The fp32 kernel's split count: about two blocks per SM (at most one split per 64 keys).
int64_t sparse_attention_splits(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count);
// The tensor-core kernel serves head_dim 512 only (DeepSeek-V4), any head count.
bool sparse_attention_tc_supported(int64_t head_dim);
// Split count for the tensor-core kernel: blocks are (token, 64-head group, split), one per SM (214 KB of shared
// memory, 128 accumulators per thread). Minimises waves * (tiles per split + 2), the 2 standing for a block's fixed
// cost (q load, epilogue, its share of the combine); at least one 32-key tile per split. Flash, 132 SMs: batch 1 ->
// one split per tile, batch 64 -> 2 (one wave of 128 blocks), batch 256 -> 1.
int64_t sparse_attention_tc_splits(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count);

// SparseAttentionCudaParams::split_keys and ::tensor_cores for a mode: a fixed split size in batch-invariant mode
// (else 0); the tensor-core kernel in the fast and batch-invariant modes where it serves the head_dim (exact mode,
// check-reference, and kDefault, the GPU drafter, keep the fp32 kernel).
int64_t sparse_attention_split_keys(KernelMode mode);
bool sparse_attention_tensor_cores(KernelMode mode, int64_t head_dim);

struct SparseAttentionPlan {
  int64_t num_splits = 1;
  int64_t split_keys = 0;
  bool tensor_cores = false;
};
// The whole choice for a step of T tokens whose longest key list has max_keys keys: batch-invariant mode as many
// fixed-size splits as the longest list needs; fast mode with the tensor-core kernel its own count; otherwise ~2
// blocks per SM (sparse_attention_splits).
SparseAttentionPlan plan_sparse_attention(KernelMode mode, int64_t T, int64_t heads, int64_t head_dim,
                                          int64_t max_keys, int64_t sm_count);

// The FP8-state decode kernel (sparse_attention_fp8_cuda.h): split count for T tokens of `heads` heads whose longest
// key list has max_keys keys. Blocks are (token, 64-head group, split), one per SM; the warp-specialised kernel runs
// one block per (token, group, split) or (session 19) a cluster pair of two, each dequantising half of every tile
// and keeping half of the output dims. Minimises, over the split count and the two shapes, waves * (tiles per split
// x a tile's cost + kFp8BlockCost): a block's fixed cost (the q load, read once per split; the epilogue; its share of
// the combine) in 32-key tiles of the one block, and the pair's tile at kFp8PairTileCost20 / 20 of the one block's
// on twice the blocks. At least one tile per split, at most 64 splits. Flash (132 SMs, 640 CSA keys): batch 1 -> 20
// (the pair), 64 -> 2, 256 -> 1 (one block); HCA (160 keys) batch 1 -> 5 (the pair), 64 -> 1 (the pair), 256 -> 1:
// the best of the H200 sweeps of forced counts and shapes (bench/NOTES.md, 2026-12-02 and session 19). The pair's
// tile cost: between 0.5 (CSA b64 takes one block at 2 splits: 64.6 us, the pair at 1 split 74.7) and 0.6 (HCA b64
// takes the pair at 1 split: 30.0 us, one block at 2 splits 40.5, at 1 36.9).
inline constexpr int64_t kFp8BlockCost = 4;
inline constexpr int64_t kFp8PairTileCost20 = 11;
int64_t plan_sparse_attention_fp8(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count);
// Which FP8-state kernel runs a call of T tokens of `heads` heads whose longest key list has max_keys keys, at
// num_splits splits on sm_count SMs (p.kernel kAuto; a forced choice is kept): the warp-specialised kernel (session
// 17; measured faster than the lock-step one at every shape the bench runs), as the pair where the model of
// plan_sparse_attention_fp8 finds it cheaper at that split count. All give the same bits
// (sparse_attention_fp8_launch.h), so the choice is speed only, and batch-invariant mode may take any.
Fp8AttentionKernel plan_sparse_attention_fp8_kernel(Fp8AttentionKernel requested, int64_t T, int64_t heads,
                                                    int64_t max_keys, int64_t num_splits, int64_t sm_count);
// The kRoles64 kernel (sparse_attention_fp8_r64.cu, session 24; FlashMLA's warpgroup roles on 64-key tiles): split
// count for T tokens of `heads` heads whose longest key list has max_keys keys. Blocks are (token, 64-head group,
// split), one per SM; minimises waves * (64-key tiles per split + kFp8R64BlockCost) + kFp8R64CombineCost where it
// splits: the block's fixed cost (q load, epilogue) in 64-key tiles, session 20's model of the one-block kernel (F =
// 20.8 us, c = 2.85 us a 32-key tile: F ~ 3.6 64-key tiles) rounded up, and the combine pass (a launch and the
// partials' round trip; main's 2-split steps measured ~14.5 us over their model at b64, taken as 2 tiles here, the
// lower end). At least one tile per split, at most 64 splits; the first of equal costs (fewer splits). Flash (132
// SMs): CSA (640 keys) batch 1 -> 10, 64 -> 2, 256 -> 1; HCA (160 keys) 1 at every batch. Not yet measured: the device
// script's A/B (.dev-s24sparsed) runs these counts and sweeps others.
inline constexpr int64_t kFp8R64BlockCost = 4, kFp8R64CombineCost = 2;
int64_t plan_sparse_attention_fp8_r64(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count);
// The FP8-state decode's whole choice for a step (the runner's sparse_attention_fp8 calls): split count and kernel.
// Main's kernels (kAuto: plan_sparse_attention_fp8 and plan_sparse_attention_fp8_kernel) unless `roles64` (the
// opt-in, sparse_decode64_enabled) and mode is kFast: then kRoles64 at plan_sparse_attention_fp8_r64's count. Never
// in exact or batch-invariant mode (its sums run in another order than the other kernels': other bits).
struct SparseAttentionFp8Plan {
  int64_t num_splits = 1;
  Fp8AttentionKernel kernel = Fp8AttentionKernel::kAuto;
};
SparseAttentionFp8Plan plan_sparse_attention_fp8_decode(KernelMode mode, int64_t T, int64_t heads, int64_t max_keys,
                                                        int64_t sm_count, bool roles64);
// The opt-in, DSINFER_SPARSE_DECODE64: `on` the kRoles64 kernel in fast mode; unset, empty or `off` main's kernels.
// sparse_decode64_from parses a value (any other is an error naming the variable); sparse_decode64_enabled reads the
// environment once (a static) and takes an unparsable value as off, after one line on stderr.
Result<bool> sparse_decode64_from(const char* value);  // nullptr = unset
bool sparse_decode64_enabled();

// Whether a step of T tokens runs the prefill op (sparse_attention_prefill_cuda.h: the lists' rows dequantised once
// into a bf16 staging, then a persistent bf16 wgmma kernel) instead of sparse_attention_fp8. The two give the same
// bits, so the choice is speed only and batch-invariant mode may take either. From kFp8PrefillMinTokens tokens (above
// every decode step, at most 256 tokens, where a row is read once and the staging would only add a pass): session 21
// measured the op (its epilogue's inverse RoPE from a per-token table) at 4.43-4.75 ms of sparse_attention against
// the FP8 kernel's 5.73-5.75 in the model bench's 4,096-token step, the step 30.6-30.7 ms against 31.6-31.9, TTFT 32K
// 251.3 against 260.6 ms (bench/NOTES.md, session 21; session 19's op, one double sincos an output pair, was 5.74).
inline constexpr int64_t kFp8PrefillMinTokens = 1024;
// The route's override, DSINFER_SPARSE_PREFILL, read once with the runner's other settings (CudaForwardV4::load):
// unset, empty or `auto` the plan's threshold; `on` the prefill op at every step; `off` sparse_attention_fp8 at every
// step (the A/B). Any other value is an error naming the variable.
enum class SparsePrefillRoute { kAuto, kOn, kOff };
Result<SparsePrefillRoute> sparse_prefill_route_from(const char* value);  // nullptr = unset
Result<SparsePrefillRoute> sparse_prefill_route_from_env();
bool plan_sparse_attention_fp8_prefill(int64_t T, SparsePrefillRoute route = SparsePrefillRoute::kAuto);
// Which kernel the prefill op runs (session 24, issue 30): main's (sparse_attention_prefill: fp32 or bf16 q, fp32 o,
// the FP8 kernels' bits) or the split-block kernel (sparse_attention_prefill_split: bf16 q in by TMA, bf16 o out, each
// consumer warpgroup its own 64-key block). The split kernel is the default since session 26 (H200, V4-Flash 4 layers,
// prefill 4,096: the op 4.43 -> 3.20 ms, the step 29.66 -> 28.11 ms; bench/NOTES.md). DSINFER_SPARSE_PREFILL_KERNEL,
// read once with the runner's other settings: unset, empty or `split` the split-block kernel where
// plan_sparse_prefill_split allows it; `main` main's kernel (the A/B). Any other value is an error naming the
// variable. With the split kernel (session 27) the GEMMs around it hand over bf16 where they run on the widened bf16
// route: the query straight from wq_b's matmul (GemmLtEngine::gemm_bf16_out, then the norm + RoPE in place on bf16:
// HeadNormRopeParams::in_bf16), and wo_a's output straight into wo_b (gemm_grouped_bf16_out, gemm_bf16_in);
// `split-s26` keeps session 26's fp32 outputs of wq_b (rounded once by the norm + RoPE) and wo_a (rounded by wo_b's
// route) for the A/B.
enum class SparsePrefillKernel { kMain, kSplit, kSplitS26 };
Result<SparsePrefillKernel> sparse_prefill_kernel_from(const char* value);  // nullptr = unset
Result<SparsePrefillKernel> sparse_prefill_kernel_from_env();
// Whether a prefill-op call runs the split-block kernel: asked for, the fast mode only (exact and batch-invariant
// keep main's kernel and its bits: the split kernel's bf16 output is another rounding), one split (its only form).
bool plan_sparse_prefill_split(SparsePrefillKernel kernel, KernelMode mode, int64_t num_splits);
// The split-block kernel's variant (session 28, issue 30; detail::kSplitVar*, sparse_attention_prefill_launch.h: the
// L2 cache policies, the 16-byte output stores, the next item's lengths loaded early; each gives the same bits):
// kSplitVarStore16 by default (session 29's H200 A/B over 4 layers at 4,096 tokens: 0 3.20 ms, l2 3.49, store16
// 2.86, early 3.20, all three 3.00), with the key reuse (detail::kSplitVarReuse, session 40).
// DSINFER_SPARSE_PREFILL_SPLIT_VARIANT (the A/B, read once; another value is named on stderr and ignored): `0`
// (session 24's kernel), `l2`, `store16`, `early`, `all` (none of them with the reuse) or `reuse` (the default).
int plan_sparse_prefill_split_variant();
// The variant a value of that variable names (nullptr or "" = unset: kSplitVarStore16 | kSplitVarReuse); -1 for a
// value it cannot take.
int sparse_prefill_split_variant_from(const char* value);
// The split kernel's run with the reuse (SparseAttentionFp8Params::split_run, session 40): the most consecutive tokens
// of 8, 4, 2 a block takes in a row whose busiest block has at most 1/8 more items than with runs of one token (8 at
// 2,048 or 4,096 tokens on 132 SMs: 16 / 32 items a block either way; 1 at 600 tokens, where runs of 8 would leave
// 57 SMs idle and give the others 8 items against 5); 1 when none does.
int64_t sparse_prefill_split_run(int64_t T, int64_t groups, int64_t sms);
// Whether the split kernel normalises the raw query itself (session 29; SparseAttentionFp8Params::q_norm: the head
// RMSNorm and RoPE of head_norm_rope in its shared memory, the same bits, instead of q_norm_rope's pass over the
// query in HBM). On unless DSINFER_SPLIT_Q_NORM=0 (the A/B; read once; another value is named on stderr and ignored).
bool plan_split_q_norm();
// The model path of the split-block kernel (session 24, s24-sparsep2): whether one layer of one step runs it, the
// V4 runner's one decision (CudaForwardV4::attention, before the query's norm + RoPE). Taken, the query reaches the
// split kernel as bf16 (wq_b's raw output that the kernel normalises itself, plan_split_q_norm, or the norm + RoPE's
// HeadNormRopeParams::out_bf16), the split kernel writes bf16 o, and wo_a's
// batched cuBLASLt call reads that o as its bf16 x (GemmLtEngine::gemm_grouped_bf16) instead of rounding an fp32 o
// itself; not taken, main's path (fp32 q and o) unchanged. Every input must agree:
//   plan_sparse_prefill_split (not refused by DSINFER_SPARSE_PREFILL_KERNEL=main, the fast mode, the layer's FP8
//     split plan at 1 split: where that plan wants more there are too few (token, head group) items to fill the
//     GPU's SMs, which is all the split kernel parallelises over);
//   fp8_state: the layer's keys in DeepSeek's FP8 format (the prefill op's only form: head_dim 512, `official`
//     numerics; check-reference's fixtures and models/dsv4-small never reach it);
//   prefill_op: plan_sparse_attention_fp8_prefill took the prefill op for the step (from kFp8PrefillMinTokens, so
//     decode steps keep main's path, and a mixed step of that many tokens is a prefill step here);
//   all_heads: every query head and output group on this rank (no TP attention: its rank-sliced wo_a keeps fp32);
//   wo_a_bf16: wo_a's plan for the step is the batched bf16 call (plan_gemm_grouped_call(...).lt), the one route that
//     rounds o to bf16 exactly as the split kernel does (RNE of the same fp32 value); the streaming / tiled kernels
//     (DSINFER_CUBLASLT=0, a BF16 wo_a) would read a different x, so the split path is refused there.
struct SparsePrefillSplitStep {
  SparsePrefillKernel kernel = SparsePrefillKernel::kSplit;
  KernelMode mode = KernelMode::kDefault;
  int64_t num_splits = 0;
  bool fp8_state = false, prefill_op = false, all_heads = false, wo_a_bf16 = false;
};
bool plan_sparse_prefill_split_step(const SparsePrefillSplitStep& s);

}  // namespace dsinfer::ops::cuda
