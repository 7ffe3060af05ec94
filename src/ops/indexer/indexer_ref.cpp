// CPU reference Lightning Indexer (see indexer.h).
#include "ops/indexer/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsinfer::ops {

std::vector<int32_t> indexer_topk_ref(const IndexerQuery& q, const float* keys, int64_t n_visible, int64_t topk,
                                      std::vector<float>* scores_out) {
  const double scale = 1.0 / std::sqrt(double(q.dim));
  std::vector<float> score(static_cast<size_t>(n_visible));
  for (int64_t w = 0; w < n_visible; ++w) {
    double total = 0.0;
    for (int64_t h = 0; h < q.heads; ++h) {
      double dot = 0.0;
      for (int64_t i = 0; i < q.dim; ++i) dot += double(q.q[h * q.dim + i]) * double(keys[w * q.dim + i]);
      total += std::max(dot, 0.0) * scale * double(q.weights[h]);
    }
    score[size_t(w)] = float(total);
  }
  std::vector<int32_t> idx(static_cast<size_t>(n_visible));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = std::min(topk, n_visible);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
  });
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  if (scores_out) *scores_out = std::move(score);
  return idx;
}

}  // namespace dsinfer::ops
