// The chained verify step (speculative/chained_step.h): which rounds it follows, what the device writes into it
// (the CPU reference of the fill kernel, backends::fill_chained_step_ref) against what the host expects after the
// round (settle_chained_step), and which next plans it is.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/step/step_plan.h"
#include "dsinfer/sampling_params.h"
#include "speculative/chained_step.h"

using namespace dsinfer;
using speculative::ChainedStep;
using speculative::RoundResult;

namespace {

constexpr int32_t kK = 5, kBlock = 5;
constexpr int64_t kBlockSize = 128, kMaxLen = 4096;

// One decoding sequence verifying `L` drafts from position P: the plan of a one-wait round (as the scheduler lays
// out a verify step: tokens anchor + drafts at positions P.., a logits row per token).
struct Round {
  std::vector<cache::BlockId> table{7, 3};
  std::vector<int32_t> outputs = std::vector<int32_t>(40, 1);
  sampling::SamplingParams params;
  scheduler::BatchPlan plan;
  Round(int64_t P, int32_t L, int64_t max_tokens = 256) {
    params.max_tokens = max_tokens;
    plan.clear();
    plan.step = 9;
    scheduler::SeqPlan sp;
    sp.seq_id = 4;
    sp.slot = 2;
    sp.start_pos = P;
    sp.num_new_tokens = 1 + L;
    sp.num_spec_tokens = L;
    sp.needs_logits = true;
    sp.logits_row = 0;
    sp.block_table = table;
    sp.params = &params;
    sp.output_tokens = outputs;
    for (int32_t j = 0; j <= L; ++j) {
      plan.token_ids.push_back(100 + j);
      plan.positions.push_back(P + j);
      plan.logits_token_index.push_back(j);
    }
    plan.cu_seqlens.push_back(1 + L);
    plan.seqs.push_back(sp);
  }
};

RoundResult result(int32_t accepted) {
  RoundResult r;
  r.accepted = accepted;
  for (int32_t t = 0; t <= accepted; ++t) r.tokens.push_back(200 + t);
  for (int32_t t = 0; t < kBlock; ++t) r.proposal.tokens.push_back(300 + t);
  return r;
}

// The host's next plan when the round accepted `a`: the scheduler's verify step of the k drafts after it.
scheduler::BatchPlan next_plan(const Round& r, const RoundResult& res, const std::vector<cache::BlockId>& table) {
  scheduler::BatchPlan p;
  p.clear();
  scheduler::SeqPlan sp = r.plan.seqs[0];
  sp.start_pos = r.plan.seqs[0].start_pos + 1 + res.accepted;
  sp.num_new_tokens = 1 + kK;
  sp.num_spec_tokens = kK;
  sp.block_table = table;
  p.token_ids.push_back(res.tokens.back());
  for (int32_t j = 0; j < kK; ++j) p.token_ids.push_back(res.proposal.tokens[size_t(j)]);
  for (int32_t j = 0; j <= kK; ++j) {
    p.positions.push_back(sp.start_pos + j);
    p.logits_token_index.push_back(j);
  }
  p.cu_seqlens.push_back(1 + kK);
  p.seqs.push_back(sp);
  return p;
}

}  // namespace

TEST(ChainedStep, LaunchesTheRoundsSequenceWithAWholeBlockAtItsStart) {
  Round r(40, 3);
  auto c = speculative::chain_after(r.plan, kK, kBlock, kBlockSize, kMaxLen, true);
  ASSERT_TRUE(c.has_value());
  const scheduler::BatchPlan& p = c->plan;
  ASSERT_EQ(p.num_seqs(), 1);
  EXPECT_EQ(p.num_tokens(), 1 + kK);
  EXPECT_EQ(p.num_logits(), 1 + kK);
  EXPECT_EQ(p.seqs[0].start_pos, 40);
  EXPECT_EQ(p.seqs[0].num_spec_tokens, kK);
  EXPECT_EQ(p.positions, (std::vector<int64_t>{40, 41, 42, 43, 44, 45}));
  EXPECT_EQ(p.cu_seqlens, (std::vector<int32_t>{0, 6}));
  for (int32_t t : p.token_ids) EXPECT_EQ(t, 100);  // a valid placeholder
  ASSERT_EQ(c->seqs.size(), 1u);
  EXPECT_EQ(c->seqs[0].table, r.table);
}

TEST(ChainedStep, TheDeviceFillWritesWhatTheHostExpects) {
  for (int32_t a = 0; a <= 3; ++a) {
    Round r(40, 3);
    auto c = speculative::chain_after(r.plan, kK, kBlock, kBlockSize, kMaxLen, true);
    ASSERT_TRUE(c.has_value());
    // The device's side: the fill kernel's reference over the launched arrays and the round's output arrays.
    const RoundResult res = result(a);
    std::vector<int32_t> tokens = c->plan.token_ids, accepted{a}, verified(kBlock + 1, -1);
    std::vector<int64_t> pos = c->plan.positions, start{c->plan.seqs[0].start_pos};
    for (size_t t = 0; t < res.tokens.size(); ++t) verified[t] = res.tokens[t];
    backends::fill_chained_step_ref(tokens.data(), pos.data(), start.data(), 1, 1 + kK, accepted.data(),
                                    verified.data(), res.proposal.tokens.data(), kBlock);
    // The host's side.
    speculative::settle_chained_step(*c, std::vector<RoundResult>{res});
    ASSERT_TRUE(c->settled);
    EXPECT_EQ(start[0], 40 + 1 + a);
    EXPECT_EQ(c->seqs[0].start, start[0]);
    EXPECT_EQ(c->seqs[0].tokens, tokens);
    for (int32_t j = 0; j <= kK; ++j) EXPECT_EQ(pos[size_t(j)], start[0] + j);
    EXPECT_TRUE(speculative::is_chained_step(*c, next_plan(r, res, r.table), kBlockSize)) << "accepted " << a;
  }
}

TEST(ChainedStep, AnotherNextPlanIsNotTheLaunchedStep) {
  Round r(40, 3);
  auto c = speculative::chain_after(r.plan, kK, kBlock, kBlockSize, kMaxLen, true);
  ASSERT_TRUE(c.has_value());
  const RoundResult res = result(2);
  speculative::settle_chained_step(*c, std::vector<RoundResult>{res});
  const scheduler::BatchPlan same = next_plan(r, res, r.table);
  ASSERT_TRUE(speculative::is_chained_step(*c, same, kBlockSize));
  std::vector<cache::BlockId> longer = r.table;
  longer.push_back(12);  // a block beyond the positions the step writes changes nothing
  EXPECT_TRUE(speculative::is_chained_step(*c, next_plan(r, res, longer), kBlockSize));

  scheduler::BatchPlan p = same;
  p.seqs[0].start_pos += 1;  // another acceptance
  EXPECT_FALSE(speculative::is_chained_step(*c, p, kBlockSize));
  p = same;
  p.token_ids[3] = 7;  // another draft
  EXPECT_FALSE(speculative::is_chained_step(*c, p, kBlockSize));
  p = same;
  p.state_copies.push_back({});  // a prefix-cache restore must come before the step
  EXPECT_FALSE(speculative::is_chained_step(*c, p, kBlockSize));
  const std::vector<cache::BlockId> moved{5, 3};  // another block under the written positions
  EXPECT_FALSE(speculative::is_chained_step(*c, next_plan(r, res, moved), kBlockSize));
  // The cost model's cut: fewer drafts verified.
  Round cut(40, 3);
  scheduler::BatchPlan q = next_plan(cut, res, cut.table);
  q.seqs[0].num_new_tokens = 3;
  q.seqs[0].num_spec_tokens = 2;
  q.token_ids.resize(3);
  q.positions.resize(3);
  q.logits_token_index.resize(3);
  q.cu_seqlens = {0, 3};
  EXPECT_FALSE(speculative::is_chained_step(*c, q, kBlockSize));
  // Not settled (the round's results unknown): never.
  auto fresh = speculative::chain_after(r.plan, kK, kBlock, kBlockSize, kMaxLen, true);
  EXPECT_FALSE(speculative::is_chained_step(*fresh, same, kBlockSize));
}

TEST(ChainedStep, NoneWhereTheRoundMayEndABlockOrTheNextRoundIsShorter) {
  // Positions 124..127 verified: committing up to 4 ends block 0 at 128 (a boundary snapshot sees the state), which
  // matters only where the prefix cache keeps snapshots.
  EXPECT_FALSE(speculative::chain_after(Round(124, 3).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  EXPECT_TRUE(speculative::chain_after(Round(124, 3).plan, kK, kBlock, kBlockSize, kMaxLen, false).has_value());
  EXPECT_TRUE(speculative::chain_after(Round(123, 3).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  // The moved step past the table's two blocks (256 positions): 240 + 6 + 1 + 5 = 252 fits, 245 + 12 does not.
  EXPECT_TRUE(speculative::chain_after(Round(240, 3).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  EXPECT_FALSE(speculative::chain_after(Round(245, 3).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  EXPECT_FALSE(speculative::chain_after(Round(40, 3).plan, kK, kBlock, kBlockSize, 50, true).has_value());
  // max_tokens: 40 outputs + 3 this round + 5 next + 2 = 50.
  EXPECT_TRUE(speculative::chain_after(Round(40, 3, 50).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  EXPECT_FALSE(speculative::chain_after(Round(40, 3, 49).plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
  // More drafts than the block, or two sequences (kChainMaxSeqs).
  EXPECT_FALSE(speculative::chain_after(Round(40, 3).plan, kBlock + 1, kBlock, kBlockSize, kMaxLen, true).has_value());
  Round two(40, 3);
  two.plan.seqs.push_back(two.plan.seqs[0]);
  EXPECT_FALSE(speculative::chain_after(two.plan, kK, kBlock, kBlockSize, kMaxLen, true).has_value());
}
