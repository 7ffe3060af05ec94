// CSA2, the compressed sparse attention of DeepSeek-V4.1 (research/dsv41-architecture.md §2.4): KV-source layers
// pool every `ratio` tokens into one compressed latent, index-source layers score the compressed entries with a
// small multi-head indexer and keep the top-k, a candidate-source layer first keeps the best blocks of entries
// (two-level selection) that later index sources must pick from. Attention itself reuses the sparse-attention op
// over window rows + the selected entries. All selections break score ties toward the lower index.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops {

struct Csa2CompressorParams {
  int64_t ratio = 2;          // > 1 (ratio 1 is a plain projection, no pooling)
  int64_t d = 0;              // latent width (head_dim)
  int64_t frontier_rows = 0;  // >= ratio; row = position % frontier_rows holds [kv (d) | gate (d)]
};

// Feeds token `pos` (projections kv_t, gate_t: [d], fp32) into the frontier. When it completes its group
// ((pos + 1) % ratio == 0) writes the pooled latent out[c] = sum_t softmax_t(gate_t[c]) * kv_t[c] over the
// group's `ratio` tokens (groups aligned to absolute positions) and returns true.
bool csa2_compress_step_ref(const Csa2CompressorParams& p, float* frontier, const float* kv_t, const float* gate_t,
                            int64_t pos, float* out);

// Indexer scores of one query over `n` keys [n, dim]: I[t] = sum_h w[h] * relu(q[h] . k[t]) * dim^-1/2, with q
// [heads, dim] and w [heads] (weights_proj(x) * heads^-1/2). fp64 accumulation.
std::vector<float> csa2_index_scores_ref(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys,
                                         int64_t n);

// Level one of the two-level selection: blocks of `block_size` entries scored by their best entry; the block
// holding the newest entry (n - 1) is always kept; the best `topk_blocks` blocks with a finite score are kept.
// Returns a per-entry mask [n] (1 = candidate).
std::vector<uint8_t> csa2_candidate_blocks_ref(const std::vector<float>& scores, int64_t topk_blocks, int64_t block_size);

// Level two: the indices (ascending) of the min(topk, #eligible) best entries, where an entry is eligible when
// its score is finite and (mask null or mask[t]) -- transformers drops picks whose score is -inf.
std::vector<int32_t> csa2_topk_ref(const std::vector<float>& scores, int64_t topk, const uint8_t* mask);

// Indices of the k largest values as torch.topk on CPU picks them (TopKImpl.h: (value, index) pairs in index
// order, std::partial_sort when k * 64 <= n else std::nth_element, comparator value_a > value_b), so exact ties
// -- frequent between bf16 scores -- resolve as in the official code run on CPU. Order of the result is
// unspecified (callers sort). NaN is not expected.
std::vector<int32_t> torch_cpu_topk(const std::vector<float>& values, int64_t k);

// csa2_candidate_blocks_ref / csa2_topk_ref with torch_cpu_topk's tie resolution (official numerics).
std::vector<uint8_t> csa2_candidate_blocks_torch(const std::vector<float>& scores, int64_t topk_blocks, int64_t block_size);
std::vector<int32_t> csa2_topk_torch(const std::vector<float>& scores, int64_t topk, const uint8_t* mask);

}  // namespace dsinfer::ops
