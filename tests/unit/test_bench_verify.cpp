// `dsinfer bench --verify-tokens K`: the verify plan (anchor + K drafts per sequence, a logits row for every token,
// not a prefill) and the option's range check.
#include <gtest/gtest.h>

#include "perf/bench.h"

using namespace dsinfer;

TEST(BenchVerify, PlanHasALogitsRowPerTokenAndSpecTokens) {
  std::vector<std::vector<cache::BlockId>> tables;
  const auto p = perf::make_bench_plan(2, 4, 100, 8, 1000, tables, /*verify=*/true);
  ASSERT_EQ(p.num_seqs(), 2);
  EXPECT_EQ(p.num_tokens(), 8);
  EXPECT_EQ(p.num_logits(), 8);
  EXPECT_EQ(p.logits_token_index, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (int s = 0; s < 2; ++s) {
    const auto& sp = p.seqs[size_t(s)];
    EXPECT_FALSE(sp.is_prefill);
    EXPECT_EQ(sp.num_spec_tokens, 3);
    EXPECT_EQ(sp.logits_row, 4 * s);
    EXPECT_EQ(sp.token_offset, 4 * s);
  }
  // The plain plan keeps one row per sequence.
  const auto d = perf::make_bench_plan(2, 4, 100, 8, 1000, tables);
  EXPECT_EQ(d.num_logits(), 2);
  EXPECT_EQ(d.seqs[1].logits_row, 1);
  EXPECT_EQ(d.seqs[1].num_spec_tokens, 0);
}

TEST(BenchVerify, VerifyTokensAreRangeChecked) {
  BenchOptions o;
  o.verify_tokens = {1, 5};
  EXPECT_TRUE(perf::validate_bench_options(o).is_ok());
  o.verify_tokens = {0};
  EXPECT_FALSE(perf::validate_bench_options(o).is_ok());
  o.verify_tokens = {65};
  const Status s = perf::validate_bench_options(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("65"), std::string::npos) << s.message();
}

// The runner's state format (issue 31): auto (DeepSeek's FP8 format where the runner has it) or fp32, named if wrong.
TEST(BenchVerify, StateFormatIsChecked) {
  BenchOptions o;
  EXPECT_EQ(o.state_format, "auto");
  o.state_format = "fp32";
  EXPECT_TRUE(perf::validate_bench_options(o).is_ok());
  o.state_format = "fp8";
  const Status s = perf::validate_bench_options(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("state format"), std::string::npos) << s.message();
}
