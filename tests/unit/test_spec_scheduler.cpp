// Scheduler side of speculative decoding: confidence-scheduled verify lengths (global top-budget by survival,
// minimum survival, prefixes per sequence), the ragged verify plan (anchor + drafts, logits for each), accepted
// tokens advancing num_computed with rollback of blocks past them, and rejection of inconsistent outputs.
#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "scheduler_test_util.h"

using namespace dsinfer;
using namespace dsinfer::scheduler;

namespace {

io::ModelConfig small_model() { return test::scheduler_test_model(50); }

std::unique_ptr<Scheduler> make(int64_t budget, double min_survival, bool prompts_apart = false,
                                int64_t batched_tokens = 256, int32_t admit_group = 1) {
  cache::StateCacheConfig cc;
  cc.block_size = 4;
  cc.max_model_len = 64;
  cc.max_num_seqs = 4;
  cc.num_speculative_tokens = 3;
  auto L = cache::compute_state_layout(small_model(), cc);
  EXPECT_TRUE(L.is_ok());
  cc.budget_bytes = 4 * L->slot_bytes + 100 * L->block_bytes;
  auto c = cache::StateCache::create(small_model(), cc);
  EXPECT_TRUE(c.is_ok());
  SchedulerConfig sc;
  sc.max_num_seqs = 4;
  sc.max_num_batched_tokens = batched_tokens;
  sc.eos_token_id = 0;
  sc.vocab_size = 50;
  sc.spec_budget = budget;
  sc.spec_min_survival = min_survival;
  sc.spec_prompts_apart = prompts_apart;
  sc.spec_admit_group = admit_group;
  return std::make_unique<Scheduler>(sc, std::move(*c));
}

StepOutput out(const BatchPlan& plan, int32_t i, std::vector<int32_t> toks) {
  StepOutput o;
  o.plan_index = i;
  o.seq_id = plan.seqs[size_t(i)].seq_id;
  for (int32_t t : toks) o.samples.push_back({t, 0.f, {}});
  return o;
}

}  // namespace

TEST(SpecScheduler, TopBudgetBySurvivalVerifiesPrefixesAndRollsBack) {
  auto s = make(/*budget=*/4, /*min_survival=*/0.2);
  sampling::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 20;
  std::vector<SeqId> ids;
  for (int r = 0; r < 3; ++r) {
    auto id = s->add_request({{1, 2, 3, 4, 5, 6, 7}, p});
    ASSERT_TRUE(id.is_ok());
    ids.push_back(s->seq_ids(*id)[0]);
  }
  {  // prefill: one token each
    const BatchPlan& plan = s->schedule();
    ASSERT_EQ(plan.num_seqs(), 3);
    std::vector<StepOutput> o;
    for (int32_t i = 0; i < 3; ++i) o.push_back(out(plan, i, {10 + i}));
    ASSERT_TRUE(s->update(o).is_ok());
  }
  // Drafts: A [.9 .5 .1], B [.8 .7 .6], C [.95]; >= .2 and top 4 -> C0, A0, B0, B1.
  ASSERT_TRUE(s->set_draft(ids[0], {20, 21, 22}, {0.9f, 0.5f, 0.1f}).is_ok());
  ASSERT_TRUE(s->set_draft(ids[1], {30, 31, 32}, {0.8f, 0.7f, 0.6f}).is_ok());
  ASSERT_TRUE(s->set_draft(ids[2], {40}, {0.95f}).is_ok());
  EXPECT_FALSE(s->set_draft(ids[2], {40, 41}, {0.5f, 0.6f}).is_ok());  // survival must not increase
  const BatchPlan& plan = s->schedule();
  ASSERT_EQ(plan.num_seqs(), 3);
  EXPECT_EQ(plan.seqs[0].num_spec_tokens, 1);
  EXPECT_EQ(plan.seqs[1].num_spec_tokens, 2);
  EXPECT_EQ(plan.seqs[2].num_spec_tokens, 1);
  EXPECT_EQ(plan.num_logits(), 2 + 3 + 2);
  EXPECT_EQ(plan.seqs[1].num_new_tokens, 3);
  EXPECT_EQ(std::vector<int32_t>(plan.token_ids.begin() + plan.seqs[1].token_offset,
                                 plan.token_ids.begin() + plan.seqs[1].token_offset + 3),
            (std::vector<int32_t>{11, 30, 31}));
  EXPECT_EQ(plan.positions[size_t(plan.seqs[1].token_offset + 2)], 9);
  EXPECT_EQ(plan.logits_token_index[size_t(plan.seqs[1].logits_row)], plan.seqs[1].token_offset);
  EXPECT_EQ(plan.logits_token_index[size_t(plan.seqs[1].logits_row + 2)], plan.seqs[1].token_offset + 2);
  // A draft that is not the planned one cannot be "accepted".
  std::vector<StepOutput> bad{out(plan, 0, {21, 5}), out(plan, 1, {9}), out(plan, 2, {40, 9})};
  EXPECT_FALSE(s->update(bad).is_ok());
  // A accepts its draft (+ bonus), B rejects at once (correction), C accepts (+ bonus).
  std::vector<StepOutput> o{out(plan, 0, {20, 23}), out(plan, 1, {33}), out(plan, 2, {40, 41})};
  ASSERT_TRUE(s->update(o).is_ok());
  EXPECT_EQ(s->num_computed(ids[0]), 9);  // 7 prompt + anchor + 1 accepted
  EXPECT_EQ(s->num_computed(ids[1]), 8);  // rejected drafts leave no computed positions
  EXPECT_EQ(*s->output_tokens(ids[1]), (std::vector<int32_t>{11, 33}));
  EXPECT_EQ(*s->output_tokens(ids[2]), (std::vector<int32_t>{12, 40, 41}));
  // Blocks past the committed length were released: B (8 computed, block size 4) holds 2 blocks.
  EXPECT_EQ(s->cache().free_blocks() + 3 + 2 + 3, s->cache().num_blocks());
  // Drafts were consumed: the next plan is plain decode.
  const BatchPlan& next = s->schedule();
  for (const SeqPlan& sp : next.seqs) EXPECT_EQ(sp.num_spec_tokens, 0);
}

// Near a request's end its drafts are verified whole (a uniform verify step stays a captured graph) and the tokens
// past max_tokens are dropped; the drafts' positions stay below max_model_len, and within the layout's spare rows.
TEST(SpecScheduler, DraftsAreCappedByMaxModelLenAndTheSpareRowsNotByMaxTokens) {
  auto s = make(0, 0.0);
  sampling::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 3;
  auto id = s->add_request({{1, 2, 3}, p});
  ASSERT_TRUE(id.is_ok());
  const SeqId sid = s->seq_ids(*id)[0];
  const BatchPlan& plan = s->schedule();
  ASSERT_TRUE(s->update(std::vector<StepOutput>{out(plan, 0, {9})}).is_ok());
  ASSERT_TRUE(s->set_draft(sid, {4, 5, 6, 7}, {1.f, 1.f, 1.f, 1.f}).is_ok());
  const BatchPlan& p2 = s->schedule();
  EXPECT_EQ(p2.seqs[0].num_spec_tokens, 3);  // the layout's 3 spare rows, though 2 tokens may still come
  ASSERT_TRUE(s->update(std::vector<StepOutput>{out(p2, 0, {4, 5, 6, 8})}).is_ok());
  EXPECT_EQ(s->seq_state(sid), SeqState::Finished);
  EXPECT_EQ(*s->output_tokens(sid), (std::vector<int32_t>{9, 4, 5}));  // 6 and 8 past max_tokens: dropped

  // A prompt 2 positions short of max_model_len (64): one draft fits (position 63) beside the anchor (62).
  auto t = make(0, 0.0);
  p.max_tokens = 2;
  auto id2 = t->add_request({std::vector<int32_t>(62, 1), p});
  ASSERT_TRUE(id2.is_ok());
  const SeqId sid2 = t->seq_ids(*id2)[0];
  const BatchPlan& q1 = t->schedule();
  ASSERT_TRUE(t->update(std::vector<StepOutput>{out(q1, 0, {9})}).is_ok());
  ASSERT_TRUE(t->set_draft(sid2, {4, 5, 6}, {1.f, 1.f, 1.f}).is_ok());
  const BatchPlan& q2 = t->schedule();
  EXPECT_EQ(q2.seqs[0].num_spec_tokens, 1);
  EXPECT_EQ(q2.positions.back(), 63);
}

// SchedulerConfig::spec_lookahead (the chained verify step's blocks): a verify step's sequence gets blocks for that
// many positions past the step where they are free, capped at max_model_len; without drafts, none; none where more
// sequences run than spec_lookahead_max_seqs (no such step is chained).
TEST(SpecScheduler, LookaheadBlocksForVerifySteps) {
  for (int64_t ahead : {0, 12}) {
    auto s = make(0, 0.0);
    s->set_spec_lookahead(ahead, 1);
    sampling::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 40;
    auto id = s->add_request({{1, 2, 3, 4, 5}, p});  // block size 4
    ASSERT_TRUE(id.is_ok());
    const SeqId sid = s->seq_ids(*id)[0];
    const BatchPlan& plan = s->schedule();
    EXPECT_EQ(plan.seqs[0].block_table.size(), 2u) << "a prefill takes no lookahead";
    ASSERT_TRUE(s->update(std::vector<StepOutput>{out(plan, 0, {9})}).is_ok());
    ASSERT_TRUE(s->set_draft(sid, {4, 5, 6}, {1.f, 1.f, 1.f}).is_ok());
    const BatchPlan& p2 = s->schedule();
    ASSERT_EQ(p2.seqs[0].num_spec_tokens, 3);
    // The step covers positions 5..8 (3 blocks); the lookahead 12 more: 21 positions, 6 blocks.
    EXPECT_EQ(p2.seqs[0].block_table.size(), ahead ? 6u : 3u) << "lookahead " << ahead;
  }
  auto s = make(0, 0.0);
  s->set_spec_lookahead(1000, 1);  // capped at max_model_len (64): 16 blocks
  sampling::SamplingParams p;
  p.temperature = 0;
  auto id = s->add_request({{1, 2, 3, 4, 5}, p});
  ASSERT_TRUE(id.is_ok());
  const SeqId sid = s->seq_ids(*id)[0];
  const BatchPlan& plan = s->schedule();
  ASSERT_TRUE(s->update(std::vector<StepOutput>{out(plan, 0, {9})}).is_ok());
  ASSERT_TRUE(s->set_draft(sid, {4, 5, 6}, {1.f, 1.f, 1.f}).is_ok());
  EXPECT_EQ(s->schedule().seqs[0].block_table.size(), 16u);
  for (int32_t max_seqs : {1, 2}) {  // two sequences verifying drafts
    auto two = make(0, 0.0);
    two->set_spec_lookahead(12, max_seqs);
    sampling::SamplingParams q;
    q.temperature = 0;
    q.max_tokens = 40;
    std::vector<SeqId> sids;
    for (int r = 0; r < 2; ++r) {
      auto rid = two->add_request({{1, 2, 3, 4, 5}, q});
      ASSERT_TRUE(rid.is_ok());
      sids.push_back(two->seq_ids(*rid)[0]);
    }
    const BatchPlan& pre = two->schedule();
    ASSERT_EQ(pre.seqs.size(), 2u);
    ASSERT_TRUE(two->update(std::vector<StepOutput>{out(pre, 0, {9}), out(pre, 1, {9})}).is_ok());
    for (SeqId sid2 : sids) ASSERT_TRUE(two->set_draft(sid2, {4, 5, 6}, {1.f, 1.f, 1.f}).is_ok());
    const BatchPlan& v = two->schedule();
    ASSERT_EQ(v.seqs.size(), 2u);
    for (const auto& sp : v.seqs) {
      ASSERT_EQ(sp.num_spec_tokens, 3);
      EXPECT_EQ(sp.block_table.size(), max_seqs >= 2 ? 6u : 3u) << "max_seqs " << max_seqs;
    }
  }
}

// SchedulerConfig::spec_prompts_apart: while sequences hold drafts and prompt tokens wait, a step runs either the
// prompt tokens (with the decoding sequences that hold no drafts) or the verify rows, never both, alternating prompts
// first; a sequence that waits keeps its drafts. A prompt of 22 tokens with 8 tokens a step: chunks and verify steps
// take turns. Without the option (or with no prompt waiting) the step mixes them as before.
TEST(SpecScheduler, PromptsApartFromVerifySteps) {
  for (bool apart : {true, false}) {
    SCOPED_TRACE(apart ? "apart" : "mixed");
    auto s = make(0, 0.0, apart, /*batched_tokens=*/8);
    sampling::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 30;
    std::vector<SeqId> ids;
    for (int r = 0; r < 2; ++r) ids.push_back(s->seq_ids(*s->add_request({{1, 2, 3}, p}))[0]);
    {  // both prompts in one step (nothing to verify yet: mixed)
      const BatchPlan& plan = s->schedule();
      ASSERT_EQ(plan.num_seqs(), 2);
      ASSERT_TRUE(s->update(std::vector<StepOutput>{out(plan, 0, {10}), out(plan, 1, {11})}).is_ok());
    }
    ids.push_back(s->seq_ids(*s->add_request({std::vector<int32_t>(22, 5), p}))[0]);
    auto kinds = [&](const BatchPlan& plan) {
      std::string k;
      for (const SeqPlan& sp : plan.seqs)
        k += sp.seq_id == ids[2] ? fmt::format("P{}", sp.num_new_tokens) : fmt::format("V{}", sp.num_spec_tokens);
      return k;
    };
    std::vector<std::string> steps;
    for (int step = 0; step < 5; ++step) {
      // Sequences 0 and 1 hold 2 drafts whenever they have none (the drafter proposes after each of their steps).
      for (int i = 0; i < 2; ++i)
        if (s->seq_state(ids[size_t(i)]) == SeqState::Decoding) (void)s->set_draft(ids[size_t(i)], {20, 21}, {.9f, .8f});
      const BatchPlan& plan = s->schedule();
      steps.push_back(kinds(plan));
      std::vector<StepOutput> o;
      for (int32_t i = 0; i < plan.num_seqs(); ++i) {
        const SeqPlan& sp = plan.seqs[size_t(i)];
        if (!sp.needs_logits) continue;
        o.push_back(out(plan, i, sp.num_spec_tokens > 0 ? std::vector<int32_t>{20, 22} : std::vector<int32_t>{12}));
      }
      ASSERT_TRUE(s->update(o).is_ok());
    }
    if (apart) {  // 22 prompt tokens, 8 a step: P8, verify, P8, verify, P6 (the budget's rest: 8 - 0)
      EXPECT_EQ(steps, (std::vector<std::string>{"P8", "V2V2", "P8", "V2V2", "P6"}));
    } else {  // the verify rows (2 x 3 tokens) first, the prompt in what is left of the 8 tokens
      EXPECT_EQ(steps, (std::vector<std::string>{"V2V2P2", "V2V2P2", "V2V2P2", "V2V2P2", "V2V2P2"}));
    }
  }
}

// SchedulerConfig::spec_admit_group: while sequences verify, waiting prompts are admitted once min(waiting, group)
// slots are free, together in one prompt step. 4 slots, a group of 2: with 3 running and 2 waiting (1 slot free) the
// steps only verify; once one of them finishes, both waiting prompts run in one step, then the verify step takes
// every decoding sequence (the new ones without drafts decode one token).
TEST(SpecScheduler, PromptsAreAdmittedInGroupsWhileSequencesVerify) {
  auto s = make(0, 0.0, /*prompts_apart=*/true, 256, /*admit_group=*/2);
  sampling::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 30;
  sampling::SamplingParams short_p = p;
  short_p.max_tokens = 2;
  std::vector<SeqId> ids;
  ids.push_back(s->seq_ids(*s->add_request({{1, 2, 3}, short_p}))[0]);
  for (int r = 0; r < 2; ++r) ids.push_back(s->seq_ids(*s->add_request({{1, 2, 3}, p}))[0]);
  {
    const BatchPlan& plan = s->schedule();
    ASSERT_EQ(plan.num_seqs(), 3);
    ASSERT_TRUE(
        s->update(std::vector<StepOutput>{out(plan, 0, {10}), out(plan, 1, {11}), out(plan, 2, {12})}).is_ok());
  }
  for (int r = 0; r < 2; ++r) ids.push_back(s->seq_ids(*s->add_request({{4, 5, 6, 7}, p}))[0]);
  auto step = [&]() {
    for (int i = 0; i < 3; ++i)
      if (s->seq_state(ids[size_t(i)]) == SeqState::Decoding) (void)s->set_draft(ids[size_t(i)], {20, 21}, {.9f, .8f});
    const BatchPlan& plan = s->schedule();
    std::string k;
    std::vector<StepOutput> o;
    for (int32_t i = 0; i < plan.num_seqs(); ++i) {
      const SeqPlan& sp = plan.seqs[size_t(i)];
      const size_t who = size_t(std::find(ids.begin(), ids.end(), sp.seq_id) - ids.begin());
      const int32_t n = sp.is_prefill ? sp.num_new_tokens : sp.num_spec_tokens;
      k += fmt::format("{}{}{} ", char('A' + who), sp.is_prefill ? "P" : "V", n);
      o.push_back(out(plan, i, sp.num_spec_tokens > 0 ? std::vector<int32_t>{20, 22} : std::vector<int32_t>{13}));
    }
    EXPECT_TRUE(s->update(o).is_ok());
    return k;
  };
  EXPECT_EQ(step(), "AV2 BV2 CV2 ");  // 1 slot free for 2 waiting: verify only (A ends: 2 tokens)
  EXPECT_EQ(s->seq_state(ids[0]), SeqState::Finished);
  EXPECT_EQ(step(), "DP4 EP4 ");      // 2 free: both prompts in one step, B and C keep their drafts
  EXPECT_EQ(step(), "BV2 CV2 DV0 EV0 ");
}
