// The roofline floors (perf/cost_model) against the worked example of docs/kernels.md ("Roofline floors"), whose
// numbers were computed by hand, and against hand counts at the real V4-Flash shapes.
#include <gtest/gtest.h>

#include <map>

#include "io/config.h"
#include "perf/cost_model.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

// The toy model of the worked example: layer 0 CSA (ratio 2), layer 1 HCA (ratio 4).
io::ModelConfig toy_config() {
  io::ModelConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.hc_mult = 2;
  c.num_attention_heads = 2;
  c.head_dim = 8;
  c.qk_rope_head_dim = 4;
  c.q_lora_rank = 4;
  c.o_groups = 2;
  c.o_lora_rank = 4;
  c.sliding_window = 2;
  c.layer_types = {io::AttnType::CSA, io::AttnType::HCA};
  c.mlp_layer_types = {io::MlpType::MoE, io::MlpType::MoE};
  c.compress_ratios = {2, 4};
  c.index_n_heads = 2;
  c.index_head_dim = 4;
  c.index_topk = 2;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 4;
  return c;
}

perf::WeightBytes toy_bytes() {
  perf::WeightBytes wb;
  wb.dense = 1;
  wb.expert = 0.5;
  wb.other = 2;
  wb.kv_row = 10;
  wb.index_row = 6;
  return wb;
}

using OpMap = std::map<std::pair<std::string, int64_t>, perf::OpCost>;

// The op of that name and layer (a default one, and a test failure, when absent).
perf::OpCost op(const OpMap& m, const std::string& name, int64_t layer) {
  auto it = m.find({name, layer});
  if (it == m.end()) {
    ADD_FAILURE() << name << " missing in layer " << layer;
    return {};
  }
  return it->second;
}
OpMap by_name(const std::vector<perf::OpCost>& ops) {
  OpMap m;
  for (const auto& o : ops) {
    EXPECT_EQ(m.count({o.name, o.layer}), 0u) << o.name << " twice in layer " << o.layer;
    m[{o.name, o.layer}] = o;
  }
  return m;
}

}  // namespace

// docs/kernels.md, worked example 1: one sequence, 4 new tokens after 2 in the state, one logits row.
TEST(CostModel, WorkedExamplePrefillChunk) {
  const auto ops = perf::step_costs(toy_config(), {1, 4, 2, 1, 1}, toy_bytes(), 2);
  const OpMap m = by_name(ops);
  struct Row {
    const char* name;
    int64_t layer;
    double bytes, flops;
  };
  const Row rows[] = {
      {"embed", -1, 192, 0},
      {"hc_pre_attn", 0, 640, 1024},     {"wq_a", 0, 32, 256},           {"wq_b", 0, 64, 512},
      {"wkv", 0, 64, 512},               {"q_norm_rope", 0, 0, 0},       {"kv_norm_rope", 0, 0, 0},
      {"ring_write", 0, 20, 0},          {"compressor_proj", 0, 512, 2048}, {"compressor", 0, 20, 0},
      {"indexer_q", 0, 32, 256},         {"indexer_proj", 0, 288, 1152}, {"indexer_topk", 0, 18, 128},
      {"sparse_attention", 0, 80, 960},  {"wo_a", 0, 64, 512},           {"wo_b", 0, 64, 512},
      {"hc_post_attn", 0, 0, 256},       {"hc_pre_ffn", 0, 512, 1024},   {"router", 0, 64, 256},
      {"moe", 0, 276, 2304},             {"hc_post_ffn", 0, 128, 256},
      {"hc_pre_attn", 1, 640, 1024},     {"ring_write", 1, 20, 0},       {"compressor_proj", 1, 256, 1024},
      {"compressor", 1, 10, 0},          {"sparse_attention", 1, 60, 704}, {"moe", 1, 276, 2304},
      {"hc_post_ffn", 1, 128, 256},
      {"hc_head", -1, 32, 32},           {"lm_head", -1, 320, 256},
  };
  for (const Row& r : rows) {
    ASSERT_EQ(m.count({r.name, r.layer}), 1u) << r.name << " layer " << r.layer;
    const perf::OpCost o = op(m, r.name, r.layer);
    EXPECT_DOUBLE_EQ(o.bytes, r.bytes) << r.name << " layer " << r.layer;
    EXPECT_DOUBLE_EQ(o.flops, r.flops) << r.name << " layer " << r.layer;
  }
  // The HCA layer has no indexer.
  EXPECT_EQ(m.count({"indexer_topk", 1}), 0u);
  // The example's totals, summed by hand in the doc.
  double bytes = 0, flops = 0;
  for (const auto& o : ops) {
    bytes += o.bytes;
    flops += o.flops;
  }
  EXPECT_DOUBLE_EQ(bytes, 5676);
  EXPECT_DOUBLE_EQ(flops, 21408);
  // Floors at the toy ceilings 100 B/s, 1000 bf16 FLOP/s, 2000 FP8 FLOP/s: MoE is memory bound, sparse attention
  // of the CSA layer compute bound, the compressor projection memory bound.
  perf::Ceilings c;
  c.hbm_bytes_per_s = 100;
  c.bf16_flops = 1000;
  c.fp8_flops = 2000;
  EXPECT_DOUBLE_EQ(op(m, "moe", 0).floor_s(c), 2.76);
  EXPECT_DOUBLE_EQ(op(m, "sparse_attention", 0).floor_s(c), 0.96);
  EXPECT_DOUBLE_EQ(op(m, "compressor_proj", 0).floor_s(c), 5.12);
  EXPECT_DOUBLE_EQ(op(m, "wq_b", 0).floor_s(c), 0.64);
}

// docs/kernels.md, worked example 2: two sequences decode one token each at position 5.
TEST(CostModel, WorkedExampleDecode) {
  const OpMap m = by_name(perf::step_costs(toy_config(), {2, 1, 5, -1, 1}, toy_bytes(), 2));
  // 2 tokens x 2 picks of 4 experts: 3 distinct experts expected.
  EXPECT_DOUBLE_EQ(op(m, "moe", 0).bytes, 240);
  EXPECT_DOUBLE_EQ(op(m, "moe", 0).flops, 1152);
  EXPECT_DOUBLE_EQ(op(m, "sparse_attention", 0).bytes, 80);
  EXPECT_DOUBLE_EQ(op(m, "sparse_attention", 0).flops, 512);
  EXPECT_DOUBLE_EQ(op(m, "indexer_topk", 0).bytes, 36);
  EXPECT_DOUBLE_EQ(op(m, "indexer_topk", 0).flops, 96);
  EXPECT_DOUBLE_EQ(op(m, "compressor", 0).bytes, 20);
  EXPECT_DOUBLE_EQ(op(m, "compressor", 1).bytes, 0);
  EXPECT_DOUBLE_EQ(op(m, "sparse_attention", 1).bytes, 60);
  EXPECT_DOUBLE_EQ(op(m, "sparse_attention", 1).flops, 384);
  EXPECT_DOUBLE_EQ(op(m, "lm_head", -1).bytes, 384);
}

TEST(CostModel, ExpectedExpertsHit) {
  EXPECT_DOUBLE_EQ(perf::expected_experts_hit(4, 2, 2), 3);
  EXPECT_DOUBLE_EQ(perf::expected_experts_hit(4, 2, 4), 3.75);
  EXPECT_DOUBLE_EQ(perf::expected_experts_hit(256, 6, 1), 6);
  EXPECT_NEAR(perf::expected_experts_hit(256, 6, 4096), 256, 1e-9);
}

TEST(CostModel, StateProfiles) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto fp8 = perf::state_profile(*cfg, "fp8");
  ASSERT_TRUE(fp8.is_ok());
  EXPECT_DOUBLE_EQ(fp8->kv_row, 584);  // 448 e4m3 + 64 x 2 bf16 + 7 scales padded to 8
  EXPECT_DOUBLE_EQ(fp8->index_row, 132);
  auto f32 = perf::state_profile(*cfg, "fp32");
  ASSERT_TRUE(f32.is_ok());
  EXPECT_DOUBLE_EQ(f32->kv_row, 2048);
  EXPECT_DOUBLE_EQ(f32->index_row, 512);
  auto bad = perf::state_profile(*cfg, "fp6");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("fp6"), std::string::npos);
}

TEST(CostModel, FlashDecodeBatch1) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  const auto ops = perf::step_costs(*cfg, {1, 1, 4096, -1}, {}, 43);
  std::map<std::string, double> bytes_l2, flops_l2;
  for (const auto& o : ops) {
    if (o.layer == 2) {
      bytes_l2[o.name] += o.bytes;
      flops_l2[o.name] += o.flops;
    }
  }
  // wq_b: 32768 x 1024 FP8 weights + one scale byte per 128 x 128 block (2,048 blocks); activations are free.
  EXPECT_DOUBLE_EQ(bytes_l2["wq_b"], 33556480);
  EXPECT_DOUBLE_EQ(flops_l2["wq_b"], 67108864);
  // One token picks 6 experts: 6 x 3 x 2048 x 4096 x 17/32 bytes = 80,216,064, plus the FP8 shared expert
  // 3 x 2048 x 4096 x (1 + 1/16384) = 25,167,360.
  EXPECT_DOUBLE_EQ(bytes_l2["moe"], 80216064.0 + 25167360.0);
  // Layer 2 is CSA: window 128 + top-512 keys at 4K context; 640 FP8 rows of 584 B read.
  EXPECT_DOUBLE_EQ(flops_l2["sparse_attention"], 83886080);
  EXPECT_DOUBLE_EQ(bytes_l2["sparse_attention"], 373760);
  // Batch-1 decode is memory bound: every op that moves bytes has its bytes over bandwidth as its floor (hc_post_attn
  // moves none: its residual is an intermediate) -- except sparse attention over FP8 rows: 64 heads share each
  // 584-byte row, 224 FLOPs per byte, above the H200's 206 (989 TFLOP/s over 4.8 TB/s): 84.8 ns of math against
  // 77.9 ns of reads on the CSA layer.
  perf::Ceilings c;
  for (const auto& o : ops) {
    if (o.bytes > 0 && o.name != "sparse_attention") {
      EXPECT_DOUBLE_EQ(o.floor_s(c), o.bytes / c.hbm_bytes_per_s) << o.name;
    }
    if (o.name == "sparse_attention" && o.layer == 2) {
      EXPECT_NEAR(o.floor_s(c), 84.8e-9, 0.05e-9);
    }
  }
}

TEST(CostModel, PrefillIsComputeBound) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  const int64_t layers = 4;
  perf::Ceilings c;
  const auto ops = perf::step_costs(*cfg, {1, 4096, 0, 1}, {}, layers);
  int checked = 0;
  for (const auto& o : ops) {
    if (o.name != "wq_b" && o.name != "wo_b" && o.name != "moe") continue;
    ++checked;
    EXPECT_TRUE(o.fp8_math) << o.name;
    EXPECT_DOUBLE_EQ(o.floor_s(c), o.flops / c.fp8_flops) << o.name;
  }
  EXPECT_EQ(checked, 3 * layers);
  // Causal attention of a 4,096-token prefill on the sliding layer 0: token p attends min(128, p + 1) keys, so
  // 128 x 129 / 2 + 3,968 x 128 = 516,160 keys; 4 x 64 heads x 512 dims each.
  int sliding = 0;
  for (const auto& o : ops) {
    if (o.name != "sparse_attention" || o.layer != 0) continue;
    ++sliding;
    EXPECT_DOUBLE_EQ(o.flops, 67654123520.0);
  }
  EXPECT_EQ(sliding, 1);
}
