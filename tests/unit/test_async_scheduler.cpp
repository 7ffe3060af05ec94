// Scheduler halves of asynchronous steps (advance / resolve): placeholder tokens planned as token_fills, stop
// conditions applied one step late, the surplus token of a finished or aborted sequence dropped, max_tokens seen
// ahead (no surplus step), and a retired sequence's slot kept until the last step that used it is resolved.
#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "scheduler_test_util.h"
#include "test_util.h"

using namespace dsinfer;
using namespace dsinfer::scheduler;

namespace {

constexpr int64_t kVocab = 50;
constexpr int64_t kEos = 0;

std::unique_ptr<Scheduler> make_scheduler() {
  const io::ModelConfig c = test::scheduler_test_model(kVocab);
  cache::StateCacheConfig cc;
  cc.block_size = 4;
  cc.max_model_len = 64;
  cc.max_num_seqs = 4;
  const auto L = test::unwrap(cache::compute_state_layout(c, cc));
  cc.budget_bytes = 4 * L.slot_bytes + 64 * L.block_bytes;
  SchedulerConfig sc;
  sc.max_num_seqs = 4;
  sc.eos_token_id = kEos;
  sc.vocab_size = kVocab;
  return std::make_unique<Scheduler>(sc, test::unwrap(cache::StateCache::create(c, cc)));
}

RequestId add(Scheduler& s, std::vector<int32_t> prompt, int64_t max_tokens) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  return test::unwrap(s.add_request(std::move(r)));
}

StepOutput out(SeqId id, int32_t token) {
  StepOutput o;
  o.seq_id = id;
  o.samples.push_back({token, 0.0f, {}});
  return o;
}

const SeqPlan* find(const BatchPlan& p, SeqId id) {
  for (const SeqPlan& sp : p.seqs)
    if (sp.seq_id == id) return &sp;
  return nullptr;
}

}  // namespace

TEST(AsyncScheduler, PlaceholdersFillsLateStopsAndDeferredSlots) {
  auto s = make_scheduler();
  const SeqId a = s->seq_ids(add(*s, {5, 6, 7}, 10))[0];
  const RequestId rb = add(*s, {8, 9}, 10);
  const SeqId b = s->seq_ids(rb)[0];
  const int32_t slots0 = s->cache().free_slots();

  const BatchPlan& p1 = s->schedule();
  ASSERT_EQ(p1.num_seqs(), 2);
  EXPECT_TRUE(p1.token_fills.empty());
  const uint64_t step1 = p1.step;
  const int32_t row_a = find(p1, a)->logits_row, row_b = find(p1, b)->logits_row;
  ASSERT_TRUE(s->advance().is_ok());
  EXPECT_EQ(*s->output_tokens(a), std::vector<int32_t>{kPendingToken});
  EXPECT_TRUE(s->awaits(a, step1));

  // Step 2 is planned before step 1's tokens are known: one placeholder each, filled from step 1's rows.
  const BatchPlan& p2 = s->schedule();
  ASSERT_EQ(p2.num_seqs(), 2);
  ASSERT_EQ(p2.token_fills.size(), 2u);
  for (const TokenFill& f : p2.token_fills) EXPECT_EQ(p2.token_ids[size_t(f.token_index)], kPendingToken);
  EXPECT_EQ(p2.token_fills[0].token_index, find(p2, a)->token_offset);
  EXPECT_EQ(p2.token_fills[0].sample_row, row_a);
  EXPECT_EQ(p2.token_fills[1].sample_row, row_b);
  const uint64_t step2 = p2.step;

  // Step 1 resolves: a samples EOS and finishes, one step late; it is already in the launched step 2.
  const std::vector<StepOutput> r1 = {out(a, int32_t(kEos)), out(b, 12)};
  ASSERT_TRUE(s->resolve(step1, r1).is_ok());
  ASSERT_EQ(s->updates().size(), 2u);
  EXPECT_TRUE(s->updates()[0].finished);
  EXPECT_EQ(*s->output_tokens(b), std::vector<int32_t>{12});
  EXPECT_EQ(s->seq_state(a), SeqState::Finished);
  EXPECT_EQ(s->cache().free_slots(), slots0 - 2) << "a's slot must stay held while step 2 may write it";
  ASSERT_TRUE(s->advance().is_ok());

  const BatchPlan& p3 = s->schedule();
  ASSERT_EQ(p3.num_seqs(), 1);
  EXPECT_EQ(p3.seqs[0].seq_id, b);
  const uint64_t step3 = p3.step;
  // Step 2 resolves: a's surplus token is dropped; now its slot is free.
  const std::vector<StepOutput> r2 = {out(a, 33), out(b, 13)};
  ASSERT_TRUE(s->resolve(step2, r2).is_ok());
  ASSERT_EQ(s->updates().size(), 1u);
  EXPECT_EQ(s->updates()[0].seq_id, b);
  EXPECT_EQ(s->cache().free_slots(), slots0 - 1);
  ASSERT_TRUE(s->advance().is_ok());

  // Aborted while its token is in flight: the placeholder goes, the late output is dropped, the slot waits.
  ASSERT_TRUE(s->abort(rb).is_ok());
  EXPECT_FALSE(s->awaits(b, step3));
  EXPECT_EQ(s->cache().free_slots(), slots0 - 1);
  EXPECT_TRUE(s->schedule().empty());
  const std::vector<StepOutput> r3 = {out(b, 14)};
  ASSERT_TRUE(s->resolve(step3, r3).is_ok());
  EXPECT_EQ(s->updates().size(), 0u);
  EXPECT_EQ(s->cache().free_slots(), slots0);
  EXPECT_FALSE(s->has_unfinished());
}

TEST(AsyncScheduler, MaxTokensInFlightIsNotPlannedAgain) {
  auto s = make_scheduler();
  const SeqId a = s->seq_ids(add(*s, {5, 6, 7}, 2))[0];
  const BatchPlan& p1 = s->schedule();
  const uint64_t step1 = p1.step;
  ASSERT_TRUE(s->advance().is_ok());
  const BatchPlan& p2 = s->schedule();  // token 2 of 2 is planned
  ASSERT_EQ(p2.num_seqs(), 1);
  const uint64_t step2 = p2.step;
  const std::vector<StepOutput> r1 = {out(a, 21)};
  ASSERT_TRUE(s->resolve(step1, r1).is_ok());
  ASSERT_TRUE(s->advance().is_ok());
  // Its second token is in flight and is its last: no surplus step is planned.
  EXPECT_TRUE(s->schedule().empty());
  EXPECT_TRUE(s->has_unfinished());
  const std::vector<StepOutput> r2 = {out(a, 22)};
  ASSERT_TRUE(s->resolve(step2, r2).is_ok());
  ASSERT_EQ(s->updates().size(), 1u);
  EXPECT_TRUE(s->updates()[0].finished);
  EXPECT_EQ(s->updates()[0].finish_reason, sampling::FinishReason::Length);
  EXPECT_EQ(*s->output_tokens(a), (std::vector<int32_t>{21, 22}));
  EXPECT_FALSE(s->has_unfinished());
}

TEST(AsyncScheduler, BadResolveIsRejectedAndAdvanceNeedsResolvedTokens) {
  auto s = make_scheduler();
  const SeqId a = s->seq_ids(add(*s, {5, 6, 7}, 10))[0];
  const uint64_t step1 = s->schedule().step;
  ASSERT_TRUE(s->advance().is_ok());
  const std::vector<StepOutput> bad = {out(a, int32_t(kVocab))};
  EXPECT_FALSE(s->resolve(step1, bad).is_ok());
  // The next plan is scheduled but its predecessor is unresolved: advancing it would stack two placeholders.
  ASSERT_EQ(s->schedule().num_seqs(), 1);
  EXPECT_FALSE(s->advance().is_ok());
  const std::vector<StepOutput> good = {out(a, 7)};
  ASSERT_TRUE(s->resolve(step1, good).is_ok());
  EXPECT_TRUE(s->advance().is_ok());
}
