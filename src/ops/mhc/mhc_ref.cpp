// CPU reference mHC (see mhc.h). The Sinkhorn op order follows the official kernel exactly: row softmax + eps,
// column normalisation, then (iters - 1) x (row, column) normalisations, each with + eps in the denominator.
#include "ops/mhc/mhc.h"

#include <cmath>
#include <vector>

namespace dsinfer::ops {

namespace {
float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// mu[r] = (fn[r] . x) * rsqrt(mean(x^2) + eps) over the flattened n*D streams.
void mixes(const float* fn, int64_t rows, const float* x, int64_t len, float rms_eps, float* mu) {
  double ss = 0.0;
  for (int64_t i = 0; i < len; ++i) ss += double(x[i]) * double(x[i]);
  const double rho = 1.0 / std::sqrt(ss / double(len) + double(rms_eps));
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t i = 0; i < len; ++i) acc += double(fn[r * len + i]) * double(x[i]);
    mu[r] = float(acc * rho);
  }
}
}  // namespace

void hc_mixes_ref(const HcParams& p, const float* x, float* pre, float* post, float* comb) {
  const int64_t n = p.n, len = n * p.dim, rows = (2 + n) * n;
  std::vector<float> mu(static_cast<size_t>(rows));
  mixes(p.fn, rows, x, len, p.rms_eps, mu.data());
  for (int64_t j = 0; j < n; ++j) {
    pre[j] = sigmoid(mu[size_t(j)] * p.scale[0] + p.base[j]) + p.hc_eps;
    post[j] = 2.0f * sigmoid(mu[size_t(n + j)] * p.scale[1] + p.base[n + j]);
  }
  for (int64_t j = 0; j < n; ++j) {  // row softmax over k, + eps
    float* row = comb + j * n;
    float mx = -INFINITY;
    for (int64_t k = 0; k < n; ++k) {
      row[k] = mu[size_t(2 * n + j * n + k)] * p.scale[2] + p.base[2 * n + j * n + k];
      mx = std::fmax(mx, row[k]);
    }
    float s = 0.0f;
    for (int64_t k = 0; k < n; ++k) s += (row[k] = std::exp(row[k] - mx));
    for (int64_t k = 0; k < n; ++k) row[k] = row[k] / s + p.hc_eps;
  }
  auto col_norm = [&] {
    for (int64_t k = 0; k < n; ++k) {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) s += comb[j * n + k];
      for (int64_t j = 0; j < n; ++j) comb[j * n + k] /= (s + p.hc_eps);
    }
  };
  auto row_norm = [&] {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < n; ++k) s += comb[j * n + k];
      for (int64_t k = 0; k < n; ++k) comb[j * n + k] /= (s + p.hc_eps);
    }
  };
  col_norm();
  for (int64_t it = 0; it < p.sinkhorn_iters - 1; ++it) {
    row_norm();
    col_norm();
  }
}

void hc_collapse_ref(int64_t n, int64_t dim, const float* x, const float* pre, float* y) {
  for (int64_t d = 0; d < dim; ++d) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += double(pre[j]) * double(x[j * dim + d]);
    y[d] = float(acc);
  }
}

void hc_pre_ref(const HcParams& p, const float* x, float* y, float* post, float* comb) {
  std::vector<float> pre(static_cast<size_t>(p.n));
  hc_mixes_ref(p, x, pre.data(), post, comb);
  hc_collapse_ref(p.n, p.dim, x, pre.data(), y);
}

void hc_post_ref(int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* x) {
  std::vector<float> out(size_t(n * dim));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t d = 0; d < dim; ++d) {
      double acc = double(post[k]) * double(f[d]);
      for (int64_t j = 0; j < n; ++j) acc += double(comb[j * n + k]) * double(x[j * dim + d]);
      out[size_t(k * dim + d)] = float(acc);
    }
  for (int64_t i = 0; i < n * dim; ++i) x[i] = out[size_t(i)];
}

void hc_head_ref(const HcParams& p, const float* x, float* y) {
  const int64_t n = p.n, len = n * p.dim;
  std::vector<float> mu(static_cast<size_t>(n));
  mixes(p.fn, n, x, len, p.rms_eps, mu.data());
  for (int64_t d = 0; d < p.dim; ++d) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += double(sigmoid(mu[size_t(j)] * p.scale[0] + p.base[j]) + p.hc_eps) * double(x[j * p.dim + d]);
    y[d] = float(acc);
  }
}

}  // namespace dsinfer::ops
