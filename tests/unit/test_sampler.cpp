// Reference sampler: Philox known answers, greedy = argmax, truncation masks (top-k / top-p / min-p),
// empirical distributions vs softmax, penalties, logit bias, min_tokens, logprobs, seeded determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "sampling/sampler.h"

using namespace dsinfer::sampling;

namespace {

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> v;
  for (double p : probs) v.push_back(p > 0 ? float(std::log(p)) : -INFINITY);
  return v;
}

// Draws `trials` tokens for the same input with seeds 0..trials-1; returns counts per token.
std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, const SamplingParams& p, int trials) {
  std::map<int32_t, int> h;
  for (int t = 0; t < trials; ++t) {
    SampleInput in;
    in.logits = logits;
    in.params = &p;
    in.rng = {uint64_t(t) * 7919u + 1, 0};
    ++h[s.sample(in).token];
  }
  return h;
}

SampleResult sample_one(Sampler& s, const std::vector<float>& logits, const SamplingParams& p,
                        const std::vector<int32_t>& prompt = {}, const std::vector<int32_t>& output = {},
                        int64_t eos = -1, RngKey key = {42, 0}) {
  SampleInput in;
  in.logits = logits;
  in.params = &p;
  in.prompt_tokens = prompt;
  in.output_tokens = output;
  in.eos_token_id = eos;
  in.rng = key;
  return s.sample(in);
}

}  // namespace

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors for philox4x32_10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsInRangeAndRoughlyUniform) {
  double sum = 0;
  int below_quarter = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double u = philox_uniform({99, 0}, uint64_t(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below_quarter += u < 0.25;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(double(below_quarter) / n, 0.25, 0.01);
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto logits = random_logits(1000, seed);
    int32_t expect = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(sample_one(s, logits, p).token, expect);
  }
  std::vector<float> tie = {0.f, 3.f, 1.f, 3.f};
  EXPECT_EQ(sample_one(s, tie, p).token, 1);
  std::vector<float> nan_row = {NAN, 1.f, 2.f};
  EXPECT_EQ(sample_one(s, nan_row, p).token, 2);  // NaN is -inf, never chosen
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  Sampler s;
  SamplingParams p;
  p.temperature = 5.0;
  p.top_k = 1;
  auto logits = random_logits(500, 3);
  int32_t expect = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  auto h = histogram(s, logits, p, 200);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, expect);
}

TEST(Sampler, FullDistributionMatchesSoftmax) {
  Sampler s;
  for (double temp : {1.0, 2.0, 0.5}) {
    SamplingParams p;
    p.temperature = temp;
    std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
    auto logits = logits_for(probs);
    // Expected: softmax(log p / T) = p^(1/T) normalised.
    std::vector<double> want(4);
    double z = 0;
    for (int i = 0; i < 4; ++i) z += want[size_t(i)] = std::pow(probs[size_t(i)], 1.0 / temp);
    const int trials = 20000;
    auto h = histogram(s, logits, p, trials);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(double(h[i]) / trials, want[size_t(i)] / z, 0.015) << "T=" << temp << " token " << i;
  }
}

TEST(Sampler, TruncationMaskTable) {
  // probs 0.5 / 0.3 / 0.15 / 0.05: which tokens may be drawn, and with what renormalised probabilities.
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  struct Case {
    int32_t top_k;
    double top_p, min_p;
    std::vector<int32_t> kept;
  };
  const std::vector<Case> cases = {
      {2, 1.0, 0.0, {0, 1}},        // top-k
      {3, 1.0, 0.0, {0, 1, 2}},
      {0, 0.75, 0.0, {0, 1}},       // 0.5 < 0.75 <= 0.8
      {0, 0.5, 0.0, {0}},           // the first token already reaches 0.5
      {0, 0.9, 0.0, {0, 1, 2}},
      {0, 1.0, 0.25, {0, 1, 2}},    // p >= 0.125
      {0, 1.0, 0.7, {0}},           // p >= 0.35
      {3, 0.6, 0.0, {0, 1}},        // top-k then top-p on renormalised {.5,.3,.15}/.95: .526 < .6
      {0, 0.9, 0.5, {0, 1}},        // min-p first (0.5, 0.3) then top-p .9 of .8 -> both
  };
  Sampler s;
  auto logits = logits_for(probs);
  for (const auto& c : cases) {
    SamplingParams p;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    const int trials = 6000;
    auto h = histogram(s, logits, p, trials);
    double z = 0;
    for (int32_t t : c.kept) z += probs[size_t(t)];
    std::set<int32_t> seen;
    for (auto [tok, cnt] : h) seen.insert(tok);
    EXPECT_EQ(seen, std::set<int32_t>(c.kept.begin(), c.kept.end()))
        << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
    for (int32_t t : c.kept) EXPECT_NEAR(double(h[t]) / trials, probs[size_t(t)] / z, 0.025) << "token " << t;
  }
}

TEST(Sampler, TopKKeepsExactlyKOnTiesByLowestId) {
  Sampler s;
  SamplingParams p;
  p.top_k = 2;
  p.logprobs = true;
  std::vector<float> flat(6, 1.0f);
  auto h = histogram(s, flat, p, 600);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
}

TEST(Sampler, PenaltiesMatchVllmFormulas) {
  // Processed logprobs of a greedy request = log_softmax of the penalised logits; compare with a direct
  // computation of the formulas.
  Sampler s(LogprobsMode::Processed);
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.5;
  p.frequency_penalty = 0.4;
  p.presence_penalty = 0.3;
  p.logprobs = true;
  p.top_logprobs = 6;
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f, -0.5f, 0.0f};
  std::vector<int32_t> prompt = {0, 1};       // repetition only
  std::vector<int32_t> output = {2, 2, 4};    // repetition + frequency + presence
  std::vector<double> want(logits.begin(), logits.end());
  auto rep = [&](int i) { want[size_t(i)] = want[size_t(i)] > 0 ? want[size_t(i)] / 1.5 : want[size_t(i)] * 1.5; };
  rep(0); rep(1); rep(2); rep(4);
  want[2] -= 0.4 * 2 + 0.3;
  want[4] -= 0.4 * 1 + 0.3;
  double m = *std::max_element(want.begin(), want.end()), z = 0;
  for (double x : want) z += std::exp(x - m);
  auto r = sample_one(s, logits, p, prompt, output);
  EXPECT_EQ(r.token, int32_t(std::max_element(want.begin(), want.end()) - want.begin()));
  ASSERT_EQ(r.top.size(), 6u);
  for (const auto& e : r.top) EXPECT_NEAR(e.logprob, want[size_t(e.token)] - m - std::log(z), 1e-5) << e.token;
}

TEST(Sampler, RepetitionPenaltyFlipsGreedyChoice) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> pos = {0.f, 0.f, 0.f, 0.f, 0.f, 2.0f, 1.5f};
  EXPECT_EQ(sample_one(s, pos, p, {5}).token, 5);
  p.repetition_penalty = 2.0;  // 2.0 -> 1.0 < 1.5
  EXPECT_EQ(sample_one(s, pos, p, {5}).token, 6);
  std::vector<float> neg = {-1.0f, -1.5f};
  EXPECT_EQ(sample_one(s, neg, p, {0}).token, 1);  // -1 -> -2 < -1.5
  EXPECT_EQ(sample_one(s, neg, p, {}, {}).token, 0);
}

TEST(Sampler, LogitBias) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  auto logits = random_logits(100, 11);
  int32_t top = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  int32_t low = int32_t(std::min_element(logits.begin(), logits.end()) - logits.begin());
  p.logit_bias[low] = 100;
  EXPECT_EQ(sample_one(s, logits, p).token, low);
  p.logit_bias.clear();
  p.logit_bias[top] = -100;
  EXPECT_NE(sample_one(s, logits, p).token, top);
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  std::vector<float> logits = {0.f, 4.f, 1.f, 5.f};  // 3 = eos is best, 1 = stop token second
  EXPECT_EQ(sample_one(s, logits, p, {}, {}, /*eos=*/3).token, 2);
  EXPECT_EQ(sample_one(s, logits, p, {}, {7}, 3).token, 2);
  EXPECT_EQ(sample_one(s, logits, p, {}, {7, 7}, 3).token, 3);  // min_tokens reached
  p.ignore_eos = true;  // eos is then an ordinary token; stop tokens are still masked
  EXPECT_EQ(sample_one(s, logits, p, {}, {}, 3).token, 3);
}

TEST(Sampler, RawLogprobsAreLogSoftmaxOfInput) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 5;
  p.logprobs = true;
  p.top_logprobs = 4;
  auto logits = random_logits(300, 5);
  logits[10] = logits[20] = 50.0f;  // a tie at the top: lower id first
  double m = 50.0, z = 0;
  for (float x : logits) z += std::exp(double(x) - m);
  auto r = sample_one(s, logits, p);
  EXPECT_NEAR(r.logprob, double(logits[size_t(r.token)]) - m - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 4u);
  EXPECT_EQ(r.top[0].token, 10);
  EXPECT_EQ(r.top[1].token, 20);
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(r.top[k].token, idx[k]);
    EXPECT_NEAR(r.top[k].logprob, double(logits[size_t(idx[k])]) - m - std::log(z), 1e-5);
  }
}

TEST(Sampler, ProcessedLogprobsDescribeTruncatedDistribution) {
  Sampler s(LogprobsMode::Processed);
  SamplingParams p;
  p.top_k = 2;
  p.temperature = 2.0;
  p.logprobs = true;
  p.top_logprobs = 3;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  auto r = sample_one(s, logits, p);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 2);
  // Kept {1, 2} at T=2: p1 = 1 / (1 + e^-0.5).
  EXPECT_NEAR(std::exp(r.top[0].logprob), 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
  EXPECT_NEAR(std::exp(r.top[0].logprob) + std::exp(r.top[1].logprob), 1.0, 1e-6);
  EXPECT_TRUE(std::isinf(r.top[2].logprob) && r.top[2].logprob < 0);
}

TEST(Sampler, SeededDrawsAreReproducibleAndStreamsDiffer) {
  auto logits = random_logits(64, 9);
  for (auto& x : logits) x *= 0.1f;  // nearly flat: different streams should disagree often
  SamplingParams p;
  std::vector<int32_t> out;
  Sampler a, b;
  // Same key + same history -> same token, whichever Sampler object (scratch state does not leak).
  for (int step = 0; step < 30; ++step) {
    auto ra = sample_one(a, logits, p, {1, 2}, out, -1, {777, 0});
    random_logits(10, uint32_t(step));  // unrelated work in between
    auto rb = sample_one(b, logits, p, {1, 2}, out, -1, {777, 0});
    EXPECT_EQ(ra.token, rb.token);
    out.push_back(ra.token);
  }
  // n > 1: sample streams 0..3 of one seed, and another seed, produce different sequences.
  std::set<std::vector<int32_t>> distinct;
  for (RngKey key : {RngKey{777, 0}, RngKey{777, 1}, RngKey{777, 2}, RngKey{777, 3}, RngKey{778, 0}}) {
    std::vector<int32_t> seq;
    for (int step = 0; step < 12; ++step) seq.push_back(sample_one(a, logits, p, {}, seq, -1, key).token);
    distinct.insert(seq);
  }
  EXPECT_EQ(distinct.size(), 5u);
}
