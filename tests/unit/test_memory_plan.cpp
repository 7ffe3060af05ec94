// `dsinfer plan` / dsinfer::plan_memory: weights per GPU in the official checkpoint formats and the sequences that
// fit, from config.json alone. The byte counts are checked against hand arithmetic from the published shapes
// (research dsv4 / dsv41 section 3) and the DeepSeek-V4.1 parameter totals the research note derives from the
// real checkpoint's header (backbone without Engram 551.9 B, Engram 196.6 B).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
#include "io/config.h"
#include "model/weights_v41.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

MemoryPlan plan_of(const std::string& config, MemoryPlanOptions o = {}) {
  o.model_dir = test::source_dir() + "/configs/" + config;
  MemoryPlan p;
  std::string err;
  EXPECT_TRUE(plan_memory(o, &p, &err)) << err;
  return p;
}

TEST(MemoryPlan, FlashNeedsTwoH200s) {
  MemoryPlanOptions o8k;
  o8k.context = 8192;
  const MemoryPlan p = plan_of("deepseek-v4-flash", o8k);
  EXPECT_EQ(p.model_type, "deepseek_v4");
  EXPECT_DOUBLE_EQ(p.expert_bytes, 43.0 * 256 * 3 * 2048 * 4096 * (0.5 + 1.0 / 32));  // FP4 + E8M0 per 32
  EXPECT_EQ(p.engram_table_bytes, 0);
  ASSERT_EQ(p.rows.size(), 4u);
  const double gib = double(int64_t(1) << 30), limit = 0.92 * 139.0 * gib;
  for (const MemoryPlanRow& r : p.rows) {
    SCOPED_TRACE(r.gpus);
    EXPECT_DOUBLE_EQ(r.limit_bytes, limit);
    EXPECT_NEAR(r.weight_bytes, p.dense_bytes + p.expert_bytes / r.gpus, 1.0);
    EXPECT_EQ(r.fits, r.gpus >= 2);
    // a step of the default 8,192 tokens' activations (parallel::step_activation_bytes) come off before the state
    EXPECT_GT(r.activation_bytes, 0.1 * gib);
    EXPECT_LT(r.activation_bytes, 4 * gib);
    EXPECT_EQ(r.sequences,
              r.fits ? int64_t((limit - r.weight_bytes - r.activation_bytes) / p.state_bytes_per_sequence) : 0);
  }
  // Per token, by hand from config.json: 21 CSA layers (ratio 4) keep one 512-wide compressed row and one 128-wide
  // indexer key per 4 tokens, 20 HCA layers (ratio 128) one 512-wide row per 128 tokens, all fp32 today:
  // 21 x (512 + 128) x 4 B / 4 + 20 x 512 x 4 B / 128 = 13,440 + 320 = 13,760 B.
  EXPECT_DOUBLE_EQ(p.state_bytes_per_token, 13760.0);
  // fp32 state of an 8K sequence: the per-token bytes times the context plus the fixed part, padded to blocks.
  EXPECT_GE(p.state_bytes_per_sequence, p.state_bytes_per_token * 8192 + p.state_fixed_bytes);
  EXPECT_LT(p.state_bytes_per_sequence, 1.1 * (p.state_bytes_per_token * 8192 + p.state_fixed_bytes));
}

TEST(MemoryPlan, V41FlashMatchesThePublishedTotals) {
  const auto cfg = test::unwrap(io::load_model_config(test::source_dir() + "/configs/deepseek-v4.1-flash"));
  double params = 0, engram_params = 0;
  for (const model::TensorSpec& s : model::weight_specs_v41(cfg)) {
    const double n = double(s.rows) * double(s.cols);
    (s.name.find("engram.embed.") != std::string::npos ? engram_params : params) += n;
  }
  // The note's split: the Engram tables alone vs everything else of the backbone (Engram wkv / q / k included).
  EXPECT_NEAR(engram_params / 1e9, 196.6, 0.05);
  EXPECT_NEAR(params / 1e9, 551.9, 0.05);
  const MemoryPlan p = plan_of("deepseek-v4.1-flash");
  EXPECT_EQ(p.model_type, "deepseek_v41");
  EXPECT_DOUBLE_EQ(p.engram_table_bytes, (384006168.0 + 384016682.0) * (256 + 8));  // FP8 row + E8M0 per 32
  EXPECT_DOUBLE_EQ(p.expert_bytes, 40.0 * 384 * 3 * 2304 * 5120 * (0.5 + 1.0 / 32));
  // The real checkpoint holds 510,286,023,000 payload bytes, of which the DSpark layers and the vision tower
  // (not in the backbone's spec list) are ~14.6 B parameters, mostly FP4 experts: ~8-10 GB.
  const double total = p.dense_bytes + p.expert_bytes;
  EXPECT_GT(510286023000.0 - total, 7e9);
  EXPECT_LT(510286023000.0 - total, 11e9);
  // Replicated Engram tables do not fit 8 H200s; split as well, 4 would hold the weights.
  for (const MemoryPlanRow& r : p.rows) EXPECT_FALSE(r.fits) << r.gpus;
  EXPECT_LT(p.rows[2].tables_split_bytes, p.rows[2].limit_bytes);
  EXPECT_GT(p.rows[1].tables_split_bytes, p.rows[1].limit_bytes);
}

// Issue 26: the Engram tables sharded over the GPUs or in pinned host memory; V4.1-Flash then fits 4 and 8 H200s
// either way, with state left for sequences (fp32 state, 8K context).
TEST(MemoryPlan, V41FlashFitsFourAndEightH200sWithEitherEngramPlacement) {
  MemoryPlanOptions o;
  o.context = 8192;
  const MemoryPlan p = plan_of("deepseek-v4.1-flash", o);
  // 2 Engram layers x 24 hash columns x (256 FP8 bytes + 8 E8M0 scales) per token.
  EXPECT_DOUBLE_EQ(p.engram_bytes_per_token, 2.0 * 24 * (256 + 8));
  ASSERT_EQ(p.rows.size(), 4u);
  for (const MemoryPlanRow& r : p.rows) {
    SCOPED_TRACE(r.gpus);
    const double rest = p.dense_bytes - p.engram_table_bytes + p.expert_bytes / r.gpus;
    EXPECT_NEAR(r.tables_split_bytes, rest + p.engram_table_bytes / r.gpus, 1.0);
    EXPECT_NEAR(r.tables_host_bytes, rest, 1.0);
    const bool fits = r.gpus >= 4;  // 2 GPUs: the routed experts alone take 134 GiB per GPU
    EXPECT_EQ(r.tables_split_bytes <= r.limit_bytes, fits);
    EXPECT_EQ(r.tables_host_bytes <= r.limit_bytes, fits);
    EXPECT_NEAR(r.state_left_host, std::max(0.0, r.limit_bytes - r.tables_host_bytes - r.activation_bytes), 1.0);
    EXPECT_EQ(r.sequences_host, int64_t(r.state_left_host / p.state_bytes_per_sequence));
    EXPECT_EQ(r.sequences_sharded, int64_t(r.state_left_sharded / p.state_bytes_per_sequence));
    if (fits) {
      EXPECT_GT(r.sequences_sharded, 0);
      EXPECT_GT(r.sequences_host, r.sequences_sharded);  // the host placement leaves the tables' share to state
    }
  }
  test::ScratchDir dir("plan_cli_v41");
  const test::CliResult cli = test::run_cli(
      dir, "plan --model " + test::source_dir() + "/configs/deepseek-v4.1-flash --gpus 4,8 --context 8192");
  ASSERT_EQ(cli.rc, 0) << cli.err;
  for (const char* row : {"\n4     sharded ", "\n4     host ", "\n8     sharded ", "\n8     host "})
    EXPECT_NE(cli.out.find(row), std::string::npos) << row << "\n" << cli.out;
  EXPECT_NE(cli.out.find("Engram tables (188.83 GiB)"), std::string::npos) << cli.out;
}

TEST(MemoryPlan, CliPrintsTheTableAndNamesBadOptions) {
  test::ScratchDir dir("plan_cli");
  const std::string model = test::source_dir() + "/configs/deepseek-v4-flash";
  const test::CliResult r = test::run_cli(dir, "plan --model " + model + " --gpus 1,2 --context 4096");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("routed experts, split over the GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per 4096-token sequence"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n2 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n4 "), std::string::npos) << r.out;
  const test::CliResult eplb = test::run_cli(dir, "plan --model " + model + " --gpus 2,4 --num-redundant-experts 2");
  EXPECT_EQ(eplb.rc, 1);
  EXPECT_NE(eplb.err.find("not a multiple of 4 GPUs"), std::string::npos) << eplb.err;
  const test::CliResult bad = test::run_cli(dir, "plan --model " + model + " --gpus 0");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--gpus"), std::string::npos) << bad.err;
  const test::CliResult huge = test::run_cli(dir, "plan --model " + model + " --context 100000000");
  EXPECT_EQ(huge.rc, 1);
  EXPECT_NE(huge.err.find("max_position_embeddings"), std::string::npos) << huge.err;
  const test::CliResult none = test::run_cli(dir, "plan --model " + (dir.path / "nope").string());
  EXPECT_EQ(none.rc, 1);
  EXPECT_NE(none.err.find("config.json"), std::string::npos) << none.err;
}

}  // namespace
