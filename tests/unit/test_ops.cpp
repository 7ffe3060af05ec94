// Each CPU reference op against values computed by hand or from its defining property. The fixtures test
// the ops together; these pin each one down alone so a later kernel has an unambiguous specification.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "ops/compressor/compressor.h"
#include "ops/indexer/indexer.h"
#include "ops/linear/linear.h"
#include "ops/mhc/mhc.h"
#include "ops/moe/moe.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"

using namespace dsinfer;
using namespace dsinfer::ops;

TEST(Ops, LinearIsXTimesWTransposed) {
  const float x[] = {1, 2, 3, 4, 5, 6};          // [2, 3]
  const float w[] = {1, 0, -1, 0.5f, 0.5f, 0.5f};  // [2, 3]
  float y[4];
  linear_ref(x, 2, 3, w, 2, y);
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[2], -2.0f);
  EXPECT_EQ(y[3], 7.5f);
}

TEST(Ops, RmsNormWeightedAndUnweighted) {
  const float x[] = {3, 4};  // mean square 12.5
  const float w[] = {2, 0.5f};
  float y[2];
  rmsnorm_ref(x, 1, 2, w, 0.0f, y);
  EXPECT_NEAR(y[0], 2 * 3 / std::sqrt(12.5f), 1e-6);
  EXPECT_NEAR(y[1], 0.5f * 4 / std::sqrt(12.5f), 1e-6);
  rmsnorm_ref(x, 1, 2, nullptr, 0.0f, y);
  EXPECT_NEAR(y[0] * y[0] + y[1] * y[1], 2.0f, 1e-6);
}

TEST(Ops, RopeRotatesTrailingInterleavedPairsAndInverts) {
  io::RopeParams p;
  p.theta = 10000.0;
  const auto inv = rope_inv_freq(p, 4);  // pairs (2,3) and (4,5) of a 6-vector
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.01f);
  float v[] = {7, 8, 1, 0, 0, 1};
  rope_apply_ref(v, 6, 4, inv, 3, false);
  EXPECT_EQ(v[0], 7.0f);  // nope part untouched
  EXPECT_EQ(v[1], 8.0f);
  EXPECT_NEAR(v[2], std::cos(3.0), 1e-6);
  EXPECT_NEAR(v[3], std::sin(3.0), 1e-6);
  EXPECT_NEAR(v[4], -std::sin(0.03), 1e-6);
  EXPECT_NEAR(v[5], std::cos(0.03), 1e-6);
  rope_apply_ref(v, 6, 4, inv, 3, true);
  EXPECT_NEAR(v[2], 1, 1e-6);
  EXPECT_NEAR(v[3], 0, 1e-6);
  EXPECT_NEAR(v[5], 1, 1e-6);
}

TEST(Ops, YarnKeepsHighFrequenciesAndDividesLowOnes) {
  // DeepSeek-V4 values (architecture notes §3.2): rd 64, theta 160000, factor 16, original 65536 -> low 15, high 25.
  io::RopeParams plain, yarn;
  plain.theta = yarn.theta = 160000.0;
  yarn.yarn = true;
  yarn.factor = 16;
  yarn.original_max_position_embeddings = 65536;
  const auto a = rope_inv_freq(plain, 64), b = rope_inv_freq(yarn, 64);
  for (int i = 0; i <= 15; ++i) EXPECT_FLOAT_EQ(a[size_t(i)], b[size_t(i)]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(a[size_t(i)] / 16, b[size_t(i)]) << i;
  const float ramp20 = (20.0f - 15) / 10;  // linear blend between
  EXPECT_NEAR(b[20], a[20] / 16 * ramp20 + a[20] * (1 - ramp20), 1e-9);
}

TEST(Ops, MhcSinkhornIsNearlyDoublyStochasticAndPostInRange) {
  const int64_t n = 4, D = 3;
  std::vector<float> fn(size_t((2 + n) * n * n * D)), base(size_t((2 + n) * n)), scale = {0.7f, 1.3f, 2.0f};
  for (size_t i = 0; i < fn.size(); ++i) fn[i] = std::sin(float(i) * 0.37f);
  for (size_t i = 0; i < base.size(); ++i) base[i] = std::cos(float(i) * 0.91f);
  std::vector<float> x(size_t(n * D));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.1f - 0.5f;
  HcParams p{fn.data(), base.data(), scale.data(), n, D, 20, 1e-6f, 1e-6f};
  std::vector<float> y(static_cast<size_t>(D)), post(static_cast<size_t>(n)), comb(static_cast<size_t>(n * n));
  hc_pre_ref(p, x.data(), y.data(), post.data(), comb.data());
  for (int64_t j = 0; j < n; ++j) {
    float rs = 0, cs = 0;
    for (int64_t k = 0; k < n; ++k) rs += comb[size_t(j * n + k)], cs += comb[size_t(k * n + j)];
    EXPECT_NEAR(rs, 1.0f, 5e-2);  // 20 iterations leave rows within a few percent
    EXPECT_NEAR(cs, 1.0f, 1e-5);  // the last normalisation is over columns
    EXPECT_GT(post[size_t(j)], 0.0f);
    EXPECT_LT(post[size_t(j)], 2.0f);
  }
  // hc_post with comb = identity and post = 1 adds f to every stream.
  std::vector<float> eye = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, ones(4, 1.0f), f = {1, 2, 3};
  std::vector<float> xs = x;
  hc_post_ref(n, D, f.data(), ones.data(), eye.data(), xs.data());
  for (int64_t i = 0; i < n * D; ++i) EXPECT_FLOAT_EQ(xs[size_t(i)], x[size_t(i)] + f[size_t(i % D)]);
  // comb^T: X'_k = sum_j comb[j][k] X_j — a comb that sends stream 0 to stream 1 only.
  std::vector<float> move(16, 0.0f);
  move[0 * 4 + 1] = 1.0f;
  std::vector<float> zero(4, 0.0f), xm = x;
  hc_post_ref(n, D, f.data(), zero.data(), move.data(), xm.data());
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_FLOAT_EQ(xm[size_t(1 * D + d)], x[size_t(d)]);
    EXPECT_FLOAT_EQ(xm[size_t(d)], 0.0f);
  }
}

TEST(Ops, HcaCompressorPoolsEachChannelWithItsOwnSoftmax) {
  const int64_t m = 2, d = 2;
  std::vector<float> ape = {0.0f, 0.0f, 1.0f, -1.0f};  // [m, d]
  CompressorParams p{m, false, d, ape.data(), 3};  // 3 rows: positions wrap around the frontier
  std::vector<float> fr(static_cast<size_t>(3 * p.row_width()), NAN);
  float out[2];
  const float kv0[] = {1, 10}, g0[] = {0, 0}, kv1[] = {3, 20}, g1[] = {0, 0};
  EXPECT_FALSE(compressor_step_ref(p, fr.data(), kv0, g0, 4, out));  // window 2 = positions 4, 5
  EXPECT_TRUE(compressor_step_ref(p, fr.data(), kv1, g1, 5, out));
  // channel 0: gates (0, 0+1) -> weights (1, e)/(1+e); channel 1: gates (0, -1)
  const double e = std::exp(1.0);
  EXPECT_NEAR(out[0], (1 * 1 + 3 * e) / (1 + e), 1e-6);
  EXPECT_NEAR(out[1], (10 * e + 20 * 1) / (e + 1), 1e-5);
}

TEST(Ops, CsaCompressorOverlapsWithThePreviousWindowsFirstHalf) {
  const int64_t m = 2, d = 1;
  std::vector<float> ape(size_t(m * 2 * d), 0.0f);
  CompressorParams p{m, true, d, ape.data(), 5};
  std::vector<float> fr(static_cast<size_t>(5 * p.row_width()), NAN);  // never-written rows must not be read
  float out[1];
  // token projections: [first half (for the next window), second half (own window)], all gates equal
  const float kv[4][2] = {{100, 1}, {200, 3}, {5, 7}, {6, 9}}, g[2] = {0, 0};
  EXPECT_FALSE(compressor_step_ref(p, fr.data(), kv[0], g, 0, out));
  EXPECT_TRUE(compressor_step_ref(p, fr.data(), kv[1], g, 1, out));
  EXPECT_NEAR(out[0], (1 + 3) / 2.0, 1e-6);  // window 0: no previous window
  EXPECT_FALSE(compressor_step_ref(p, fr.data(), kv[2], g, 2, out));
  EXPECT_TRUE(compressor_step_ref(p, fr.data(), kv[3], g, 3, out));
  EXPECT_NEAR(out[0], (100 + 200 + 7 + 9) / 4.0, 1e-5);  // window 1: previous first halves + own second halves
}

TEST(Ops, SparseAttentionSinkOnlyInDenominator) {
  const float q[] = {1, 0}, k0[] = {2, 5}, k1[] = {0, 1}, sink[] = {0.5f};
  const float* keys[] = {k0, k1};
  float o[2];
  SparseAttentionParams p{1, 2, 0.5f, sink};
  sparse_attention_ref(p, q, keys, 2, o);
  const double s0 = std::exp(1.0), s1 = std::exp(0.0), z = std::exp(0.5);
  EXPECT_NEAR(o[0], (2 * s0) / (s0 + s1 + z), 1e-6);
  EXPECT_NEAR(o[1], (5 * s0 + 1 * s1) / (s0 + s1 + z), 1e-6);
}

TEST(Ops, IndexerTopkReluWeightsAndTieRule) {
  // 2 heads, dim 1; keys chosen so entries 1 and 3 tie, entry 0 is negative for head 0 (ReLU).
  const float q[] = {1, 2}, w[] = {1, 0.5f}, keys[] = {-1, 2, 0.5f, 2};
  std::vector<float> scores;
  auto sel = indexer_topk_ref({q, w, 2, 1}, keys, 4, 2, &scores);
  EXPECT_NEAR(scores[0], 0.0, 1e-7);  // relu(-1) + 0.5 relu(-2)
  EXPECT_NEAR(scores[1], 2 + 0.5 * 4, 1e-6);
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 3}));
  sel = indexer_topk_ref({q, w, 2, 1}, keys, 4, 1, nullptr);
  EXPECT_EQ(sel, (std::vector<int32_t>{1}));  // tie between 1 and 3 -> lower index
  sel = indexer_topk_ref({q, w, 2, 1}, keys, 2, 5, nullptr);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1}));  // fewer visible entries than topk: all of them
}

TEST(Ops, RouterBiasSelectsButDoesNotWeight) {
  const float gate[] = {1, 0, 0, 1, -1, 0};  // 3 experts, D = 2
  const float bias[] = {0, 0, 10};           // expert 2 always selected
  const float x[] = {2, 1};
  RouterParams p{gate, bias, 3, 2, 2, ScoreFunc::SqrtSoftplus, true, 0.0f, 1.5f};
  int32_t idx[2];
  float wt[2];
  route_ref(p, x, nullptr, idx, wt);
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 0);
  auto sps = [](double z) { return std::sqrt(std::log1p(std::exp(z))); };
  const double s0 = sps(2), s2 = sps(-2);
  EXPECT_NEAR(wt[0], 1.5 * s2 / (s0 + s2), 1e-6);
  EXPECT_NEAR(wt[1], 1.5 * s0 / (s0 + s2), 1e-6);
  const int32_t row[] = {1, 2};  // hash routing: the table picks, the scores still weight
  route_ref(p, x, row, idx, wt);
  EXPECT_EQ(idx[0], 1);
  EXPECT_NEAR(wt[0], 1.5 * sps(1) / (sps(1) + s2), 1e-6);
}

TEST(Ops, ExpertClampsGateAboveOnlyAndUpBothSides) {
  const float w1[] = {20}, w3[] = {-30}, w2[] = {1};
  const float x[] = {1};
  double out[1] = {0};
  expert_accumulate_ref({w1, w3, w2, 1, 1, 10.0f}, x, 2.0f, out);
  const double g = 10, u = -10;
  EXPECT_NEAR(out[0], 2 * (g / (1 + std::exp(-g))) * u, 1e-4);
  const float w1n[] = {-20};
  out[0] = 0;
  expert_accumulate_ref({w1n, w3, w2, 1, 1, 10.0f}, x, 1.0f, out);  // gate -20 is not clamped from below
  EXPECT_NEAR(out[0], (-20 / (1 + std::exp(20.0))) * -10, 1e-9);
}
