// The diagnostics API (include/dsinfer/diagnostics.h): run_bench / check_reference report bad input as errors;
// the bench plan layout.
#include <gtest/gtest.h>

#include "dsinfer/diagnostics.h"
#include "perf/bench.h"
#include "test_util.h"

using namespace dsinfer;


TEST(CheckReference, BadInputIsAnError) {
  CheckReferenceReport rep;
  std::string error;
  CheckReferenceOptions o;
  o.model_dir = test::shared_fixture("tiny-v4-a");
  o.numerics = "bf17";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("'bf17'"), std::string::npos) << error;
  o.numerics.clear();
  o.reference_path = test::source_dir() + "/no/such/reference.safetensors";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("no/such/reference.safetensors"), std::string::npos) << error;
  o.reference_path.clear();
  o.backend = "tpu";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("'tpu'"), std::string::npos) << error;
}

// The bench plan: `seqs` sequences of `new_tokens` after `context`, each with its own slot and consecutive blocks.
TEST(Bench, PlanLayout) {
  std::vector<std::vector<cache::BlockId>> tables;
  const auto p = perf::make_bench_plan(3, 2, 10, 4, 100, tables);
  ASSERT_EQ(p.num_seqs(), 3);
  EXPECT_EQ(p.num_tokens(), 6);
  EXPECT_EQ(p.num_logits(), 3);
  EXPECT_EQ(p.cu_seqlens, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(p.logits_token_index, (std::vector<int32_t>{1, 3, 5}));
  for (int s = 0; s < 3; ++s) {
    const auto& sp = p.seqs[size_t(s)];
    EXPECT_EQ(sp.slot, s);
    EXPECT_EQ(sp.start_pos, 10);
    EXPECT_EQ(sp.num_new_tokens, 2);
    EXPECT_TRUE(sp.is_prefill);
    EXPECT_EQ(sp.logits_row, s);
    ASSERT_EQ(sp.block_table.size(), 4u);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(sp.block_table[size_t(b)], s * 4 + b);
    EXPECT_EQ(p.positions[size_t(2 * s)], 10);
    EXPECT_EQ(p.positions[size_t(2 * s + 1)], 11);
  }
  for (int32_t t : p.token_ids) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 100);
  }
}

// The CPU backend has no per-op timing or random state: run_bench says so instead of timing nothing.
TEST(Bench, CpuBackendReportsUnsupported) {
  BenchOptions o;
  o.model_dir = test::shared_fixture("tiny-v4-a");
  o.backend = "cpu";
  o.load_format = "auto";
  o.batches = {1};
  o.context = 16;
  o.prefill = 8;
  BenchReport rep;
  std::string error;
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_TRUE(error.find("timing") != std::string::npos || error.find("randomize") != std::string::npos) << error;
  EXPECT_TRUE(rep.cases.empty());

  o.iters = 0;
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_NE(error.find("iterations"), std::string::npos) << error;
  o.iters = 1;
  o.load_format = "lazy";
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_NE(error.find("'lazy'"), std::string::npos) << error;
}
