// DP attention's bookkeeping, shared by the cpu and cuda parallel runners (docs/multi_gpu.md "DP attention"):
// parallel::plan_dispatch (which routed pair goes to which rank, in which packed order, which local expert it names
// there, where its output lands) against a case worked by hand and against its invariants on random routings;
// runner::split_plan_by_rank and runner::localize_copy (a step's plan and its state copies mapped to the ranks that
// hold the slots and blocks) on a hand-built plan, with the refusals naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "parallel/dispatch_plan.h"
#include "runner/rank_split.h"

namespace {

using dsinfer::Status;
using dsinfer::parallel::plan_dispatch;

TEST(DispatchPlan, HandWorkedCase) {
  // 3 tokens, top-2, 8 experts over 2 ranks (rank 0: 0..3, rank 1: 4..7).
  const std::vector<int32_t> idx = {5, 1, 0, 7, 3, 4};
  auto p = plan_dispatch(idx, 2, 8, 2);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->send_count, (std::vector<int64_t>{3, 3}));
  // Rank 0's run: (0,1) e1, (1,0) e0, (2,0) e3; rank 1's: (0,0) e5, (1,1) e7, (2,1) e4 (local = e - 4).
  EXPECT_EQ(p->send_token, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(p->send_expert, (std::vector<int32_t>{1, 0, 3, 1, 3, 0}));
  EXPECT_EQ(p->pos_of, (std::vector<int32_t>{3, 0, 1, 4, 2, 5}));
  EXPECT_EQ(p->pairs(), 6);
}

TEST(DispatchPlan, NoTokensSendsNothing) {
  auto p = plan_dispatch({}, 6, 16, 4);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->send_count, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(p->pairs(), 0);
  EXPECT_TRUE(p->pos_of.empty());
}

TEST(DispatchPlan, InvariantsOnRandomRoutings) {
  std::mt19937 rng(7);
  for (int32_t world : {1, 2, 4, 8}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t E = 64, k = 6, T = int64_t(rng() % 40), per = E / world;
      std::vector<int32_t> idx(size_t(T * k));
      for (auto& e : idx) e = int32_t(rng() % E);
      auto p = plan_dispatch(idx, k, E, world);
      ASSERT_TRUE(p.is_ok()) << p.status().message();
      ASSERT_EQ(p->pairs(), T * k);
      int64_t total = 0;
      for (int64_t c : p->send_count) total += c;
      EXPECT_EQ(total, T * k);
      // Every pair exactly once, at a position inside its destination's run, naming its expert locally there.
      std::vector<int> seen(size_t(T * k), 0);
      for (int64_t a = 0; a < T * k; ++a) {
        const int32_t at = p->pos_of[size_t(a)], dest = idx[size_t(a)] / int32_t(per);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, T * k);
        ++seen[size_t(at)];
        int64_t start = 0;
        for (int32_t q = 0; q < dest; ++q) start += p->send_count[size_t(q)];
        EXPECT_GE(at, start);
        EXPECT_LT(at, start + p->send_count[size_t(dest)]);
        EXPECT_EQ(p->send_token[size_t(at)], a / k);
        EXPECT_EQ(p->send_expert[size_t(at)] + dest * per, idx[size_t(a)]);
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
      // Within a destination's run, pairs keep (token, slot) order.
      std::vector<int64_t> order(size_t(T * k));
      for (int64_t a = 0; a < T * k; ++a) order[size_t(p->pos_of[size_t(a)])] = a;
      for (int64_t i = 1; i < T * k; ++i) {
        if (idx[size_t(order[size_t(i)])] / per == idx[size_t(order[size_t(i - 1)])] / per) {
          EXPECT_LT(order[size_t(i - 1)], order[size_t(i)]);
        }
      }
    }
  }
}

TEST(DispatchPlan, RefusalsNameTheProblem) {
  auto bad = plan_dispatch(std::vector<int32_t>{0, 9}, 2, 8, 2);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("token 0 slot 1 routes to expert 9 outside [0, 8)"), std::string::npos)
      << bad.status().message();
  auto uneven = plan_dispatch(std::vector<int32_t>{0, 1}, 2, 6, 4);
  ASSERT_FALSE(uneven.is_ok());
  EXPECT_NE(uneven.status().message().find("6 experts cannot be split over 4 ranks"), std::string::npos);
  auto ragged = plan_dispatch(std::vector<int32_t>{0, 1, 2}, 2, 8, 2);
  ASSERT_FALSE(ragged.is_ok());
  EXPECT_NE(ragged.status().message().find("not whole rows of top-k 2"), std::string::npos);
}

// A plan of three sequences over 2 ranks of 2 slots / 4 blocks each: seq A on rank 1 (slot 3, blocks 5, 6), seq B on
// rank 0 (slot 0, block 1), seq C on rank 1 (slot 2, block 4); logits for A's last token, B's two, C's last.
struct PlanFixture {
  std::vector<std::vector<dsinfer::cache::BlockId>> tables = {{5, 6}, {1}, {4}};
  dsinfer::scheduler::BatchPlan plan;
  PlanFixture() {
    plan.clear();
    plan.step = 11;
    const int32_t slots[3] = {3, 0, 2}, lens[3] = {3, 2, 1};
    for (int s = 0; s < 3; ++s) {
      dsinfer::scheduler::SeqPlan sp;
      sp.seq_id = dsinfer::scheduler::SeqId(s + 1);
      sp.slot = slots[s];
      sp.num_new_tokens = lens[s];
      sp.token_offset = plan.num_tokens();
      sp.needs_logits = true;
      sp.block_table = tables[size_t(s)];
      for (int i = 0; i < lens[s]; ++i) {
        plan.token_ids.push_back(100 * (s + 1) + i);
        plan.positions.push_back(10 + i);
      }
      plan.cu_seqlens.push_back(plan.num_tokens());
      plan.seqs.push_back(sp);
    }
    plan.seqs[0].logits_row = 0;
    plan.seqs[1].logits_row = 1;
    plan.seqs[2].logits_row = 3;
    plan.logits_token_index = {2, 3, 4, 5};
  }
};

TEST(RankSplit, PlanGoesToTheRanksHoldingTheSlots) {
  PlanFixture f;
  dsinfer::runner::RankPlans out;
  ASSERT_TRUE(dsinfer::runner::split_plan_by_rank(f.plan, 2, 2, 4, out).is_ok());
  const auto& r0 = out.plans[0];
  const auto& r1 = out.plans[1];
  EXPECT_EQ(r0.step, 11);
  ASSERT_EQ(r0.seqs.size(), 1u);
  EXPECT_EQ(r0.seqs[0].seq_id, 2u);
  EXPECT_EQ(r0.seqs[0].slot, 0);
  EXPECT_EQ(std::vector<dsinfer::cache::BlockId>(r0.seqs[0].block_table.begin(), r0.seqs[0].block_table.end()),
            (std::vector<dsinfer::cache::BlockId>{1}));
  EXPECT_EQ(r0.token_ids, (std::vector<int32_t>{200, 201}));
  EXPECT_EQ(r0.logits_token_index, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.rows[0], (std::vector<int32_t>{1, 2}));
  ASSERT_EQ(r1.seqs.size(), 2u);
  EXPECT_EQ(r1.seqs[0].slot, 1);  // global 3 - 2
  EXPECT_EQ(std::vector<dsinfer::cache::BlockId>(r1.seqs[0].block_table.begin(), r1.seqs[0].block_table.end()),
            (std::vector<dsinfer::cache::BlockId>{1, 2}));
  EXPECT_EQ(r1.seqs[1].slot, 0);
  EXPECT_EQ(r1.seqs[1].token_offset, 3);
  EXPECT_EQ(r1.token_ids, (std::vector<int32_t>{100, 101, 102, 300}));
  EXPECT_EQ(r1.cu_seqlens.back(), 4);
  EXPECT_EQ(r1.logits_token_index, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(r1.seqs[0].logits_row, 0);
  EXPECT_EQ(r1.seqs[1].logits_row, 1);
  EXPECT_EQ(out.rows[1], (std::vector<int32_t>{0, 3}));
  // Over 4 ranks of 1 slot / 2 blocks, seq A (slot 3: rank 3) holds rank 2's blocks 5, 6: refused. With blocks 6,
  // 7 it fits, and rank 1 (no sequence) gets an empty plan of the same step.
  EXPECT_FALSE(dsinfer::runner::split_plan_by_rank(f.plan, 4, 1, 2, out).is_ok());
  PlanFixture g;
  g.tables = {{6, 7}, {1}, {4}};
  for (size_t s = 0; s < 3; ++s) g.plan.seqs[s].block_table = g.tables[s];
  ASSERT_TRUE(dsinfer::runner::split_plan_by_rank(g.plan, 4, 1, 2, out).is_ok());
  EXPECT_EQ(out.plans[1].num_tokens(), 0);
  EXPECT_EQ(out.plans[1].step, 11);
  EXPECT_TRUE(out.rows[1].empty());
}

TEST(RankSplit, RefusalsNameTheSequence) {
  PlanFixture f;
  f.tables[2] = {1};  // seq C (slot 2, rank 1) with rank 0's block
  f.plan.seqs[2].block_table = f.tables[2];
  dsinfer::runner::RankPlans out;
  Status st = dsinfer::runner::split_plan_by_rank(f.plan, 2, 2, 4, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("sequence 3 (rank 1) has block 1 of another rank"), std::string::npos) << st.message();
  PlanFixture g;
  g.plan.seqs[1].slot = 9;
  st = dsinfer::runner::split_plan_by_rank(g.plan, 2, 2, 4, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("sequence 2 has slot 9"), std::string::npos) << st.message();
  PlanFixture h;
  h.plan.token_fills.push_back({});
  EXPECT_FALSE(dsinfer::runner::split_plan_by_rank(h.plan, 2, 2, 4, out).is_ok());
}

// Device sampling with DP attention (asynchronous steps): each rank samples its own logits rows, and the next step's
// token fills go to their sequences' ranks with local token indices and the rows of that rank's sampling.
TEST(RankSplit, SampleRowsAndTokenFillsGoToTheirRanks) {
  using dsinfer::runner::RankRow;
  PlanFixture f;
  dsinfer::runner::RankPlans split;
  ASSERT_TRUE(dsinfer::runner::split_plan_by_rank(f.plan, 2, 2, 4, split).is_ok());
  ASSERT_EQ(split.row_of.size(), 4u);  // global logits rows 0..3: A (rank 1), B x 2 (rank 0), C (rank 1)
  EXPECT_EQ(split.row_of[0].rank, 1);
  EXPECT_EQ(split.row_of[0].row, 0);
  EXPECT_EQ(split.row_of[2].rank, 0);
  EXPECT_EQ(split.row_of[2].row, 1);
  EXPECT_EQ(split.row_of[3].row, 1);
  dsinfer::sampling::PackedRows rows;
  rows.clear(10);
  for (int32_t g : {3, 1, 0}) {
    dsinfer::ops::SampleRowDesc d;
    d.logits_row = g;
    d.top_k = 7 + g;  // tells the rows apart
    d.bias_begin = 1;
    d.bias_count = 1;
    rows.rows.push_back(d);
  }
  rows.entries.resize(3);
  std::vector<dsinfer::sampling::PackedRows> parts;
  std::vector<RankRow> where;
  ASSERT_TRUE(dsinfer::runner::split_sample_rows(rows, split, parts, where).is_ok());
  ASSERT_EQ(parts.size(), 2u);
  ASSERT_EQ(parts[0].rows.size(), 1u);
  EXPECT_EQ(parts[0].rows[0].top_k, 8);  // global row 1: B's first, rank 0's row 0
  EXPECT_EQ(parts[0].rows[0].logits_row, 0);
  ASSERT_EQ(parts[1].rows.size(), 2u);
  EXPECT_EQ(parts[1].rows[0].top_k, 10);  // global row 3: C, rank 1's row 1
  EXPECT_EQ(parts[1].rows[0].logits_row, 1);
  EXPECT_EQ(parts[1].rows[1].logits_row, 0);
  for (const auto& p : parts) {
    EXPECT_EQ(p.vocab(), 10);
    EXPECT_EQ(p.entries.size(), 3u);  // whole: the rows' entry indices hold
    EXPECT_EQ(p.rows.empty() ? 1 : p.rows[0].bias_begin, 1);
  }
  ASSERT_EQ(where.size(), 3u);
  EXPECT_EQ(where[0].rank, 1);
  EXPECT_EQ(where[0].row, 0);
  EXPECT_EQ(where[1].rank, 0);
  EXPECT_EQ(where[1].row, 0);
  EXPECT_EQ(where[2].rank, 1);
  EXPECT_EQ(where[2].row, 1);
  const std::vector<RankRow> sampled = where;
  rows.rows[1].logits_row = 4;
  Status st = dsinfer::runner::split_sample_rows(rows, split, parts, where);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("sampling row 1 names logits row 4"), std::string::npos) << st.message();

  // Next step: C's token (flat 5; rank 1's token 3) from row 0 of that sampling (rank 1's row 0), B's first token
  // (flat 3; rank 0's token 0) from row 1 (rank 0's row 0).
  PlanFixture g;
  g.plan.token_fills = {{3, 1}, {5, 0}};
  where = sampled;
  ASSERT_TRUE(dsinfer::runner::split_plan_by_rank(g.plan, 2, 2, 4, split, where).is_ok());
  ASSERT_EQ(split.plans[0].token_fills.size(), 1u);
  EXPECT_EQ(split.plans[0].token_fills[0].token_index, 0);
  EXPECT_EQ(split.plans[0].token_fills[0].sample_row, 0);
  ASSERT_EQ(split.plans[1].token_fills.size(), 1u);
  EXPECT_EQ(split.plans[1].token_fills[0].token_index, 3);
  EXPECT_EQ(split.plans[1].token_fills[0].sample_row, 0);
  g.plan.token_fills = {{3, 2}};  // B's token from a row rank 1 sampled
  st = dsinfer::runner::split_plan_by_rank(g.plan, 2, 2, 4, split, where);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("token 3 is on rank 0, its fill's row 2 was sampled on rank 1"), std::string::npos)
      << st.message();
  g.plan.token_fills = {{3, 3}};
  st = dsinfer::runner::split_plan_by_rank(g.plan, 2, 2, 4, split, where);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("row 3 of a sampling of 3 rows"), std::string::npos) << st.message();
  g.plan.token_fills = {{9, 0}};
  st = dsinfer::runner::split_plan_by_rank(g.plan, 2, 2, 4, split, where);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("token fill at token 9 of no sequence"), std::string::npos) << st.message();
}

TEST(RankSplit, CopiesGoToTheRankOfTheirSlotOrBlocks) {
  using K = dsinfer::cache::StateCopy::Kind;
  using dsinfer::runner::localize_copy;
  // 2 ranks, 3 slots / 5 blocks each; snapshot and host-tier ids are one pool (unchanged).
  auto c = localize_copy({K::kSlotToSnapshot, 4, 7}, 2, 3, 5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->local.src, 1);
  EXPECT_EQ(c->local.dst, 7);
  c = localize_copy({K::kSnapshotToSlot, 7, 2}, 2, 3, 5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rank, 0);
  EXPECT_EQ(c->local.dst, 2);
  c = localize_copy({K::kBlockToBlock, 6, 9}, 2, 3, 5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->local.src, 1);
  EXPECT_EQ(c->local.dst, 4);
  c = localize_copy({K::kBlockToHost, 3, 40}, 2, 3, 5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rank, 0);
  EXPECT_EQ(c->local.dst, 40);
  c = localize_copy({K::kHostToBlock, 40, 8}, 2, 3, 5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->local.dst, 3);
  auto cross = localize_copy({K::kBlockToBlock, 1, 9}, 2, 3, 5);
  ASSERT_FALSE(cross.is_ok());
  EXPECT_NE(cross.status().message().find("state copy id 9 is not on one rank's state"), std::string::npos);
  EXPECT_FALSE(localize_copy({K::kZeroSlot, -1, 6}, 2, 3, 5).is_ok());
}

}  // namespace
