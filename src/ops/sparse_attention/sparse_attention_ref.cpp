// CPU reference sparse attention with sinks (see sparse_attention.h); two-pass softmax in double.
#include "ops/sparse_attention/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dsinfer::ops {

void sparse_attention_ref(const SparseAttentionParams& p, const float* q, const float* const* keys, int64_t n,
                          float* out) {
  std::vector<double> s(static_cast<size_t>(n)), acc(size_t(p.dim));
  for (int64_t h = 0; h < p.heads; ++h) {
    const float* qh = q + h * p.dim;
    double mx = double(p.sinks[h]);
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int64_t i = 0; i < p.dim; ++i) dot += double(qh[i]) * double(keys[j][i]);
      s[size_t(j)] = dot * double(p.scale);
      mx = std::max(mx, s[size_t(j)]);
    }
    double den = std::exp(double(p.sinks[h]) - mx);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < n; ++j) {
      double e = std::exp(s[size_t(j)] - mx);
      den += e;
      for (int64_t i = 0; i < p.dim; ++i) acc[size_t(i)] += e * double(keys[j][i]);
    }
    for (int64_t i = 0; i < p.dim; ++i) out[h * p.dim + i] = float(acc[size_t(i)] / den);
  }
}

}  // namespace dsinfer::ops
