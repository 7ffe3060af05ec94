// CUDA Lightning Indexer (semantics of indexer.h): per token t at position p, scores over the visible indexer
// keys j < (p+1)/m, score[j] = sum_h w[t,h] * relu(q[t,h] . key_j) * dim^-1/2, then the indices of the
// min(topk, visible) largest scores. Tie rule (as indexer_topk_ref): equal scores -> lower index first
// (-0.0 and +0.0 are equal); the output row is sorted ascending and padded with -1 up to topk.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/indexer/indexer_launch.h"  // IndexerCudaParams

namespace dsinfer::ops::cuda {

// Scratch floats indexer_topk needs for its scores: T * max_visible.
inline int64_t indexer_scores_floats(int64_t T, int64_t max_visible) { return T * max_visible; }

// q: [T, heads, dim] (RoPE'd, Hadamard + FP4-simulated in official numerics); weights: [T, heads] already scaled by
// heads^-1/2 (as the CPU forward passes them); keys from view.index_key(block table of the token's sequence, j).
// max_visible: >= max over the step's tokens of (pos+1)/m (the host knows it from the plan; larger only wastes
// scratch). scores: [T, max_visible] scratch, left holding each token's scores [0, visible) (tests read them).
// out: [T, topk] int32.
// Kernels: scores over FP8 keys (view.fp8, dim 128) = bf16 mma.sync, 1-4 tiles of 128 keys per block (4 unless
// that leaves under 528 blocks), e4m3 codes -> bf16 exactly, q split into bf16 hi + mid + lo (one split when the
// block's q is bf16-exact, as the official FP4-simulated queries are), the key's power-of-two scale applied in the
// epilogue; the plan (detail::indexer_tc_tokens_per_block) takes 4 consecutive tokens a block sharing each converted
// key tile (256 threads) when the step's sequences average >= 4 tokens (prefill), else one token's 64 (padded)
// heads a block (128 threads; decode); both give the same bits; opt-in (DSINFER_INDEXER_SCORES=wgmma, fast mode
// only: p.fast), prefill steps take the wgmma kernel instead (8 tokens a block, q resident in shared memory, 128-key
// tiles, m64n128k16 chains; the same products, another fp32 sum order over heads); over fp32 keys =
// CUDA-core fp32, grid (T, ceil(max_visible/64)), 256 threads: 64 keys x 4 head groups. Select = one block of 512
// threads per token: the row's order keys in shared memory (up to kIdxSelCacheKeys), a 3-pass 11/11/10-bit radix
// select of the k-th largest key (warp-aggregated histograms, the bin found by a block scan), then an index-ordered
// compaction by ballots (so the output is ascending and ties go to lower indices). Candidate form
// (DSINFER_INDEXER_SELECT=N): after the first pass one more scan marks the keys above the boundary bin (all
// taken) in a bit map and gathers the boundary bin's keys (the candidates, up to the row's slots) into shared
// memory; the last two passes run over the candidates, which mark the keys above and equal to the k-th, and the
// output is read from the maps in index order: the same output, two scans of the row instead of four (rows whose
// boundary bin overflows the slots take the full scans). Sample form (the plan above 1,024 visible keys, tried
// first, detail::indexer_select_form): a threshold from 1,024 strided keys of the row, every key at or above it
// gathered in one scan and the three passes run over them (rows whose count misses [K, slots] go on in the
// candidate form): one scan of the row.
Status indexer_topk(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p, const float* q,
                    const float* weights, int64_t max_visible, float* scores, int32_t* out, void* stream);

}  // namespace dsinfer::ops::cuda
