// CPU reference MoE routing and experts (see moe.h).
#include "ops/moe/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace dsinfer::ops {

void route_ref(const RouterParams& p, const float* x, const int32_t* hash_row, int32_t* idx, float* weight) {
  std::vector<float> s(size_t(p.experts));
  for (int64_t e = 0; e < p.experts; ++e) {
    double acc = 0.0;
    for (int64_t i = 0; i < p.dim; ++i) acc += double(x[i]) * double(p.gate[e * p.dim + i]);
    float z = float(acc);
    if (p.score == ScoreFunc::SqrtSoftplus) {
      float sp = z > 20.0f ? z : float(std::log1p(std::exp(double(z))));
      s[size_t(e)] = std::sqrt(sp);
    } else if (p.score == ScoreFunc::Sigmoid) {
      s[size_t(e)] = 1.0f / (1.0f + std::exp(-z));
    } else {
      s[size_t(e)] = z;  // softmax below
    }
  }
  if (p.score == ScoreFunc::Softmax) {
    float mx = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (auto& v : s) sum += (v = std::exp(v - mx));
    for (auto& v : s) v = float(v / sum);
  }
  if (hash_row) {
    std::copy(hash_row, hash_row + p.topk, idx);
  } else {
    std::vector<int32_t> order(size_t(p.experts));
    std::iota(order.begin(), order.end(), 0);
    auto biased = [&](int32_t e) { return s[size_t(e)] + (p.bias ? p.bias[e] : 0.0f); };
    std::partial_sort(order.begin(), order.begin() + p.topk, order.end(), [&](int32_t a, int32_t b) {
      float ba = biased(a), bb = biased(b);
      return ba != bb ? ba > bb : a < b;
    });
    std::copy(order.begin(), order.begin() + p.topk, idx);
  }
  double sum = 0.0;
  for (int64_t k = 0; k < p.topk; ++k) sum += (weight[k] = s[size_t(idx[k])]);
  for (int64_t k = 0; k < p.topk; ++k) {
    if (p.renormalize) weight[k] = float(double(weight[k]) / (sum + double(p.norm_eps)));
    weight[k] *= p.route_scale;
  }
}

void expert_accumulate_ref(const ExpertParams& p, const float* x, float scale, double* out) {
  std::vector<double> a(size_t(p.inter));
  for (int64_t j = 0; j < p.inter; ++j) {
    double g = 0.0, u = 0.0;
    for (int64_t i = 0; i < p.dim; ++i) {
      g += double(x[i]) * double(p.w1[j * p.dim + i]);
      u += double(x[i]) * double(p.w3[j * p.dim + i]);
    }
    float gf = float(g), uf = float(u);
    if (p.limit > 0.0f) {
      gf = std::min(gf, p.limit);
      uf = std::clamp(uf, -p.limit, p.limit);
    }
    a[size_t(j)] = double(gf / (1.0f + std::exp(-gf))) * double(uf);
  }
  for (int64_t d = 0; d < p.dim; ++d) {
    double acc = 0.0;
    for (int64_t j = 0; j < p.inter; ++j) acc += double(p.w2[d * p.inter + j]) * a[size_t(j)];
    out[d] += double(scale) * double(float(acc));
  }
}

void moe_permutation_ref(const int32_t* idx, int64_t T, int64_t topk, int64_t experts, int32_t* offsets,
                         int32_t* perm_token, int32_t* pos_of) {
  const int64_t n = T * topk;
  std::vector<int64_t> count(size_t(experts), 0);
  for (int64_t a = 0; a < n; ++a)
    if (idx[a] >= 0 && idx[a] < experts) ++count[size_t(idx[a])];
  offsets[0] = 0;
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] = int32_t(offsets[e] + count[size_t(e)]);
  std::vector<int64_t> next(offsets, offsets + experts);
  for (int64_t a = 0; a < n; ++a) {
    const int32_t e = idx[a];
    if (e < 0 || e >= experts) {
      pos_of[a] = -1;
      continue;
    }
    const int64_t row = next[size_t(e)]++;
    pos_of[a] = int32_t(row);
    perm_token[row] = int32_t(a / topk);
  }
}

}  // namespace dsinfer::ops
