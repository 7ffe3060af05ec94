// Speculative sampling (sampling/spec_sampling.h): the target distribution agrees with the reference Sampler
// draw for draw; greedy verification accepts exactly the Sampler's greedy prefix; rejection sampling reproduces
// the target distribution of whole continuations (chi-square over many seeds on synthetic Markov target and
// draft chains, with full and confidence-truncated verification); seeded runs are reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "sampling/spec_sampling.h"

using namespace dsinfer;
using namespace dsinfer::sampling;

namespace {

std::vector<float> random_logits(size_t n, std::mt19937& g, float sd = 2.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Synthetic "models" over V tokens: the logits of the next token depend only on the previous one.
struct Chain {
  std::vector<std::vector<float>> rows;  // [V][V]
  std::span<const float> row(int32_t prev) const { return rows[size_t(prev)]; }
};

Chain random_chain(size_t V, uint32_t seed, float sd) {
  std::mt19937 g(seed);
  Chain c;
  for (size_t i = 0; i < V; ++i) c.rows.push_back(random_logits(V, g, sd));
  return c;
}

// Generates `len` tokens after anchor token 0 with speculative decoding: drafts of k tokens from `draft`, verified
// against `target`. truncate(drafts so far) -> how many to verify (must only look at drafts before the one it admits).
std::vector<int32_t> speculate(const Chain& target, const Chain& draft, const SamplingParams& p, uint64_t seed,
                               int32_t k, int32_t len, bool confidence_truncation) {
  Sampler sampler;
  std::vector<int32_t> out{0};  // the anchor (output index 0)
  const size_t V = target.rows.size();
  while (int32_t(out.size()) < len + 1) {
    std::vector<int32_t> d, hist = out;
    std::vector<double> q;
    for (int32_t j = 0; j < k; ++j) {
      SampleInput in;
      in.logits = draft.row(hist.back());
      in.params = &p;
      in.output_tokens = hist;
      in.rng = {seed, 0};
      std::vector<double> qj;
      const int32_t t = draw_draft(in, out.size() - 1, j, &qj);
      q.insert(q.end(), qj.begin(), qj.end());
      d.push_back(t);
      hist.push_back(t);
    }
    size_t L = d.size();
    // A non-anticipating schedule: draft j is verified only while no earlier draft was token 1.
    if (confidence_truncation)
      for (size_t j = 1; j < d.size(); ++j)
        if (d[j - 1] == 1) { L = j; break; }
    std::vector<float> logits;
    std::vector<int32_t> prefix = out;
    for (size_t j = 0; j <= L; ++j) {
      logits.insert(logits.end(), target.row(prefix.back()).begin(), target.row(prefix.back()).end());
      if (j < L) prefix.push_back(d[j]);
    }
    VerifyInput vi;
    vi.logits = logits;
    vi.drafts = std::span<const int32_t>(d.data(), L);
    vi.draft_probs = std::span<const double>(q.data(), L * V);
    vi.params = &p;
    vi.output_tokens = out;
    vi.rng = {seed, 0};
    std::vector<SampleResult> r;
    verify_drafts(vi, sampler, LogprobsMode::Raw, r);
    EXPECT_GE(r.size(), 1u);
    EXPECT_LE(r.size(), L + 1);
    for (const auto& x : r) out.push_back(x.token);
  }
  return std::vector<int32_t>(out.begin() + 1, out.begin() + 1 + len);
}

// Chi-square statistic of `counts` (n samples) against the exact distribution of `len`-token continuations.
double chi_square(const Chain& target, const SamplingParams& p, const std::map<std::vector<int32_t>, int>& counts,
                  int n, int32_t len, int* cells) {
  const size_t V = target.rows.size();
  std::map<std::vector<int32_t>, double> exact{{{0}, 1.0}};
  for (int32_t step = 0; step < len; ++step) {
    std::map<std::vector<int32_t>, double> next;
    for (const auto& [seq, pr] : exact) {
      SampleInput in;
      in.logits = target.row(seq.back());
      in.params = &p;
      std::vector<int32_t> hist = seq;
      in.output_tokens = hist;
      std::vector<double> probs;
      target_distribution(in, probs);
      for (size_t v = 0; v < V; ++v)
        if (probs[v] > 0) {
          auto s = seq;
          s.push_back(int32_t(v));
          next[s] = pr * probs[v];
        }
    }
    exact = std::move(next);
  }
  double chi = 0, other_e = 0, other_o = 0;
  *cells = 0;
  for (const auto& [seq, pr] : exact) {
    std::vector<int32_t> key(seq.begin() + 1, seq.end());
    auto it = counts.find(key);
    const double o = it == counts.end() ? 0.0 : double(it->second), e = pr * n;
    if (e < 5) { other_e += e; other_o += o; continue; }  // pool rare cells
    chi += (o - e) * (o - e) / e;
    ++*cells;
  }
  if (other_e > 0) { chi += (other_o - other_e) * (other_o - other_e) / other_e; ++*cells; }
  for (const auto& [key, c] : counts) {  // a sequence the target cannot produce
    std::vector<int32_t> full{0};
    full.insert(full.end(), key.begin(), key.end());
    if (!exact.count(full)) ADD_FAILURE() << "impossible continuation sampled";
  }
  return chi;
}

}  // namespace

TEST(SpecSampling, TargetDistributionMatchesSamplerDrawForDraw) {
  std::mt19937 g(7);
  Sampler s;
  std::vector<SamplingParams> ps(6);
  ps[0].temperature = 1.0;
  ps[1].temperature = 0.7; ps[1].top_p = 0.8;
  ps[2].temperature = 1.3; ps[2].top_k = 5;
  ps[3].temperature = 0.9; ps[3].min_p = 0.05; ps[3].repetition_penalty = 1.3; ps[3].frequency_penalty = 0.5;
  ps[4].temperature = 1.0; ps[4].presence_penalty = 1.0; ps[4].logit_bias = {{3, 5.0}}; ps[4].min_tokens = 10;
  ps[5].temperature = 0.0; ps[5].repetition_penalty = 1.5;
  int mismatches = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const SamplingParams& p = ps[size_t(trial) % ps.size()];
    std::vector<float> logits = random_logits(50, g);
    std::vector<int32_t> prompt{1, 2, 3}, output{4, 4, 5, 9};
    SampleInput in;
    in.logits = logits;
    in.params = &p;
    in.prompt_tokens = prompt;
    in.output_tokens = output;
    in.rng = {uint64_t(trial) + 11, 0};
    in.eos_token_id = 0;
    std::vector<double> probs;
    target_distribution(in, probs);
    double sum = 0;
    for (double x : probs) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-9);
    const int32_t mine = draw_inverse_cdf(probs, philox_uniform(in.rng, output.size()));
    const int32_t ref = s.sample(in).token;
    EXPECT_GT(probs[size_t(ref)], 0.0);
    mismatches += mine != ref;  // only a rounding-edge draw may differ
  }
  EXPECT_LE(mismatches, 1);
}

TEST(SpecSampling, GreedyAcceptsTheSamplersPrefixPlusOne) {
  std::mt19937 g(3);
  SamplingParams p;
  p.temperature = 0.0;
  p.logprobs = true;
  p.top_logprobs = 2;
  Sampler s;
  const size_t V = 20;
  std::vector<float> rows;
  for (int k = 0; k < 4; ++k) {
    auto r = random_logits(V, g);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  auto argmax_row = [&](int k) {
    return int32_t(std::max_element(rows.begin() + k * V, rows.begin() + (k + 1) * V) - (rows.begin() + k * V));
  };
  std::vector<int32_t> drafts{argmax_row(0), argmax_row(1), (argmax_row(2) + 1) % int32_t(V)};
  VerifyInput vi;
  vi.logits = rows;
  vi.drafts = drafts;
  vi.params = &p;
  std::vector<SampleResult> r;
  verify_drafts(vi, s, LogprobsMode::Raw, r);
  ASSERT_EQ(r.size(), 3u);  // two accepted, then the target's correction
  EXPECT_EQ(r[0].token, drafts[0]);
  EXPECT_EQ(r[1].token, drafts[1]);
  EXPECT_EQ(r[2].token, argmax_row(2));
  // Logprobs are those of the plain sampler on the same row.
  SampleInput in;
  in.logits = std::span<const float>(rows).subspan(V, V);
  in.params = &p;
  std::vector<int32_t> hist{drafts[0]};
  in.output_tokens = hist;
  const SampleResult plain = s.sample(in);
  EXPECT_EQ(plain.token, r[1].token);
  EXPECT_EQ(plain.logprob, r[1].logprob);
  ASSERT_EQ(plain.top.size(), r[1].top.size());
  // All drafts right: bonus token from the last row.
  drafts[2] = argmax_row(2);
  verify_drafts(vi, s, LogprobsMode::Raw, r);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[3].token, argmax_row(3));
}

// The core losslessness check: continuations produced by draft + verify have the target's distribution.
void check_distribution(const SamplingParams& p, bool truncation, uint32_t chain_seed) {
  const size_t V = 4;
  const Chain target = random_chain(V, chain_seed, 1.0f), draft = random_chain(V, chain_seed + 100, 1.5f);
  const int n = 20000, len = 3;
  std::map<std::vector<int32_t>, int> counts;
  for (int i = 0; i < n; ++i) ++counts[speculate(target, draft, p, uint64_t(i) * 2654435761u + 17, 3, len, truncation)];
  int cells = 0;
  const double chi = chi_square(target, p, counts, n, len, &cells);
  // 99.9 % quantile of chi-square with df = cells - 1 (Wilson-Hilferty).
  const double df = cells - 1, z = 3.09;
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi, crit) << "cells " << cells;
}

TEST(SpecSampling, RejectionSamplingReproducesTheTargetDistribution) {
  SamplingParams p;
  p.temperature = 1.0;
  check_distribution(p, false, 1);
}

TEST(SpecSampling, LosslessWithProcessingAndNonAnticipatingTruncation) {
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 3;
  check_distribution(p, true, 2);
}

TEST(SpecSampling, ChiSquareDetectsABiasedVerifier) {
  // Sanity of the statistic: drafts accepted always (a broken verifier) must fail the same check.
  const size_t V = 4;
  const Chain target = random_chain(V, 1, 1.0f), draft = random_chain(V, 101, 1.5f);
  SamplingParams p;
  const int n = 20000;
  std::map<std::vector<int32_t>, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> hist{0};
    for (int j = 0; j < 3; ++j) {
      SampleInput in;
      in.logits = draft.row(hist.back());
      in.params = &p;
      in.output_tokens = hist;
      in.rng = {uint64_t(i) + 5, 0};
      hist.push_back(draw_draft(in, 0, j, nullptr));
    }
    ++counts[std::vector<int32_t>(hist.begin() + 1, hist.end())];
  }
  int cells = 0;
  const double chi = chi_square(target, p, counts, n, 3, &cells);
  EXPECT_GT(chi, 500.0);
}

TEST(SpecSampling, SeededRunsAreReproducible) {
  const Chain target = random_chain(6, 9, 1.0f), draft = random_chain(6, 19, 1.0f);
  SamplingParams p;
  p.temperature = 1.0;
  for (uint64_t seed : {1ull, 2ull, 99ull})
    EXPECT_EQ(speculate(target, draft, p, seed, 4, 12, false), speculate(target, draft, p, seed, 4, 12, false));
}
