// The CUDA runner's step-plan packing (backends/cuda/step/step_plan.h, host-only): array placement and alignment,
// the per-token sequence index, zero-padded block tables, fixed-shape (decode graph) strides, and the checks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cuda/step/step_plan.h"

using namespace dsinfer;

namespace {

// Two sequences: a 3-token prefill chunk at position 5 and a 1-token decode step at position 40.
struct TwoSeqPlan {
  std::vector<cache::BlockId> table0{7, 2}, table1{4, 9, 11};
  scheduler::BatchPlan plan;
  TwoSeqPlan() {
    plan.clear();
    scheduler::SeqPlan a, b;
    a.start_pos = 5;
    a.num_new_tokens = 3;
    a.token_offset = 0;
    a.slot = 3;
    a.block_table = table0;
    b.start_pos = 40;
    b.num_new_tokens = 1;
    b.token_offset = 3;
    b.slot = 1;
    b.block_table = table1;
    plan.seqs = {a, b};
    plan.token_ids = {10, 11, 12, 99};
    plan.positions = {5, 6, 7, 40};
    plan.cu_seqlens = {0, 3, 4};
    plan.logits_token_index = {2, 3};
  }
};

cache::StateLayout layout16() {
  cache::StateLayout s;
  s.block_size = 16;
  return s;
}

template <typename T>
std::vector<T> read(const T* p, size_t n) {
  std::vector<T> v(n);
  std::memcpy(v.data(), p, n * sizeof(T));
  return v;
}

}  // namespace

TEST(StepPlan, PacksEveryArrayAligned) {
  TwoSeqPlan p;
  auto L = backends::layout_step_plan(p.plan, layout16(), 128, false, 0);
  ASSERT_TRUE(L.is_ok()) << L.status().message();
  EXPECT_EQ(L->T, 4);
  EXPECT_EQ(L->S, 2);
  EXPECT_EQ(L->R, 2);
  EXPECT_EQ(L->table_stride, 3);
  EXPECT_EQ(L->max_pos, 40);
  for (size_t o : {L->tokens, L->pos, L->seq_of_token, L->cu_seqlens, L->start_pos, L->slot, L->block_tables,
                   L->logits_rows, L->bytes})
    EXPECT_EQ(o % 16, 0u) << o;
  std::vector<uint8_t> buf(L->bytes, 0xAB);
  backends::pack_step_plan(p.plan, *L, buf.data());
  const ops::StepDevice st = backends::step_device(*L, buf.data());
  EXPECT_EQ(st.T, 4);
  EXPECT_EQ(st.num_seqs, 2);
  EXPECT_EQ(st.table_stride, 3);
  EXPECT_EQ(read(st.tokens, 4), (std::vector<int32_t>{10, 11, 12, 99}));
  EXPECT_EQ(read(st.pos, 4), (std::vector<int64_t>{5, 6, 7, 40}));
  EXPECT_EQ(read(st.seq_of_token, 4), (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(read(st.cu_seqlens, 3), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(read(st.start_pos, 2), (std::vector<int64_t>{5, 40}));
  EXPECT_EQ(read(st.slot, 2), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(read(st.block_tables, 6), (std::vector<int32_t>{7, 2, 0, 4, 9, 11}));  // row 0 zero-padded
  EXPECT_EQ(read(backends::logits_rows(*L, buf.data()), 2), (std::vector<int32_t>{2, 3}));
}

TEST(StepPlan, FixedShapeUsesMaxModelLen) {
  TwoSeqPlan p;
  auto L = backends::layout_step_plan(p.plan, layout16(), 128, true, 64);
  ASSERT_TRUE(L.is_ok()) << L.status().message();
  EXPECT_EQ(L->table_stride, layout16().blocks_per_sequence(64));
  EXPECT_EQ(L->max_pos, 63);
  auto too_long = backends::layout_step_plan(p.plan, layout16(), 128, true, 40);  // position 40 >= 40
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_NE(too_long.status().message().find("max_model_len 40"), std::string::npos) << too_long.status().message();
}

TEST(StepPlan, RejectsTokensOutsideTheVocabulary) {
  TwoSeqPlan p;
  auto L = backends::layout_step_plan(p.plan, layout16(), 99, false, 0);  // token 99 with vocab 99
  ASSERT_FALSE(L.is_ok());
  EXPECT_NE(L.status().message().find("token id 99 outside the vocabulary [0, 99)"), std::string::npos)
      << L.status().message();
}

TEST(StepPlan, GraphBucketsCoverEveryBatchSizeOnce) {
  // Every batch size maps to the smallest bucket >= it, and the buckets are the documented set.
  const std::vector<int64_t> expect = {1, 2, 4, 4, 8, 8, 8, 8, 16};
  for (int64_t s = 1; s <= 9; ++s) EXPECT_EQ(backends::graph_bucket_seqs(s), expect[size_t(s - 1)]) << s;
  EXPECT_EQ(backends::graph_bucket_seqs(64), 64);
  EXPECT_EQ(backends::graph_bucket_seqs(65), 72);
  EXPECT_EQ(backends::graph_bucket_seqs(256), 256);
  EXPECT_EQ(backends::graph_bucket_seqs(257), 288);
  int64_t buckets = 0;
  for (int64_t s = 1; s <= 256; ++s) {
    EXPECT_GE(backends::graph_bucket_seqs(s), s);
    buckets += backends::graph_bucket_seqs(s) == s ? 1 : 0;
  }
  EXPECT_EQ(buckets, 2 + 1 + 32);  // 1, 2, 4 and the 32 multiples of 8: 35 graphs instead of 256
}

// Three decode sequences (asynchronous: the second's input pending) padded to a bucket of 8, and a verify step of
// 2 sequences x 3 tokens padded to 4: the real sequences, tokens, rows and fills keep their indices; each padding
// sequence is a fixed-shape copy at positions 0.. on the padding slot and block; the padded plan lays out.
TEST(StepPlan, PaddingAppendsFixedShapeSequencesAfterThePlans) {
  std::vector<cache::BlockId> t0{3, 4}, t1{5}, t2{6, 7};
  scheduler::BatchPlan plan;
  plan.clear();
  const std::vector<std::vector<cache::BlockId>*> tables{&t0, &t1, &t2};
  for (int s = 0; s < 3; ++s) {
    scheduler::SeqPlan sp;
    sp.start_pos = 20 + s;
    sp.num_new_tokens = 1;
    sp.token_offset = s;
    sp.needs_logits = true;
    sp.logits_row = s;
    sp.slot = s;
    sp.block_table = *tables[size_t(s)];
    plan.seqs.push_back(sp);
    plan.token_ids.push_back(s == 1 ? scheduler::kPendingToken : 50 + s);
    plan.positions.push_back(20 + s);
    plan.cu_seqlens.push_back(s + 1);
    plan.logits_token_index.push_back(s);
  }
  plan.token_fills.push_back({1, 0});
  const cache::StateLayout state = layout16();
  ASSERT_TRUE(backends::fixed_shape_step(plan, state, 64));
  const backends::StepPadding pad{9, 12, 77};
  std::vector<cache::BlockId> table;
  scheduler::BatchPlan out;
  backends::pad_fixed_step(plan, 8, pad, state.block_size, table, out);
  ASSERT_EQ(out.num_seqs(), 8);
  ASSERT_EQ(out.num_tokens(), 8);
  ASSERT_EQ(out.num_logits(), 8);
  EXPECT_TRUE(backends::fixed_shape_step(out, state, 64));
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(out.seqs[size_t(s)].slot, s);
    EXPECT_EQ(out.token_ids[size_t(s)], plan.token_ids[size_t(s)]);
    EXPECT_EQ(out.positions[size_t(s)], plan.positions[size_t(s)]);
  }
  EXPECT_EQ(out.token_fills.size(), 1u);
  EXPECT_EQ(out.token_fills[0].token_index, 1);
  for (int s = 3; s < 8; ++s) {
    const scheduler::SeqPlan& sp = out.seqs[size_t(s)];
    EXPECT_EQ(sp.slot, 9);
    EXPECT_EQ(sp.start_pos, 0);
    EXPECT_EQ(sp.token_offset, s);
    EXPECT_EQ(sp.logits_row, s);
    ASSERT_EQ(sp.block_table.size(), 1u);
    EXPECT_EQ(sp.block_table[0], 12);
    EXPECT_EQ(out.token_ids[size_t(s)], 77);
    EXPECT_EQ(out.positions[size_t(s)], 0);
    EXPECT_EQ(out.cu_seqlens[size_t(s + 1)], s + 1);
  }
  auto L = backends::layout_step_plan(out, state, 128, true, 64, /*prev_rows=*/1);
  ASSERT_TRUE(L.is_ok()) << L.status().message();
  EXPECT_EQ(L->S, 8);

  // Verify shape: 2 sequences of 1 + 2 tokens (rows for every token) to 4; 3 tokens fit one 16-token block.
  scheduler::BatchPlan v;
  v.clear();
  for (int s = 0; s < 2; ++s) {
    scheduler::SeqPlan sp;
    sp.start_pos = 30;
    sp.num_new_tokens = 3;
    sp.token_offset = 3 * s;
    sp.needs_logits = true;
    sp.logits_row = 3 * s;
    sp.num_spec_tokens = 2;
    sp.slot = s;
    sp.block_table = *tables[size_t(s)];
    v.seqs.push_back(sp);
    for (int i = 0; i < 3; ++i) {
      v.token_ids.push_back(40 + i);
      v.positions.push_back(30 + i);
      v.logits_token_index.push_back(3 * s + i);
    }
    v.cu_seqlens.push_back(3 * (s + 1));
  }
  ASSERT_TRUE(backends::fixed_shape_step(v, state, 64));
  backends::pad_fixed_step(v, 4, pad, state.block_size, table, out);
  EXPECT_EQ(out.num_seqs(), 4);
  EXPECT_EQ(out.num_tokens(), 12);
  EXPECT_EQ(out.num_logits(), 12);
  EXPECT_TRUE(backends::fixed_shape_step(out, state, 64));
  EXPECT_EQ(out.seqs[3].num_spec_tokens, 2);
  EXPECT_EQ(out.positions[11], 2);
  EXPECT_EQ(out.logits_token_index[11], 11);

  // A bucket no larger than the plan leaves it as it is.
  backends::pad_fixed_step(v, 2, pad, state.block_size, table, out);
  EXPECT_EQ(out.num_seqs(), 2);
}
