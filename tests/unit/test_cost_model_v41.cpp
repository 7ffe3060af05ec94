// The DeepSeek-V4.1 roofline cost model (perf/cost_model_v41.cpp) against hand counts for V4.1-Flash.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "io/config.h"
#include "perf/cost_model.h"
#include "test_util.h"

using namespace dsinfer;

TEST(CostModelV41, FlashDecodeBatch1HandCounts) {
  auto cfg = io::load_model_config(test::source_dir() + "/configs/deepseek-v4.1-flash");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  ASSERT_TRUE(cfg->is_v41());
  const auto ops = perf::step_costs(*cfg, {1, 1, 4096, -1}, {}, 4);
  std::map<std::pair<std::string, int64_t>, perf::OpCost> by;
  for (const auto& o : ops) by[{o.name, o.layer}] = o;
  auto get = [&](const char* name, int64_t layer) { return by[{name, layer}]; };
  auto has = [&](const char* name, int64_t layer) { return by.count({name, layer}) > 0; };
  // Layer 1 is an Engram layer, layer 2 a ratio-2 KV and index source; layers 0 / 1 are sliding (no indexer).
  EXPECT_TRUE(has("engram_wkv", 1));
  EXPECT_FALSE(has("engram_wkv", 2));
  EXPECT_TRUE(has("compressor_emit", 2) && has("indexer_topk", 2));
  EXPECT_FALSE(has("indexer_topk", 0) || has("indexer_topk", 3));
  // wq_b of one token: 64*512 x 1280 FP8 weights with 32x32-block scales.
  EXPECT_NEAR(get("wq_b", 2).bytes, 32768.0 * 1280 * (1 + 1.0 / 1024) + 1280 * 4 + 32768 * 4, 1.0);
  // Layer 2 (ratio 2) at 4097 positions: window 128 + top-512 of 2048 entries; sliding layer 0: window only.
  EXPECT_DOUBLE_EQ(get("sparse_attention", 2).flops, 4.0 * 64 * 512 * (128 + 512));
  EXPECT_DOUBLE_EQ(get("sparse_attention", 0).flops, 4.0 * 64 * 512 * 128);
  // The indexer scores every visible entry with all 32 heads of 128 dims.
  EXPECT_DOUBLE_EQ(get("indexer_scores", 2).flops, 2.0 * 32 * 128 * (4097.0 / 2));
  // Every op has a positive floor; the V4-only ops (hc_head, CSA/HCA compressors' projections) are absent.
  for (const auto& o : ops) EXPECT_GT(o.floor_s({}), 0.0) << o.name << " layer " << o.layer;
  EXPECT_FALSE(has("hc_head", -1));
  EXPECT_TRUE(has("final_collapse", -1));
}
