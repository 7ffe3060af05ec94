// Launchers of the sparse attention PREFILL over the FP8 state (session 19, issue 30; semantics and API:
// sparse_attention_prefill_cuda.h). No CUDA types, no Status. C++17: shared with sparse_attention_prefill.cu.
#pragma once
#include <cstdint>

#include "ops/sparse_attention/sparse_attention_fp8_launch.h"  // SparseAttentionFp8Params, kFp8Heads, kFp8Keys

namespace dsinfer::ops::cuda {

// The bf16 staging of a call (carved from the caller's workspace by sparse_attention_prefill_cuda.cpp): every cache
// row the call's key lists name is dequantised once into `rows`, at the index its list's map gives.
struct PrefillStaging {
  int32_t* count = nullptr;  // rows claimed (may pass cap: those rows stay unstaged)
  // Per key list: cache row -> staged row + 1; 0 not named, -1 named but not staged (past cap; the attention kernel
  // dequantises such a row itself). [keys[i].rows] each; zeroed before a call.
  int32_t* map[SparseAttentionFp8Params::kLists] = {nullptr, nullptr, nullptr};
  int32_t* inv = nullptr;   // [cap][2]: a staged row's key list and cache row
  uint16_t* rows = nullptr; // [cap][512] bf16: dequant16's values (e4m3 x 2^k, then the bf16 RoPE channels)
  int64_t cap = 0;
};

namespace detail {
// Zeroes the count and the maps, claims every named row (one staged index each, in no fixed order: the values do not
// depend on where a row lands) and dequantises the claimed rows.
void launch_prefill_stage(const SparseAttentionFp8Params& p, const PrefillStaging& s, int64_t map_ints,
                          void* stream);
// The bf16 attention kernel over the staged rows (grid, tiles, splits, partials and bits of the warp-specialised
// FP8 kernel); num_splits > 1 leaves partials in workspace for launch_sparse_attention_fp8_combine.
void launch_sparse_attention_prefill(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                     float* o, float* workspace, void* stream);
// Diagnostics for bench/attention_fp8_bench.cpp only: the attention kernel (fp32 q) with phases left out, to see
// where a block's time goes; the output is wrong by design. probe: one bit, kPrefillProbeNoMath (Q K^T, P V and the
// softmax out) or kPrefillProbeSkeleton (those and the gathers: barriers, q load, epilogue only); false for others.
inline constexpr int kPrefillProbeNoQk = 1, kPrefillProbeNoPv = 2, kPrefillProbeNoSoftmax = 4, kPrefillProbeNoQ = 8,
                     kPrefillProbeNoStore = 16, kPrefillProbeNoGather = 32;
inline constexpr int kPrefillProbeNoMath = kPrefillProbeNoQk | kPrefillProbeNoPv | kPrefillProbeNoSoftmax;
inline constexpr int kPrefillProbeSkeleton = kPrefillProbeNoMath | kPrefillProbeNoGather;
// The split-block kernel (sparse_attention_prefill_split.cu, session 24): q bf16 [T, heads, 512] (16-byte aligned)
// loaded by TMA, o bf16 [T, heads, 512]; one split only (p.num_splits 1, p.q_bf16 set: the caller checks). False
// (nothing launched) if q's TMA tensor map cannot be made.
// variant: 0 (session 24's kernel) or kSplitVarL2Hints, kSplitVarStore16, kSplitVarEarlyItem alone or all three
// (session 28: same output bits, the A/B of plan_sparse_prefill_split_variant); false for others.
//  - kSplitVarL2Hints: the key rows' cp.asyncs with an L2 evict_last policy and a 256-byte L2 prefetch (FlashMLA's
//    sparse prefill gathers so), the output's stores with L2 evict_first and no L1 allocation;
//  - kSplitVarStore16: the output in 16-byte stores (a 4 x 4 transpose of bf16 pairs across each lane quad by
//    shuffles), a quarter of the store instructions, every 32-byte sector written whole;
//  - kSplitVarEarlyItem: the consumers load the next item's list lengths and position under the current item.
inline constexpr int kSplitVarL2Hints = 32, kSplitVarStore16 = 64, kSplitVarEarlyItem = 128;
inline constexpr int kSplitVarAll = kSplitVarL2Hints | kSplitVarStore16 | kSplitVarEarlyItem;
// p.q_norm (session 29) adds kSplitQNorm to the variant: the kernel normalises the raw query in shared memory. With
// variant 0 or kSplitVarStore16 only (false for the others).
inline constexpr int kSplitQNorm = 256;
// kSplitVarReuse (session 40), with any variant or probe: a step's key rows stay in shared memory from one token of a
// block's run (p.split_run consecutive tokens; 1 when 0) to the next where the tokens share them (the window, HCA's
// entries), copied only where a slot's row changes; each token's keys in an order of its own position (the producer
// in sparse_attention_prefill_split.cu says which), so other bits than without it, the same for any run and grid.
inline constexpr int kSplitVarReuse = 512;
bool launch_sparse_attention_prefill_split(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                           uint16_t* o, int variant, void* stream);
// Diagnostics for bench/attention_fp8_bench.cpp only: the split kernel with a phase left out (the output wrong by
// design): NoMath no wgmma, NoSoftmax only the exchange's barrier, NoGather no key block filled, NoStore no output
// written, NoQ no Q load; Skeleton = NoMath | NoSoftmax | NoGather; Bare all five. False for any other value.
inline constexpr int kSplitProbeNoMath = 1, kSplitProbeNoSoftmax = 2, kSplitProbeNoGather = 4, kSplitProbeNoStore = 8,
                     kSplitProbeNoQ = 16;
inline constexpr int kSplitProbeSkeleton = kSplitProbeNoMath | kSplitProbeNoSoftmax | kSplitProbeNoGather;
// Session 28: every phase left out: the barriers, the list lookups and the items' bookkeeping alone.
inline constexpr int kSplitProbeBare = kSplitProbeSkeleton | kSplitProbeNoStore | kSplitProbeNoQ;
bool launch_sparse_attention_prefill_split_probe(const SparseAttentionFp8Params& p, const PrefillStaging& s,
                                                 const void* q, uint16_t* o, int probe, void* stream);
bool launch_sparse_attention_prefill_probe(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                           float* o, float* workspace, int probe, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
