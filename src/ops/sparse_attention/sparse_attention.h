// Sparse attention for one query token over an explicit key list, with a per-head sink (architecture notes
// §4 steps 4-5): K = V (one shared latent row per key), s = q.k * scale, softmax over keys plus the sink
// logit (denominator only), o = sum_j p_j * kv_j. All heads share the key list.
#pragma once
#include <cstdint>

namespace dsinfer::ops {

struct SparseAttentionParams {
  int64_t heads = 0, dim = 0;
  float scale = 1.0f;          // head_dim^-1/2
  const float* sinks = nullptr;  // [heads]
};

// q: [heads, dim]; keys: array of n pointers to [dim] rows; out: [heads, dim].
void sparse_attention_ref(const SparseAttentionParams& p, const float* q, const float* const* keys, int64_t n,
                          float* out);

}  // namespace dsinfer::ops
