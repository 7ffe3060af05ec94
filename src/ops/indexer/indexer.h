// Lightning Indexer scoring and top-k (architecture notes §6.3): for one query token,
// I(w) = sum_h weight[h] * ReLU(q[h] . k[w]) * index_head_dim^-1/2 over the visible compressed entries
// w < n_visible, then the indices of the min(topk, n_visible) largest scores.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops {

struct IndexerQuery {
  const float* q;        // [heads, dim] (RoPE'd; Hadamard + FP4-simulated in official numerics)
  const float* weights;  // [heads] = weights_proj(x) * heads^-1/2
  int64_t heads = 0, dim = 0;
};

// keys: [n_visible, dim]. Returns selected entry indices in ascending order. Ties in score are broken
// toward the lower index (documented rule; torch.topk leaves tie order unspecified).
std::vector<int32_t> indexer_topk_ref(const IndexerQuery& q, const float* keys, int64_t n_visible, int64_t topk,
                                      std::vector<float>* scores_out = nullptr);

}  // namespace dsinfer::ops
