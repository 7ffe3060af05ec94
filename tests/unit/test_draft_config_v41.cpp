// DSpark drafter of DeepSeek-V4.1 checkpoints: the config keys nested under text_config, the official ModelArgs
// names, num_nextn_predict_layers 0 (keys but no drafter stages) (speculative/draft_config.h), and the V4.1 weight
// layout with its validation (speculative/draft_weights.h load_dspark_weights_v41) on a synthetic tiny drafter.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "io/config.h"
#include "io/safetensors.h"
#include "speculative/draft_config.h"
#include "speculative/draft_weights.h"
#include "test_util.h"
#include "v41_model_util.h"

using namespace dsinfer;

namespace {

void write_config(const test::ScratchDir& dir, const std::string& json) {
  std::ofstream(dir.path / "config.json") << json;
}

const char* kText = R"("num_hidden_layers": 40, "num_nextn_predict_layers": 3, "sliding_window": 128,
    "num_experts_per_tok": 6, "dspark_block_size": 5, "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [37, 38, 39], "dspark_markov_rank": 256, "dspark_n_routed_experts": 128,
    "dspark_num_experts_per_tok": 3)";

TEST(DraftConfigV41, ReadsTextConfig) {
  test::ScratchDir dir("dcv41");
  write_config(dir, std::string(R"({"model_type": "deepseek_v41", "vision_config": {"num_hidden_layers": 32},
    "text_config": {)") + kText + "}}");
  const speculative::DraftConfig c = test::unwrap(speculative::load_draft_config(dir.str()));
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.block_size, 5);
  EXPECT_EQ(c.noise_token_id, 128799);
  EXPECT_EQ(c.markov_rank, 256);
  EXPECT_EQ(c.n_routed_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 3);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{37, 38, 39}));
}

TEST(DraftConfigV41, OfficialNames) {
  test::ScratchDir dir("dcv41o");
  write_config(dir, R"({"dim": 64, "n_layers": 8, "n_mtp_layers": 2, "window_size": 16, "n_activated_experts": 4,
    "dspark_block_size": 4, "dspark_noise_token_id": 7, "dspark_target_layer_ids": [5, 6, 7],
    "dspark_n_activated_experts": 2})");
  const speculative::DraftConfig c = test::unwrap(speculative::load_draft_config(dir.str()));
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{5, 6, 7}));
}

TEST(DraftConfigV41, NoStagesAndBadLayers) {
  {  // the tiny-v41 fixtures: DSpark keys, num_nextn_predict_layers 0 -> no drafter, not an error
    test::ScratchDir dir("dcv41z");
    write_config(dir, R"({"text_config": {"num_hidden_layers": 10, "num_nextn_predict_layers": 0,
      "dspark_block_size": 5, "dspark_noise_token_id": 511, "dspark_target_layer_ids": [7, 8, 9]}})");
    const speculative::DraftConfig c = test::unwrap(speculative::load_draft_config(dir.str()));
    EXPECT_EQ(c.num_layers, 0);
    const auto w = speculative::load_dspark_weights(io::ModelConfig{}, c, dir.str());
    ASSERT_FALSE(w.is_ok());
    EXPECT_NE(w.status().message().find("no DSpark drafter"), std::string::npos) << w.status().message();
  }
  test::ScratchDir dir("dcv41b");
  write_config(dir, R"({"text_config": {"num_hidden_layers": 10, "num_nextn_predict_layers": 3,
    "dspark_block_size": 5, "dspark_noise_token_id": 511, "dspark_target_layer_ids": [7, 10]}})");
  const auto c = speculative::load_draft_config(dir.str());
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("entry 10 is not a layer in [0, 10)"), std::string::npos) << c.status().message();
}

// A synthetic one-stage V4.1 drafter on the tiny-v41-a dimensions (D 64, 4 hc streams, 4 heads of 64, 4 draft
// experts), every tensor F32, with one tensor left out / added / misshapen on request.
struct V41Drafter {
  io::ModelConfig cfg;
  speculative::DraftConfig dc;
  std::vector<io::TensorToWrite> t;
  explicit V41Drafter(io::ModelConfig c) : cfg(std::move(c)) {
    dc.num_layers = 1;
    dc.block_size = 5;
    dc.markov_rank = 8;
    dc.noise_token_id = 511;
    dc.n_routed_experts = 4;
    dc.num_experts_per_tok = 2;
    dc.target_layer_ids = {7, 8, 9};
    for (const auto& [name, shape] : test::v41_drafter_specs(cfg, dc)) add(name, shape);
  }
  void add(const std::string& name, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    t.push_back(io::make_f32_tensor(name, shape, std::vector<float>(size_t(numel), 0.25f + 0.001f * float(t.size()))));
  }
  Result<speculative::DsparkWeights> load(const test::ScratchDir& dir) const {
    if (!io::write_safetensors(dir.str() + "/model.safetensors", t).is_ok()) return Status::error("cannot write");
    return speculative::load_dspark_weights_v41(cfg, dc, dir.str());
  }
};

TEST(DraftConfigV41, LoadsV41DrafterWeights) {
  auto cfg = io::load_model_config(test::own_fixture("tiny-v41-a"));
  if (!cfg.is_ok()) GTEST_SKIP() << "tiny-v41-a fixture not available: " << cfg.status().message();
  V41Drafter d(*cfg);
  {
    test::ScratchDir dir("dcv41w");
    const speculative::DsparkWeights w = test::unwrap(d.load(dir));
    EXPECT_TRUE(w.v41);
    ASSERT_EQ(w.layers.size(), 1u);
    EXPECT_EQ(w.layers[0].experts.size(), 4u);
    EXPECT_EQ(w.main_proj.cols, 3 * cfg->hidden_size);
    EXPECT_EQ(int64_t(w.confidence_w.size()), cfg->hidden_size + 8);
    EXPECT_EQ(w.confidence_b, 0.0f);
    EXPECT_EQ(w.markov_embed.rows, cfg->vocab_size);
    // The V4 loader refuses a V4.1 target instead of listing missing V4 tensors.
    const auto v4 = speculative::load_dspark_weights(*cfg, d.dc, dir.str());
    ASSERT_FALSE(v4.is_ok());
    EXPECT_NE(v4.status().message().find("DeepSeek-V4.1 drafter"), std::string::npos) << v4.status().message();
  }
  // Every problem at once: a missing tensor, a misshapen one, a stray mtp.* tensor.
  d.t.erase(std::find_if(d.t.begin(), d.t.end(), [](const auto& x) { return x.name == "mtp.0.norm.weight"; }));
  for (auto& x : d.t)
    if (x.name == "mtp.0.confidence_head.proj.weight") x = io::make_f32_tensor(x.name, {1, 9}, std::vector<float>(9, 1.0f));
  d.add("mtp.0.hc_head_fn", {4, 256});
  test::ScratchDir dir("dcv41e");
  const auto bad = d.load(dir);
  ASSERT_FALSE(bad.is_ok());
  const std::string msg = bad.status().message();
  EXPECT_NE(msg.find("missing tensor 'mtp.0.norm.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mtp.0.confidence_head.proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected tensor 'mtp.0.hc_head_fn'"), std::string::npos) << msg;
}

}  // namespace
