// CUDA token-level KV compressor (semantics of compressor.h + the entry post-processing of
// model/deepseek_v4.cpp: weighted RMSNorm, RoPE at the window's first position, FP8 or Hadamard+FP4 simulation).
// Same op for the main compressor (d = head_dim, entries) and the CSA indexer's (d = index_head_dim, keys).
//
// Instead of walking each sequence token by token, every window completed in the step is pooled independently:
// a slot at position q >= start_pos of its sequence is read from this step's projections (gate + ape), an
// older one from the frontier row q % frontier_rows (which the previous steps wrote). This reads exactly the
// values the sequential walk would have stored in those rows, so the entries are identical; the frontier rows of
// the step's last frontier_rows positions per sequence are written afterwards (earlier positions of a longer
// chunk would be overwritten by later ones in the sequential walk anyway).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/compressor/compressor_launch.h"  // CompressorCudaParams

namespace dsinfer::ops::cuda {

// kv, gate: [T, c*d] fp32 projections of the step's tokens (gate without ape). Writes view.entry (or
// view.index_key) w for every window w completed in the step ((pos+1) % m == 0), then the frontier rows.
// Kernels: emit = one block of d threads per token (tokens completing no window exit at once), channel-parallel
// pooling with double sums, or at prefill sizes with p.entries (T + 1 ints of scratch) three kernels over the list of
// the closing tokens (compressor_split_emit, compressor_launch.h; the same bits); frontier = one block of 256 threads
// per token, or the one-kernel emit's blocks where no block writes a row another reads (compressor_frontier_in_emit:
// decode steps and one sequence's verify step).
Status compressor_step(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                       const float* kv, const float* gate, void* stream);

}  // namespace dsinfer::ops::cuda
