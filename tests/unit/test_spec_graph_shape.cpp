// Speculative decoding's fast-path gates (host-only): which steps the CUDA runner replays as graphs
// (backends::fixed_shape_step: decode steps and uniform verify steps that fit max_model_len) and which requests
// let a device drafter take the argmax itself (speculative::plain_argmax).
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/step/step_plan.h"
#include "speculative/speculator.h"

using namespace dsinfer;

namespace {

cache::StateLayout layout16() {
  cache::StateLayout s;
  s.block_size = 16;
  return s;
}

// S sequences of n new tokens each at position `start`, every token with a logits row when `all_logits`
// (verify), else the last one only; n - 1 of them drafts when spec.
struct Plan {
  std::vector<cache::BlockId> table{1, 2};
  scheduler::BatchPlan plan;
  Plan(int32_t S, int32_t n, int64_t start, bool all_logits, bool spec) {
    plan.clear();
    plan.cu_seqlens.push_back(0);
    for (int32_t s = 0; s < S; ++s) {
      scheduler::SeqPlan sp;
      sp.start_pos = start;
      sp.num_new_tokens = n;
      sp.token_offset = s * n;
      sp.slot = s;
      sp.block_table = table;
      sp.needs_logits = true;
      sp.num_spec_tokens = spec ? n - 1 : 0;
      sp.logits_row = int32_t(plan.logits_token_index.size());
      for (int32_t t = 0; t < n; ++t) {
        plan.token_ids.push_back(5);
        plan.positions.push_back(start + t);
        if (all_logits || t == n - 1) plan.logits_token_index.push_back(s * n + t);
      }
      plan.cu_seqlens.push_back((s + 1) * n);
      plan.seqs.push_back(sp);
    }
  }
};

}  // namespace

TEST(SpecGraphShape, DecodeAndUniformVerifyStepsAreFixedShape) {
  EXPECT_TRUE(backends::fixed_shape_step(Plan(4, 1, 10, true, false).plan, layout16(), 32));
  EXPECT_TRUE(backends::fixed_shape_step(Plan(1, 6, 10, true, true).plan, layout16(), 32));
  EXPECT_TRUE(backends::fixed_shape_step(Plan(3, 4, 10, true, true).plan, layout16(), 32));
}

TEST(SpecGraphShape, OtherStepsAreNot) {
  EXPECT_FALSE(backends::fixed_shape_step(Plan(2, 6, 10, false, false).plan, layout16(), 32));  // prefill chunks
  EXPECT_FALSE(backends::fixed_shape_step(Plan(1, 6, 10, true, true).plan, layout16(), 0));     // no max_model_len
  EXPECT_FALSE(backends::fixed_shape_step(Plan(1, 6, 28, true, true).plan, layout16(), 32));    // drafts past it
  EXPECT_FALSE(backends::fixed_shape_step(Plan(1, 20, 0, true, true).plan, layout16(), 64));    // k above 16
  Plan ragged(2, 3, 10, true, true);  // 1 + 2 tokens and 1 + 0: not uniform
  ragged.plan.seqs[1].num_new_tokens = 1;
  ragged.plan.seqs[1].num_spec_tokens = 0;
  ragged.plan.token_ids.resize(4), ragged.plan.positions.resize(4), ragged.plan.logits_token_index.resize(4);
  EXPECT_FALSE(backends::fixed_shape_step(ragged.plan, layout16(), 32));
  Plan empty(0, 1, 0, true, false);
  EXPECT_FALSE(backends::fixed_shape_step(empty.plan, layout16(), 32));
}

TEST(SpecGraphShape, KeysSeparateDecodeFromVerifyOfTheSameTokenCount) {
  EXPECT_NE(backends::fixed_shape_key(6, 6), backends::fixed_shape_key(6, 1));
  EXPECT_NE(backends::fixed_shape_key(6, 1), backends::fixed_shape_key(6, 2));
}

TEST(SpecGraphShape, PlainArgmaxOnlyForUnprocessedGreedy) {
  SamplingParams p;
  p.temperature = 0.0;
  EXPECT_TRUE(speculative::plain_argmax(p, 1));
  SamplingParams q = p;
  q.temperature = 0.7;
  EXPECT_FALSE(speculative::plain_argmax(q, 1));
  q = p;
  q.repetition_penalty = 1.1;
  EXPECT_FALSE(speculative::plain_argmax(q, 1));
  q = p;
  q.presence_penalty = 0.5;
  EXPECT_FALSE(speculative::plain_argmax(q, 1));
  q = p;
  q.frequency_penalty = 0.5;
  EXPECT_FALSE(speculative::plain_argmax(q, 1));
  q = p;
  q.logit_bias[3] = 1.0;
  EXPECT_FALSE(speculative::plain_argmax(q, 1));
  q = p;
  q.min_tokens = 5;
  EXPECT_FALSE(speculative::plain_argmax(q, 4));  // EOS still suppressed for the drafts
  EXPECT_TRUE(speculative::plain_argmax(q, 5));
}
