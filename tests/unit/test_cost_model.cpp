// The roofline cost model against hand counts for V4-Flash (architecture notes §10, §19).
#include <gtest/gtest.h>

#include <map>

#include "io/config.h"
#include "perf/cost_model.h"
#include "test_util.h"

using namespace dsinfer;

TEST(CostModel, FlashDecodeBatch1) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  perf::StepShape s{1, 1, 4096, -1};
  const auto ops = perf::step_costs(*cfg, s, {}, 43);
  std::map<std::string, double> bytes_l2, flops_l2;
  for (const auto& o : ops) {
    if (o.layer == 2) {
      bytes_l2[o.name] += o.bytes;
      flops_l2[o.name] += o.flops;
    }
  }
  // wq_b of one token: 32768 x 1024 FP8 weights (+ scales) dominate.
  EXPECT_NEAR(bytes_l2["wq_b"], 32768.0 * 1024 * (1 + 1.0 / 16384) + 1024 * 4 + 32768 * 4, 1.0);
  EXPECT_DOUBLE_EQ(flops_l2["wq_b"], 2.0 * 32768 * 1024);
  // One token picks 6 experts: ~6 experts x 3 x 2048 x 4096 x (0.5 + 1/32) bytes, plus the FP8 shared expert.
  EXPECT_NEAR(bytes_l2["moe"] / (6 * 3 * 2048.0 * 4096 * (0.5 + 1.0 / 32) + 3 * 2048.0 * 4096 * (1 + 1.0 / 16384)), 1.0, 0.01);
  // Layer 2 is CSA: window 128 + top-512 keys at 4K context.
  EXPECT_DOUBLE_EQ(flops_l2["sparse_attention"], 4.0 * 64 * 512 * (128 + 512));
  // Batch-1 decode is memory bound: every op's floor is its bytes over bandwidth.
  perf::Ceilings c;
  for (const auto& o : ops) EXPECT_DOUBLE_EQ(o.floor_s(c), o.bytes / c.hbm_bytes_per_s) << o.name;
  // Active weights per token, all layers (~13B active params in FP8/FP4): a few GB per step.
  double total = 0;
  for (const auto& o : ops) total += o.bytes;
  EXPECT_GT(total, 5e9);
  EXPECT_LT(total, 15e9);
}

TEST(CostModel, PrefillIsComputeBound) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  const int64_t T = 4096, layers = 4;
  perf::StepShape s{1, T, 0, 1};
  perf::Ceilings c;
  const auto ops = perf::step_costs(*cfg, s, {}, layers);
  // The big FP8 projections at 4096 tokens are compute bound: the floor is their flops at the FP8 peak.
  // (MoE at 4096 tokens is balanced: fp32 intermediates.)
  int checked = 0;
  for (const auto& o : ops) {
    if (o.name != "wq_b" && o.name != "wo_b") continue;
    ++checked;
    EXPECT_TRUE(o.fp8_math) << o.name;
    EXPECT_GT(o.flops / c.fp8_flops, o.bytes / c.hbm_bytes_per_s) << o.name;
    EXPECT_DOUBLE_EQ(o.floor_s(c), o.flops / c.fp8_flops) << o.name;
    // 2 x tokens x out x in: wq_b 32768 x 1024 (64 heads x 512, q_lora_rank), wo_b 4096 x 8192
    // (o_groups x o_lora_rank).
    const double n_k = o.name == "wq_b" ? 32768.0 * 1024 : 4096.0 * 8 * 1024;
    EXPECT_DOUBLE_EQ(o.flops, 2.0 * double(T) * n_k) << o.name;
  }
  EXPECT_EQ(checked, 2 * layers);  // one wq_b and one wo_b per layer: the loop above checked every one
  // One logits row (logits_rows = 1): the LM head is a matrix-vector product, memory bound.
  int heads = 0;
  for (const auto& o : ops) {
    if (o.name != "lm_head") continue;
    ++heads;
    EXPECT_DOUBLE_EQ(o.flops, 2.0 * double(cfg->vocab_size) * double(cfg->hidden_size));
    EXPECT_DOUBLE_EQ(o.floor_s(c), o.bytes / c.hbm_bytes_per_s);
  }
  EXPECT_EQ(heads, 1);
}
