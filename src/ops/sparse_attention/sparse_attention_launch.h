// Parameters and kernel launchers behind sparse_attention_cuda.h (no CUDA types, no Status; validated by
// sparse_attention_cuda.cpp).
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "ops/state_view.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

struct SparseAttentionCudaParams {
  int64_t heads = 0, head_dim = 0;  // head_dim: multiple of 4, <= 512
  float scale = 1.0f;               // head_dim^-1/2
  const float* sinks = nullptr;     // [heads] device
  int64_t window = 0;               // sliding_window W: keys at positions max(0, p-W+1) .. p
  int64_t m = 0;                    // compress ratio; 0 = sliding layer (window keys only)
  const int32_t* topk_idx = nullptr;  // CSA: [T, topk] from indexer_topk (-1 = none); nullptr with m > 0 = HCA
  int64_t topk = 0;
  int64_t rope_dim = 0;             // inverse RoPE of the output's trailing rope_dim dims at p (0 = none)
  const float* inv_freq = nullptr;  // [rope_dim / 2] device
  float attention_factor = 1.0f;
  int64_t num_splits = 1;           // key-range splits per (token, head block); > 1 needs the workspace
  // > 0 (batch-invariant mode): every split covers this many keys of the token's own list (a multiple of 32), so a
  // token's partition depends only on its own key count, never on num_splits; splits past the token's keys do not
  // run, and every token goes through the workspace and the combine (even with one split). num_splits must cover
  // the step's longest key list (sparse_attention_fixed_splits); the last split takes any excess keys.
  int64_t split_keys = 0;
  bool tensor_cores = false;        // bf16 mma.sync kernel (q, k, p rounded to bf16); needs head_dim 512
  // DeepSeek-V4.1 official numerics (sparse_attention_official.cu): the official kernel's blocks of 64 keys, bf16
  // probabilities and bf16 output (rounded again after the inverse RoPE); one split, no workspace.
  bool official = false;
};

namespace detail {
// Key range [beg, end) of split z of a token with nkeys keys (host and device): fixed-size chunks of split_keys
// keys (the last split takes the rest) when split_keys > 0; else nkeys spread over num_splits, rounded up to
// whole tiles of `tile` keys. end <= beg: the split has no keys.
DSI_HD void attn_split_range(int64_t nkeys, int64_t z, int64_t num_splits, int64_t split_keys, int64_t tile,
                             int64_t& beg, int64_t& end) {
  int64_t per;
  if (split_keys > 0) {
    per = split_keys;
  } else {
    per = (nkeys + num_splits - 1) / num_splits;
    per = (per + tile - 1) / tile * tile;
  }
  beg = z * per < nkeys ? z * per : nkeys;
  end = (split_keys > 0 && z == num_splits - 1) || beg + per > nkeys ? nkeys : beg + per;
}
// Splits a token with nkeys keys uses under fixed split_keys (what the combine sums), at most num_splits.
DSI_HD int64_t attn_token_splits(int64_t nkeys, int64_t num_splits, int64_t split_keys) {
  const int64_t s = nkeys > 0 ? (nkeys + split_keys - 1) / split_keys : 1;
  return s < num_splits ? s : num_splits;
}
// The fast mode's combine (attention_combine_fast_kernel, one thread per split) serves the tensor-core kernel
// without a fixed split size and with at most this many splits; exact and batch-invariant modes keep the original.
inline constexpr int64_t kFastCombineSplits = 128;
DSI_HD bool attn_fast_combine(const SparseAttentionCudaParams& p) {
  return p.tensor_cores && p.split_keys == 0 && p.num_splits > 1 && p.num_splits <= kFastCombineSplits;
}
inline constexpr int kAttnWarps = 8;   // warps per block
inline constexpr int kAttnTile = 32;   // keys per shared-memory tile
int attn_heads_per_warp(int64_t heads);
inline constexpr int kTcHeads = 64;   // tensor-core kernel: heads per block (4 m16 row tiles)
inline constexpr int kTcDim = 512;    // tensor-core kernel: the only head_dim it serves
inline constexpr int kTcKeys = 32;    // tensor-core kernel: keys per tile
inline constexpr int kTcWarps = 8;    // warp w: heads 16 * (w % 4) .., dims 256 * (w / 4) ..
void launch_sparse_attention_tc(const StepDevice& step, const LayerStateView& view,
                                const SparseAttentionCudaParams& p, const float* q, const float* kv_new, float* o,
                                float* workspace, void* stream);
void launch_sparse_attention(const StepDevice& step, const LayerStateView& view, const SparseAttentionCudaParams& p,
                             const float* q, const float* kv_new, float* o, float* workspace, void* stream);
void launch_sparse_attention_official(const StepDevice& step, const LayerStateView& view,
                                      const SparseAttentionCudaParams& p, const float* q, const float* kv_new,
                                      float* o, void* stream);
void launch_attention_combine(const StepDevice& step, const SparseAttentionCudaParams& p, const float* workspace,
                              float* o, void* stream);
void launch_ring_write(const StepDevice& step, const LayerStateView& view, const float* kv_new, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
