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
