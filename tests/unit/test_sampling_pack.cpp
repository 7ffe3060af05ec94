// Device sampling, host side (sampling/row_pack.*, scheduler::pack_step_rows / collect_device_samples): the packed
// description of a row must carry exactly what the reference Sampler reads. The strongest check: applying the
// packed edits to a logits row (as the kernel's prepare phase does) gives bitwise the Sampler's own work row,
// observed through its processed logprobs of greedy requests (log_softmax of the work row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "sampling/row_pack.h"
#include "scheduler/step_sampling.h"

using namespace dsinfer;
using namespace dsinfer::sampling;

namespace {

// The kernel's prepare phase on the CPU: NaN -> -inf, bitmask, bias, bans, penalties (sampling.cu, prepare()).
std::vector<float> apply_packed(const PackedRows& pr, size_t row, const std::vector<float>& logits) {
  const ops::SampleRowDesc& d = pr.rows[row];
  std::vector<float> w(logits.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::isnan(logits[i]) ? -INFINITY : logits[i];
  if (d.mask_row >= 0)
    apply_token_bitmask(w, std::span<const int32_t>(pr.mask_words.data() + size_t(d.mask_row) * size_t(pr.words_per_row()),
                                                    size_t(pr.words_per_row())));
  for (int32_t j = 0; j < d.bias_count; ++j) w[size_t(pr.entries[size_t(d.bias_begin + j)].token)] += pr.entries[size_t(d.bias_begin + j)].value;
  for (int32_t j = 0; j < d.ban_count; ++j) w[size_t(pr.entries[size_t(d.ban_begin + j)].token)] = -INFINITY;
  for (int32_t j = 0; j < d.penalty_count; ++j) {
    const ops::SampleEntry& e = pr.entries[size_t(d.penalty_begin + j)];
    float x = w[size_t(e.token)];
    if (d.flags & ops::kSampleRepetition)
      x = x > 0.0f ? float(double(x) / d.repetition_penalty) : float(double(x) * d.repetition_penalty);
    w[size_t(e.token)] = x - e.value;
  }
  return w;
}

std::vector<int32_t> random_tokens(std::mt19937& g, size_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (auto& t : v) t = int32_t(g() % uint32_t(vocab));
  return v;
}

}  // namespace

TEST(SamplingPack, DescribesParamsAndDrawsTheHostUniform) {
  PackedRows pr;
  pr.clear(1000);
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 40;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.logprobs = true;
  p.top_logprobs = 5;
  const std::vector<int32_t> out = {1, 2, 3};
  RowRequest r;
  r.logits_row = 3;
  r.params = &p;
  r.output_tokens = out;
  r.rng = {1234, 2};
  ASSERT_TRUE(pr.add(r).is_ok());
  ASSERT_EQ(pr.rows.size(), 1u);
  const ops::SampleRowDesc& d = pr.rows[0];
  EXPECT_EQ(d.logits_row, 3);
  EXPECT_EQ(d.flags, ops::kSampleLogprobs);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_EQ(d.top_logprobs, 5);
  EXPECT_EQ(d.inv_temperature, 1.0 / 0.7);
  EXPECT_EQ(d.inv_temperature_f, float(1.0 / 0.7));
  EXPECT_EQ(d.top_p, 0.9);
  EXPECT_EQ(d.min_p, 0.05);
  EXPECT_EQ(d.uniform, philox_uniform({1234, 2}, 3));  // the draw index is the output length
  EXPECT_EQ(d.mask_row, -1);
  EXPECT_EQ(d.bias_count + d.ban_count + d.penalty_count, 0);
  p.temperature = 0;
  p.logprobs = false;
  ASSERT_TRUE(pr.add(r, LogprobsMode::Processed).is_ok());
  EXPECT_EQ(pr.rows[1].flags, ops::kSampleGreedy | ops::kSampleProcessed);
  EXPECT_EQ(pr.rows[1].top_logprobs, 0);  // only with logprobs
}

TEST(SamplingPack, MinTokensBansStopIdsAndEosOnlyWhileShort) {
  PackedRows pr;
  pr.clear(100);
  SamplingParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {7, 5, 7, 500};  // duplicates and an id outside the vocabulary
  const std::vector<int32_t> one = {9}, two = {9, 9};
  RowRequest r;
  r.params = &p;
  r.eos_token_id = 5;
  r.output_tokens = one;
  ASSERT_TRUE(pr.add(r).is_ok());
  const ops::SampleRowDesc& d = pr.rows[0];
  ASSERT_EQ(d.ban_count, 2);
  EXPECT_EQ(pr.entries[size_t(d.ban_begin)].token, 5);
  EXPECT_EQ(pr.entries[size_t(d.ban_begin + 1)].token, 7);
  r.output_tokens = two;
  ASSERT_TRUE(pr.add(r).is_ok());
  EXPECT_EQ(pr.rows[1].ban_count, 0);
  p.ignore_eos = true;
  p.stop_token_ids = {};
  r.output_tokens = one;
  ASSERT_TRUE(pr.add(r).is_ok());
  EXPECT_EQ(pr.rows[2].ban_count, 0);
}

TEST(SamplingPack, PenaltyEntriesCountOutputAndPromptOnlyWithRepetition) {
  PackedRows pr;
  pr.clear(50);
  SamplingParams p;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  const std::vector<int32_t> prompt = {1, 2}, out = {2, 3, 3, 99};
  RowRequest r;
  r.params = &p;
  r.prompt_tokens = prompt;
  r.output_tokens = out;
  ASSERT_TRUE(pr.add(r).is_ok());
  auto entries = [&](size_t row) {
    std::vector<std::pair<int32_t, float>> v;
    for (int32_t j = 0; j < pr.rows[row].penalty_count; ++j)
      v.push_back({pr.entries[size_t(pr.rows[row].penalty_begin + j)].token, pr.entries[size_t(pr.rows[row].penalty_begin + j)].value});
    std::sort(v.begin(), v.end());
    return v;
  };
  using E = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(entries(0), (E{{2, 0.75f}, {3, 1.25f}}));  // no repetition penalty: the prompt is not read
  EXPECT_FALSE(pr.rows[0].flags & ops::kSampleRepetition);
  p.repetition_penalty = 1.3;
  ASSERT_TRUE(pr.add(r).is_ok());
  EXPECT_EQ(entries(1), (E{{1, 0.0f}, {2, 0.75f}, {3, 1.25f}}));
  EXPECT_TRUE(pr.rows[1].flags & ops::kSampleRepetition);
  EXPECT_EQ(pr.rows[1].repetition_penalty, 1.3);
}

TEST(SamplingPack, OnlyConstrainedRowsUploadTheirBitmask) {
  PackedRows pr;
  pr.clear(70);
  ASSERT_EQ(pr.words_per_row(), 3);
  SamplingParams p;
  const std::vector<int32_t> mask = {1, 2, 3};
  RowRequest r;
  r.params = &p;
  ASSERT_TRUE(pr.add(r).is_ok());
  r.token_bitmask = mask;
  ASSERT_TRUE(pr.add(r).is_ok());
  EXPECT_EQ(pr.rows[0].mask_row, -1);
  EXPECT_EQ(pr.rows[1].mask_row, 0);
  EXPECT_EQ(pr.num_mask_rows(), 1);
  EXPECT_EQ(pr.mask_words, mask);
  const std::vector<int32_t> short_mask = {1, 2};
  r.token_bitmask = short_mask;
  EXPECT_FALSE(pr.add(r).is_ok());
}

TEST(SamplingPack, BadInputIsAnError) {
  PackedRows pr;
  pr.clear(10);
  SamplingParams p;
  RowRequest r;
  EXPECT_FALSE(pr.add(r).is_ok());  // no params
  r.params = &p;
  p.logprobs = true;
  p.top_logprobs = 21;
  EXPECT_FALSE(pr.add(r).is_ok());
  p.top_logprobs = 0;
  r.logits_row = -1;
  EXPECT_FALSE(pr.add(r).is_ok());
  EXPECT_TRUE(pr.rows.empty());
}

// The packed edits rebuild the Sampler's work row bit for bit (greedy + processed logprobs expose it).
TEST(SamplingPack, PackedEditsReproduceTheSamplersWorkRow) {
  const int32_t V = 300;
  std::mt19937 g(7);
  Sampler host(LogprobsMode::Processed);
  for (int trial = 0; trial < 200; ++trial) {
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> logits(V);
    for (auto& x : logits) x = nd(g);
    SamplingParams p;
    p.temperature = 0;
    p.logprobs = true;
    p.top_logprobs = 20;
    if (g() % 2) p.repetition_penalty = 0.5 + double(g() % 100) / 50.0;
    if (g() % 2) p.frequency_penalty = double(int(g() % 400) - 200) / 100.0;
    if (g() % 2) p.presence_penalty = double(int(g() % 400) - 200) / 100.0;
    for (int b = int(g() % 4); b > 0; --b) p.logit_bias[int32_t(g() % V)] = double(int(g() % 2000) - 1000) / 10.0;
    p.min_tokens = int64_t(g() % 6);
    p.stop_token_ids = random_tokens(g, g() % 3, V);
    const std::vector<int32_t> prompt = random_tokens(g, g() % 40, V), out = random_tokens(g, g() % 8, V);
    std::vector<int32_t> mask;
    if (g() % 3 == 0)
      for (int w = 0; w < bitmask_words(V); ++w) mask.push_back(int32_t(g() | g()));
    SampleInput in;
    in.logits = logits;
    in.token_bitmask = mask;
    in.params = &p;
    in.prompt_tokens = prompt;
    in.output_tokens = out;
    in.eos_token_id = 1;
    const SampleResult want = host.sample(in);

    PackedRows pr;
    pr.clear(V);
    RowRequest r;
    r.params = &p;
    r.token_bitmask = mask;
    r.prompt_tokens = prompt;
    r.output_tokens = out;
    r.eos_token_id = 1;
    ASSERT_TRUE(pr.add(r, LogprobsMode::Processed).is_ok());
    const std::vector<float> w = apply_packed(pr, 0, logits);
    SampleResult got;
    got.token = int32_t(std::max_element(w.begin(), w.end()) - w.begin());  // first maximum: ties -> lower id
    log_softmax_top(w, p.top_logprobs, got.token, &got.logprob, &got.top);
    ASSERT_EQ(got.token, want.token) << "trial " << trial;
    EXPECT_EQ(got.logprob, want.logprob) << "trial " << trial;
    ASSERT_EQ(got.top.size(), want.top.size());
    for (size_t j = 0; j < got.top.size(); ++j) {
      EXPECT_EQ(got.top[j].token, want.top[j].token) << "trial " << trial;
      EXPECT_EQ(got.top[j].logprob, want.top[j].logprob) << "trial " << trial;
    }
  }
}

TEST(SamplingPack, CollectMapsResultsToPlanRowsAndReportsNonFinite) {
  scheduler::BatchPlan plan;
  SamplingParams lp, plain;
  lp.logprobs = true;
  plan.seqs.resize(3);
  plan.seqs[0].seq_id = 10;
  plan.seqs[0].needs_logits = true;
  plan.seqs[0].logits_row = 0;
  plan.seqs[0].params = &lp;
  plan.seqs[1].seq_id = 11;  // a prefill chunk without logits
  plan.seqs[2].seq_id = 12;
  plan.seqs[2].needs_logits = true;
  plan.seqs[2].logits_row = 1;
  plan.seqs[2].params = &plain;
  PackedRows pr;
  ASSERT_TRUE(scheduler::pack_step_rows(plan, 64, 3, nullptr, pr).is_ok());
  ASSERT_EQ(pr.rows.size(), 2u);
  EXPECT_EQ(pr.rows[1].logits_row, 1);
  std::vector<ops::SampleRowOut> res(2);
  res[0].token = 5;
  res[0].logprob = -0.5f;
  res[0].num_top = 1;
  res[0].top_token[0] = 5;
  res[0].top_logprob[0] = -0.5f;
  res[1].token = 6;
  res[1].logprob = -9.0f;
  std::vector<scheduler::StepOutput> out;
  std::vector<int32_t> nonfinite;
  ASSERT_TRUE(scheduler::collect_device_samples(plan, res, out, nonfinite).is_ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].plan_index, 0);
  EXPECT_EQ(out[0].seq_id, 10u);
  EXPECT_EQ(out[0].samples[0].logprob, -0.5f);
  ASSERT_EQ(out[0].samples[0].top.size(), 1u);
  EXPECT_EQ(out[1].plan_index, 2);
  EXPECT_EQ(out[1].samples[0].token, 6);
  EXPECT_EQ(out[1].samples[0].logprob, 0.0f);  // no logprobs asked
  EXPECT_TRUE(nonfinite.empty());
  res[0].status = ops::kSampleNonFinite;
  ASSERT_TRUE(scheduler::collect_device_samples(plan, res, out, nonfinite).is_ok());
  EXPECT_EQ(nonfinite, std::vector<int32_t>{0});
  EXPECT_EQ(out.size(), 1u);
  res[0].status = ops::kSampleBadInput;
  EXPECT_FALSE(scheduler::collect_device_samples(plan, res, out, nonfinite).is_ok());
  res.pop_back();
  res[0].status = ops::kSampleOk;
  EXPECT_FALSE(scheduler::collect_device_samples(plan, res, out, nonfinite).is_ok());
}
