// CPU reference CSA2 compressor and indexer selection (see csa2.h).
#include "ops/csa2/csa2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace dsinfer::ops {

bool csa2_compress_step_ref(const Csa2CompressorParams& p, float* frontier, const float* kv_t, const float* gate_t,
                            int64_t pos, float* out) {
  const int64_t w = 2 * p.d;
  float* row = frontier + (pos % p.frontier_rows) * w;
  std::copy_n(kv_t, p.d, row);
  std::copy_n(gate_t, p.d, row + p.d);
  if ((pos + 1) % p.ratio != 0) return false;
  const int64_t first = pos + 1 - p.ratio;
  for (int64_t c = 0; c < p.d; ++c) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < p.ratio; ++s) mx = std::max(mx, double(frontier[((first + s) % p.frontier_rows) * w + p.d + c]));
    double den = 0.0, num = 0.0;
    for (int64_t s = 0; s < p.ratio; ++s) {
      const float* r = frontier + ((first + s) % p.frontier_rows) * w;
      const double e = std::exp(double(r[p.d + c]) - mx);
      den += e;
      num += e * double(r[c]);
    }
    out[c] = float(num / den);
  }
  return true;
}

std::vector<float> csa2_index_scores_ref(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys,
                                         int64_t n) {
  const double scale = 1.0 / std::sqrt(double(dim));
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    double total = 0.0;
    for (int64_t h = 0; h < heads; ++h) {
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot += double(q[h * dim + i]) * double(keys[t * dim + i]);
      total += std::max(dot, 0.0) * scale * double(w[h]);
    }
    out[size_t(t)] = float(total);
  }
  return out;
}

std::vector<uint8_t> csa2_candidate_blocks_ref(const std::vector<float>& scores, int64_t topk_blocks, int64_t block_size) {
  const int64_t n = int64_t(scores.size()), nb = (n + block_size - 1) / block_size;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> best(static_cast<size_t>(nb), -inf);
  for (int64_t t = 0; t < n; ++t) best[size_t(t / block_size)] = std::max(best[size_t(t / block_size)], scores[size_t(t)]);
  if (n > 0) best[size_t((n - 1) / block_size)] = inf;  // the newest entry's (partly filled) block is pinned
  std::vector<int32_t> order(static_cast<size_t>(nb));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min(topk_blocks, nb);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return best[size_t(a)] != best[size_t(b)] ? best[size_t(a)] > best[size_t(b)] : a < b;
  });
  std::vector<uint8_t> mask(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t b = order[size_t(i)];
    if (best[size_t(b)] == -inf) continue;  // fewer reachable blocks than topk_blocks
    for (int64_t t = b * block_size; t < std::min(n, (b + 1) * block_size); ++t) mask[size_t(t)] = 1;
  }
  return mask;
}

std::vector<int32_t> csa2_topk_ref(const std::vector<float>& scores, int64_t topk, const uint8_t* mask) {
  std::vector<int32_t> idx;
  for (int64_t t = 0; t < int64_t(scores.size()); ++t)
    if (std::isfinite(scores[size_t(t)]) && (!mask || mask[t])) idx.push_back(int32_t(t));
  const int64_t k = std::min<int64_t>(topk, int64_t(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return scores[size_t(a)] != scores[size_t(b)] ? scores[size_t(a)] > scores[size_t(b)] : a < b;
  });
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> torch_cpu_topk(const std::vector<float>& values, int64_t k) {
  using Elem = std::pair<float, int32_t>;
  std::vector<Elem> q;
  for (size_t i = 0; i < values.size(); ++i) q.emplace_back(values[i], int32_t(i));
  const int64_t n = int64_t(q.size());
  k = std::min(k, n);
  auto greater = [](const Elem& a, const Elem& b) { return a.first > b.first; };
  if (k * 64 <= n) std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
  else if (k > 0) std::nth_element(q.begin(), q.begin() + k - 1, q.end(), greater);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < k; ++i) out.push_back(q[size_t(i)].second);
  return out;
}

std::vector<uint8_t> csa2_candidate_blocks_torch(const std::vector<float>& scores, int64_t topk_blocks, int64_t block_size) {
  const int64_t n = int64_t(scores.size()), nb = (n + block_size - 1) / block_size;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> best(static_cast<size_t>(nb), -inf);
  for (int64_t t = 0; t < n; ++t) best[size_t(t / block_size)] = std::max(best[size_t(t / block_size)], scores[size_t(t)]);
  if (n > 0) best[size_t((n - 1) / block_size)] = inf;
  std::vector<uint8_t> mask(static_cast<size_t>(n), 0);
  for (int32_t b : torch_cpu_topk(best, topk_blocks)) {
    if (best[size_t(b)] == -inf) continue;
    for (int64_t t = b * block_size; t < std::min(n, (b + 1) * block_size); ++t) mask[size_t(t)] = 1;
  }
  return mask;
}

std::vector<int32_t> csa2_topk_torch(const std::vector<float>& scores, int64_t topk, const uint8_t* mask) {
  std::vector<float> v(scores);
  for (size_t t = 0; t < v.size(); ++t)
    if (mask && !mask[t]) v[t] = -std::numeric_limits<float>::infinity();
  std::vector<int32_t> idx;
  for (int32_t t : torch_cpu_topk(v, topk))
    if (std::isfinite(v[size_t(t)])) idx.push_back(t);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace dsinfer::ops
