// Parameters and kernel launchers behind compressor_cuda.h (no CUDA types, no Status; validated by
// compressor_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/state_view.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

enum class CompressorSim { None, Fp8Nope, HadamardFp4 };

struct CompressorCudaParams {
  int64_t m = 4;                   // compress ratio
  bool overlap = false;            // CSA (2m-slot windows, projections 2*d wide)
  int64_t d = 0;                   // entry width: head_dim (main) or index_head_dim (indexer)
  bool indexer = false;            // the CSA indexer's compressor: view.index_frontier_row / view.index_key
  const float* ape = nullptr;      // [m, c*d] device
  const float* norm_w = nullptr;   // [d] device
  float eps = 1e-6f;
  int64_t rope_dim = 0;            // trailing dims rotated at the window's first position
  const float* inv_freq = nullptr;  // [rope_dim / 2] device
  float attention_factor = 1.0f;
  CompressorSim sim = CompressorSim::None;
  int64_t fp8_dims = 0, fp8_block = 64;  // Fp8Nope: channels [0, fp8_dims) (nope dims) in blocks of fp8_block
  int64_t fp4_block = 32;                // HadamardFp4: block of the FP4 simulation
  // FP8 state (view.fp8): the entries are not written to the state but to out [T, d] (row t: the entry token t
  // closes) with out_rows[t] its row number in the entry / indexer-key pages (view.entry_index), -1 for a token
  // closing no window; the caller encodes them (ops/kv_format kv_encode / idx_encode).
  float* out = nullptr;
  int32_t* out_rows = nullptr;
  // Scratch of the split emit (compressor_split_emit): the list of the step's window-closing tokens, T + 1 ints.
  // Null: the one-kernel emit at every T.
  int32_t* entries = nullptr;
  DSI_HD int64_t c() const { return overlap ? 2 : 1; }
};

// The emit's kernels for a step of T tokens: where T >= kCompressorSplitMinT and the caller gave the entries scratch,
// three (a list of the closing tokens, the pooled values by compressor_sums_spread's form, the post-processing per
// entry), else one block of d threads per token. At prefill the one kernel ran T blocks for T / m (or, HCA, T / 128)
// entries: 4,064 blocks exiting and 32 blocks of 512 threads each pooling 128 slots a channel in double on 32 SMs,
// 185 us a V4-Flash HCA layer at 4,096 tokens (session 37); decode steps keep the one launch.
inline constexpr int64_t kCompressorSplitMinT = 1024;
DSI_HD bool compressor_split_emit(int64_t T, const CompressorCudaParams& p) {
  return p.entries != nullptr && T >= kCompressorSplitMinT;
}
// Whether the one-kernel emit also writes the step's frontier rows (compressor_frontier's, one launch fewer): where
// no block can overwrite a row another block reads. Token t writes row pos_t % R (R = frontier_rows); a window closing
// in the step reads rows of positions q >= start - c*m + 1 before the sequence's start, so a row is shared only where
// a sequence runs n >= R - c*m + 2 tokens in the step. Decided from the step's sizes alone (any graph replaying this
// shape agrees): each sequence runs at least one token, so n <= T - num_seqs + 1. Decode steps (n = 1), and a
// single sequence's verify step (n = 1 + k <= R - c*m + 1: the frontier's spare rows are the speculative tokens').
DSI_HD bool compressor_frontier_in_emit(int64_t T, int64_t num_seqs, int64_t frontier_rows,
                                        const CompressorCudaParams& p) {
  return !compressor_split_emit(T, p) && T - num_seqs <= frontier_rows - p.c() * p.m;
}
// The split emit's pooling form: a window of more than kCompressorSpreadMinSlots slots (HCA's 128) spread over the
// warps of a block, a shorter one (CSA's 2 x 4) one thread a channel (compressor.cu; the same bits either way).
inline constexpr int64_t kCompressorSpreadMinSlots = 32;
DSI_HD bool compressor_sums_spread(const CompressorCudaParams& p) { return p.c() * p.m > kCompressorSpreadMinSlots; }
// Windows a step can close: every m-th position of each sequence's run, at most T / m + one per sequence.
DSI_HD int64_t compressor_max_entries(int64_t T, int64_t num_seqs, int64_t m) { return T / m + num_seqs; }

namespace detail {
// frontier: the one-kernel emit writes the frontier rows too (compressor_frontier_in_emit).
void launch_compressor_emit(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                            const float* kv, const float* gate, bool frontier, void* stream);
void launch_compressor_frontier(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                                const float* kv, const float* gate, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
