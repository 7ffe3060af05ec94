// GPU parity: the device sampler (ops/sampling) against the reference CPU Sampler over random rows and parameter
// combinations (greedy, temperature, top-k, top-p, min-p, penalties, bias, min_tokens, bitmask, raw / processed
// logprobs). Tokens must be identical: both sides compute the same double probabilities (exp may differ in the
// last bit between glibc and CUDA) and walk the same order with the same tie rules and the same Philox uniform;
// only a target within ~1e-15 of a cumulative boundary could differ, which random data does not hit. Logprobs:
// both take log_softmax in double and round to float, so they agree to an ulp or two; 1e-5 absolute leaves room
// for the different summation order of the normaliser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/gpu_test_util.h"
#include "ops/sampling/sampling_cuda.h"
#include "sampling/row_pack.h"

using namespace dsinfer;
using namespace dsinfer::sampling;
using namespace dsinfer::cuda::test;

namespace {

struct Case {
  SamplingParams p;
  std::vector<int32_t> prompt, out, mask;
  RngKey key;
  LogprobsMode mode = LogprobsMode::Raw;
  int32_t logits_row = 0;
};

template <typename T>
T pick(std::mt19937& g, std::initializer_list<T> v) {
  return *(v.begin() + g() % v.size());
}

Case random_case(std::mt19937& g, int32_t V) {
  Case c;
  SamplingParams& p = c.p;
  p.temperature = pick(g, {0.0, 0.3, 0.7, 1.0, 1.5});
  if (g() % 2) p.top_k = pick(g, {1, 2, 5, 50, 1000});
  if (g() % 2) p.top_p = pick(g, {0.05, 0.5, 0.9, 0.99});
  if (g() % 3 == 0) p.min_p = pick(g, {0.01, 0.1, 0.5});
  if (g() % 3 == 0) p.repetition_penalty = pick(g, {0.8, 1.2, 2.0});
  if (g() % 3 == 0) p.frequency_penalty = pick(g, {-0.5, 0.4, 1.5});
  if (g() % 3 == 0) p.presence_penalty = pick(g, {-1.0, 0.3, 2.0});
  for (int b = g() % 3 == 0 ? int(g() % 5) : 0; b > 0; --b) p.logit_bias[int32_t(g() % uint32_t(V))] = pick(g, {-100.0, -3.0, 2.5, 100.0});
  if (g() % 3 == 0) p.min_tokens = 4;
  if (g() % 2) p.stop_token_ids = {int32_t(g() % uint32_t(V))};
  p.logprobs = (g() % 2) != 0;
  if (p.logprobs) p.top_logprobs = pick(g, {0, 1, 5, 20});
  c.mode = g() % 4 == 0 ? LogprobsMode::Processed : LogprobsMode::Raw;
  for (int i = int(g() % 30); i > 0; --i) c.prompt.push_back(int32_t(g() % 64));  // low ids: logits there are large
  for (int i = int(g() % 8); i > 0; --i) c.out.push_back(int32_t(g() % 64));
  if (g() % 4 == 0)
    for (int w = 0; w < bitmask_words(V); ++w) c.mask.push_back(int32_t(g() | g() | g()));
  c.key = {g(), uint32_t(g() % 3)};
  return c;
}

// Normal logits; `ties` rounds them to steps of 0.5 (many exact ties in every order statistic).
std::vector<float> random_logits(std::mt19937& g, int32_t V, bool ties) {
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = ties ? std::round(nd(g) * 2.0f) / 2.0f : nd(g);
  return v;
}

// R rows of random_logits, row r with ties where ties(r).
template <typename Ties>
std::vector<float> stacked_logits(std::mt19937& g, int R, int32_t V, Ties ties) {
  std::vector<float> logits;
  for (int r = 0; r < R; ++r) {
    const std::vector<float> row = random_logits(g, V, ties(r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

// One row description per entry of logits_rows, all with the params p.
PackedRows pack_rows(int32_t V, const SamplingParams& p, std::initializer_list<int32_t> logits_rows) {
  PackedRows pr;
  pr.clear(V);
  RowRequest r;
  r.params = &p;
  for (int32_t row : logits_rows) {
    r.logits_row = row;
    EXPECT_TRUE(pr.add(r).is_ok());
  }
  return pr;
}

std::vector<ops::SampleRowOut> run_device(const std::vector<float>& logits, int64_t R, int64_t V, const PackedRows& pr) {
  auto dl = to_device(logits);
  auto drows = to_device(pr.rows);
  cuda::DeviceBuffer<ops::SampleEntry> de;
  if (!pr.entries.empty()) de = to_device(pr.entries);
  cuda::DeviceBuffer<int32_t> dm;
  if (!pr.mask_words.empty()) dm = to_device(pr.mask_words);
  cuda::DeviceBuffer<float> work;
  EXPECT_TRUE(work.alloc(size_t(ops::cuda::sample_rows_work_floats(int64_t(pr.rows.size()), V))).is_ok());
  cuda::DeviceBuffer<ops::SampleRowOut> dout;
  EXPECT_TRUE(dout.alloc(pr.rows.size()).is_ok());
  ops::cuda::SampleRowsArgs a;
  a.logits = dl.data();
  a.logits_stride = V;
  a.V = V;
  a.logits_rows = R;
  a.rows = drows.data();
  a.num_rows = int64_t(pr.rows.size());
  a.entries = de.data();
  a.num_entries = int64_t(pr.entries.size());
  a.mask_words = dm.data();
  a.num_mask_rows = pr.num_mask_rows();
  a.words_per_row = pr.words_per_row();
  a.work = work.data();
  a.out = dout.data();
  const Status s = ops::cuda::sample_rows(a, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return to_host(dout, pr.rows.size());
}

// Samples every case on both sides (case i reads logits row cases[i].logits_row) and compares.
void compare(const std::vector<float>& logits, int64_t R, int32_t V, const std::vector<Case>& cases) {
  PackedRows pr;
  pr.clear(V);
  for (const Case& c : cases) {
    RowRequest r;
    r.logits_row = c.logits_row;
    r.token_bitmask = c.mask;
    r.params = &c.p;
    r.prompt_tokens = c.prompt;
    r.output_tokens = c.out;
    r.rng = c.key;
    r.eos_token_id = 0;
    ASSERT_TRUE(pr.add(r, c.mode).is_ok());
  }
  const std::vector<ops::SampleRowOut> got = run_device(logits, R, V, pr);
  Sampler raw(LogprobsMode::Raw), processed(LogprobsMode::Processed);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SampleInput in;
    in.logits = std::span<const float>(logits.data() + size_t(c.logits_row) * size_t(V), size_t(V));
    in.token_bitmask = c.mask;
    in.params = &c.p;
    in.prompt_tokens = c.prompt;
    in.output_tokens = c.out;
    in.rng = c.key;
    in.eos_token_id = 0;
    const SampleResult want = (c.mode == LogprobsMode::Raw ? raw : processed).sample(in);
    const SampleResult dev = to_sample_result(got[i], c.p.logprobs);
    const std::string what = fmt::format("row {} T={} k={} p={} min_p={} rep={} logprobs={} mode={}", i,
                                         c.p.temperature, c.p.top_k, c.p.top_p, c.p.min_p, c.p.repetition_penalty,
                                         c.p.logprobs, int(c.mode));
    ASSERT_EQ(got[i].status, ops::kSampleOk) << what;
    ASSERT_EQ(dev.token, want.token) << what;
    if (!c.p.logprobs) continue;
    if (std::isinf(want.logprob)) EXPECT_EQ(dev.logprob, want.logprob) << what;  // all masked: -inf
    else EXPECT_NEAR(dev.logprob, want.logprob, 1e-5) << what;
    ASSERT_EQ(dev.top.size(), want.top.size()) << what;
    for (size_t j = 0; j < want.top.size(); ++j) {
      EXPECT_EQ(dev.top[j].token, want.top[j].token) << what << " top " << j;
      if (std::isinf(want.top[j].logprob)) EXPECT_EQ(dev.top[j].logprob, want.top[j].logprob) << what;
      else EXPECT_NEAR(dev.top[j].logprob, want.top[j].logprob, 1e-5) << what << " top " << j;
    }
  }
}

}  // namespace

TEST(GpuSampling, MatchesTheHostSamplerOnRandomRowsAndParams) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 5000, R = 48;
  std::mt19937 g(11);
  for (int batch = 0; batch < 8; ++batch) {
    const std::vector<float> logits = stacked_logits(g, R, V, [](int r) { return r % 5 == 0; });
    std::vector<Case> cases;
    for (int r = 0; r < R; ++r) {
      cases.push_back(random_case(g, V));
      cases.back().logits_row = (r * 7 + batch) % R;  // rows in any order
    }
    compare(logits, R, V, cases);
  }
}

TEST(GpuSampling, MatchesTheHostSamplerOnTheV4Vocabulary) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 129280, R = 12;
  std::mt19937 g(5);
  const std::vector<float> logits = stacked_logits(g, R, V, [](int r) { return r % 3 == 0; });
  std::vector<Case> cases;
  for (int r = 0; r < 2 * R; ++r) {
    cases.push_back(random_case(g, V));
    cases.back().logits_row = r % R;
  }
  // The common serving settings explicitly: plain temperature, top-p only, top-k only, greedy with top logprobs.
  cases[0].p = SamplingParams{};
  cases[0].p.temperature = 1.0;
  cases[1].p = SamplingParams{};
  cases[1].p.temperature = 0.7;
  cases[1].p.top_p = 0.9;
  cases[2].p = SamplingParams{};
  cases[2].p.temperature = 0.6;
  cases[2].p.top_k = 20;
  cases[3].p = SamplingParams{};
  cases[3].p.temperature = 0.0;
  cases[3].p.logprobs = true;
  cases[3].p.top_logprobs = 20;
  for (int i = 0; i < 4; ++i) cases[size_t(i)].mask.clear();
  compare(logits, R, V, cases);
}

TEST(GpuSampling, TiesMaskedRowsAndSeedsAcrossSteps) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 1000;
  // Few distinct values: top-k and top-p boundaries fall inside tie classes (taken by lower id).
  std::vector<float> logits(size_t(V) * 3);
  for (int32_t i = 0; i < V; ++i) logits[size_t(i)] = float(i % 4);
  for (int32_t i = 0; i < V; ++i) logits[size_t(V + i)] = i % 10 == 0 ? 1.0f : -2.0f;
  for (int32_t i = 0; i < V; ++i) logits[size_t(2 * V + i)] = 0.0f;
  std::vector<Case> cases;
  for (int k : {0, 1, 3, 250, 251, 260}) {
    for (double top_p : {1.0, 0.3, 0.5, 0.999}) {
      for (int32_t row = 0; row < 3; ++row) {
        Case c;
        c.p.temperature = 0.9;
        c.p.top_k = k;
        c.p.top_p = top_p;
        c.p.logprobs = true;
        c.p.top_logprobs = 3;
        c.logits_row = row;
        c.key = {uint64_t(k * 100 + row), 0};
        for (int s = int(cases.size() % 5); s > 0; --s) c.out.push_back(7);  // other draw indices
        cases.push_back(c);
      }
    }
  }
  Case all_masked;  // every token disallowed: the host falls back to argmax = id 0
  all_masked.p.temperature = 1.0;
  all_masked.p.logprobs = true;
  all_masked.mask.assign(size_t(bitmask_words(V)), 0);
  cases.push_back(all_masked);
  compare(logits, 3, V, cases);
}

// Plain greedy rows (greedy, no logprobs, no bias / bans / penalties) are scanned by several blocks each
// (ops::cuda::greedy_split: 31 a row at 1 and 3 rows of the V4 vocabulary, 5 at 64, 1 at 300) and reduced in the row
// kernel. Their tokens against the host's argmax: the maximum repeated in different slices (the lowest id wins), at
// the last id, a flat row (id 0), the maximum masked out, every token masked (id 0), with other rows (logprobs,
// penalties, sampling) in the same launch taking the general path.
TEST(GpuSampling, PlainGreedyRowsScannedInSlices) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 129280, R = 5;
  std::mt19937 g(11);
  std::vector<float> logits = stacked_logits(g, R, V, [](int r) { return r == 1; });
  auto at = [&](int r, int i) -> float& { return logits[size_t(r) * size_t(V) + size_t(i)]; };
  at(1, 100000) = 40.0f;  // three maxima in three slices: id 4097 wins
  at(1, 4097) = 40.0f;
  at(1, 64000) = 40.0f;
  at(2, V - 1) = 40.0f;  // the last id
  for (int i = 0; i < V; ++i) at(3, i) = 0.0f;  // flat: id 0
  at(4, 77777) = 40.0f;  // masked out below: the row's second best wins
  std::vector<int32_t> no_top(size_t(bitmask_words(V)), -1);
  no_top[77777 / 32] &= ~int32_t(1u << (77777 % 32));
  for (int rows : {1, 3, 64, 300}) {
    SCOPED_TRACE(testing::Message() << rows << " rows, split " << ops::cuda::greedy_split(rows, V));
    std::vector<Case> cases;
    for (int c = 0; c < rows; ++c) {
      Case k;
      k.p.temperature = 0.0;
      k.logits_row = c % R;
      if (c % R == 4) k.mask = no_top;
      if (c == 7) k.mask.assign(size_t(bitmask_words(V)), 0);  // every token masked
      if (c % 9 == 5) k.p.logprobs = true;                     // general path, same launch
      if (c % 11 == 6) {
        k.p.frequency_penalty = 1.5;
        k.out = {int32_t(c % 50)};
      }
      if (c % 13 == 8) k.p.temperature = 0.8;
      k.key = {uint64_t(c), 0};
      cases.push_back(k);
    }
    compare(logits, R, V, cases);
  }
}

// A non-finite logit in any slice of a plain greedy row reports the row (as the general path does); a finite row
// beside it is still sampled.
TEST(GpuSampling, PlainGreedyNonFiniteInAnySlice) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 129280;
  std::mt19937 g(12);
  for (int bad_id : {0, 70000, V - 1}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> logits = random_logits(g, V, false);
      const std::vector<float> good = random_logits(g, V, false);
      logits.insert(logits.end(), good.begin(), good.end());
      logits[size_t(bad_id)] = bad;
      SamplingParams p;
      p.temperature = 0.0;
      const std::vector<ops::SampleRowOut> got = run_device(logits, 2, V, pack_rows(V, p, {0, 1}));
      EXPECT_EQ(got[0].status, ops::kSampleNonFinite) << "id " << bad_id << " value " << bad;
      EXPECT_EQ(got[0].token, -1);
      ASSERT_EQ(got[1].status, ops::kSampleOk);
      EXPECT_EQ(got[1].token, int32_t(std::max_element(good.begin(), good.end()) - good.begin()));
    }
  }
}

TEST(GpuSampling, NonFiniteRowsAndBadDescriptionsAreReported) {
  DSI_SKIP_WITHOUT_GPU();
  const int32_t V = 300;
  std::vector<float> logits(size_t(V) * 2, 0.5f);
  logits[size_t(V + 17)] = NAN;
  const SamplingParams p;
  const std::vector<ops::SampleRowOut> got = run_device(logits, 2, V, pack_rows(V, p, {1, 2, 0}));  // 2: past the rows
  EXPECT_EQ(got[0].status, ops::kSampleNonFinite);
  EXPECT_EQ(got[1].status, ops::kSampleBadInput);
  EXPECT_EQ(got[2].status, ops::kSampleOk);
  ops::cuda::SampleRowsArgs bad;
  bad.V = V;
  bad.logits_stride = V - 1;
  bad.num_rows = 1;
  EXPECT_FALSE(ops::cuda::sample_rows(bad, nullptr).is_ok());
  bad.logits_stride = V;  // null pointers
  EXPECT_FALSE(ops::cuda::sample_rows(bad, nullptr).is_ok());
}
