// CUDA sparse attention with sinks over the sliding window and the compressed entries (semantics of
// model/deepseek_v4.cpp's key list + sparse_attention_ref + the inverse RoPE of the output), and the ring write
// that follows it.
//
// For token t (position p, sequence s) the keys are, in this order: window positions max(0, p-W+1) .. p (a
// position >= start_pos[s] is this step's kv_new row cu_seqlens[s] + (q - start_pos[s]), an older one the ring
// row view.ring_row(slot, q), written by earlier steps); then compressed entries view.entry(table, j): every
// j < (p+1)/m for HCA, the indexer's list for CSA (-1 and j >= (p+1)/m skipped). K = V (one latent row per key,
// shared by all heads); s = q.k * scale; softmax over all keys plus the per-head sink logit (denominator only);
// o = sum p_j k_j, then o's trailing rope_dim dims rotated by -p.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/sparse_attention/sparse_attention_launch.h"  // SparseAttentionCudaParams
#include "ops/sparse_attention/sparse_attention_plan.h"    // the split counts, the kernel choice

namespace dsinfer::ops::cuda {

// Workspace floats for num_splits > 1 (or any count with a fixed split size, fixed = true): per (token, split,
// head) the unnormalised output and (max, sum).
inline int64_t sparse_attention_workspace_floats(int64_t T, int64_t heads, int64_t head_dim, int64_t num_splits,
                                                 bool fixed = false) {
  return num_splits > 1 || fixed ? T * num_splits * heads * (head_dim + 2) : 0;
}

// q: [T, heads, head_dim] (normed, RoPE'd); kv_new: [T, head_dim] (the step's window kv rows, final form);
// o: [T, heads, head_dim]. Kernel: grid (T, ceil(heads / (8 * hpw)), num_splits), 256 threads = 8 warps, each
// warp owns hpw (1 or 2) heads with q and the output accumulator in registers (lane l holds float4 chunks
// l, l+32, ... of the head vector); keys are staged 32 at a time in shared memory and each key row is read by
// every warp of the block (all its heads); scores by a warp reduce-scatter, online softmax per tile. With
// num_splits > 1 each split writes (o, max, sum) partials to the workspace and a combine kernel (grid (T, heads),
// 128 threads) merges them with the sink and applies the inverse RoPE.
// p.tensor_cores: the bf16 mma.sync kernel of sparse_attention_tc.cu instead (grid (T, ceil(heads / 64),
// num_splits) x 256 threads; q, key rows and p rounded to bf16, fp32 accumulation and softmax; same workspace; with
// 2..kFastCombineSplits splits and split_keys 0 the combine is attention_combine_fast_kernel, one thread per
// split), for the runner's fast mode; the fp32 kernel is the exact one.
// p.official (DeepSeek-V4.1 official numerics): the official kernel's arithmetic instead (sparse_attention_official.cu:
// blocks of 64 keys, bf16 probabilities and outputs), grid (T, heads) x 128 threads, num_splits 1.
// Preconditions: view.ring_rows >= window; the ring holds the sequence's positions < start_pos (ring_write of
// earlier steps); this step's compressed entries are written (compressor_step) before the call.
Status sparse_attention(const StepDevice& step, const LayerStateView& view, const SparseAttentionCudaParams& p,
                        const float* q, const float* kv_new, float* o, float* workspace, void* stream);

// After attention: ring rows of the step's kv_new, only the last ring_rows positions of each sequence's chunk
// (earlier ones would be overwritten by later positions of the same chunk). One block of 128 threads per token.
Status ring_write(const StepDevice& step, const LayerStateView& view, const float* kv_new, void* stream);

}  // namespace dsinfer::ops::cuda
