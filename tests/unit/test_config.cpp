// config.json in both forms seen in the wild, and clear errors for unknown or inconsistent values.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/config.h"
#include "test_util.h"

using namespace dsinfer;
using nlohmann::json;

namespace {
json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}
Result<io::ModelConfig> parse(const json& j) { return io::parse_model_config_json(j.dump(), "config.json"); }
void expect_error(const json& j, const std::string& needle) {
  auto r = parse(j);
  ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}
}  // namespace

TEST(Config, TransformersForm) {
  auto c = io::load_model_config(test::own_fixture("tiny-v4-a"));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->layer_types[0], io::AttnType::Sliding);
  EXPECT_EQ(c->layer_types[1], io::AttnType::CSA);
  EXPECT_EQ(c->layer_types[2], io::AttnType::HCA);
  EXPECT_EQ((std::vector<int64_t>{0, 4, 16, 4}), c->compress_ratios);
  EXPECT_EQ(c->mlp_layer_types[1], io::MlpType::HashMoE);
  EXPECT_EQ(c->mlp_layer_types[2], io::MlpType::MoE);
  EXPECT_EQ(c->qk_rope_head_dim, 16);
  EXPECT_FALSE(c->rope_main.yarn);
  EXPECT_TRUE(c->rope_compress.yarn);
  EXPECT_EQ(c->rope_compress.theta, 160000.0);
  EXPECT_EQ(c->rope_compress.original_max_position_embeddings, 32);
  EXPECT_FALSE(c->fp8_weights);
}

TEST(Config, OfficialForm) {
  auto c = io::load_model_config(test::own_fixture("tiny-v4-official"));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ((std::vector<int64_t>{0, 4, 8, 4}), c->compress_ratios);  // trailing MTP entry dropped
  EXPECT_EQ(c->layer_types[2], io::AttnType::HCA);
  EXPECT_EQ(c->hca_ratio, 8);
  EXPECT_EQ(c->mlp_layer_types[1], io::MlpType::HashMoE);
  EXPECT_EQ(c->mlp_layer_types[2], io::MlpType::MoE);
  EXPECT_TRUE(c->rope_compress.yarn);  // rope_scaling applies to the compressed layers only
  EXPECT_EQ(c->rope_compress.theta, 160000.0);
  EXPECT_FALSE(c->rope_main.yarn);
  EXPECT_EQ(c->rope_main.theta, 10000.0);
  EXPECT_TRUE(c->fp8_weights);
  EXPECT_EQ(c->expert_dtype, io::ExpertDtype::FP4);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
}

TEST(Config, ShippedFullSizeConfigsParse) {
  for (const char* name : {"deepseek-v4-flash", "deepseek-v4-pro"}) {
    auto c = io::load_model_config(test::source_dir() + "/configs/" + name);
    ASSERT_TRUE(c.is_ok()) << name << ": " << c.status().message();
    EXPECT_EQ(c->head_dim, 512);
    EXPECT_EQ(c->qk_rope_head_dim, 64);
    EXPECT_EQ(c->hca_ratio, 128);
  }
  auto flash = io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash");
  ASSERT_TRUE(flash.is_ok());
  EXPECT_EQ(flash->num_hidden_layers, 43);
  EXPECT_EQ(flash->layer_types[0], io::AttnType::Sliding);
  EXPECT_EQ(flash->layer_types[2], io::AttnType::CSA);
  EXPECT_EQ(flash->layer_types[3], io::AttnType::HCA);
  EXPECT_EQ(flash->mlp_layer_types[2], io::MlpType::HashMoE);
  EXPECT_EQ(flash->mlp_layer_types[3], io::MlpType::MoE);
}

TEST(Config, Errors) {
  const json base = read_json(test::own_fixture("tiny-v4-a") + "/config.json");
  const json official = read_json(test::own_fixture("tiny-v4-official") + "/config.json");
  auto with = [](json j, const std::string& k, json v) {
    j[k] = std::move(v);
    return j;
  };
  auto without = [](json j, const std::string& k) {
    j.erase(k);
    return j;
  };
  expect_error(without(base, "hidden_size"), "missing required key 'hidden_size'");
  expect_error(with(base, "hidden_size", "64"), "'hidden_size' must be an integer");
  expect_error(with(base, "num_key_value_heads", 2), "'num_key_value_heads' must be 1");
  expect_error(with(base, "model_type", "llama"), "model_type 'llama' is not supported");
  expect_error(with(base, "scoring_func", "relu"), "unsupported scoring_func 'relu'");
  json lt = base;
  lt["layer_types"][1] = "full_attention";
  expect_error(lt, "layer_types[1] = 'full_attention' is unknown");
  expect_error(with(base, "layer_types", json::array({"sliding_attention"})), "'layer_types' must be a list of num_hidden_layers=4");
  json mt = base;
  mt["mlp_layer_types"][0] = "dense";
  expect_error(mt, "mlp_layer_types[0] = 'dense' is unknown");
  expect_error(with(base, "compress_ratios", json::array({0, 0, 16, 4})), "layer_types[1] disagrees with compress_ratios[1]");
  expect_error(with(base, "o_groups", 3), "not a multiple of o_groups");
  expect_error(with(base, "qk_rope_head_dim", 20), "disagrees with partial_rotary_factor");
  json rp = base;
  rp["rope_parameters"]["compress"]["rope_type"] = "longrope";
  expect_error(rp, "rope_parameters.compress: unsupported rope_type 'longrope'");
  expect_error(with(official, "compress_ratios", json::array({0, 4, 8})), "'compress_ratios' must have num_hidden_layers (4)");
  expect_error(with(official, "compress_ratios", json::array({0, 4, 8, 4, 4})), "compress_ratios[4] (MTP layer) must be 0");
  expect_error(with(official, "expert_dtype", "int3"), "expert_dtype 'int3' is not supported");
  json q = official;
  q["quantization_config"]["quant_method"] = "gptq";
  expect_error(q, "quant_method 'gptq' is not supported");
  expect_error(with(official, "num_hash_layers", 9), "num_hash_layers = 9 exceeds");
  expect_error(without(without(official, "compress_ratios"), "layer_types"), "needs 'layer_types' or 'compress_ratios'");
  auto r = io::parse_model_config_json("{\"vocab_size\": 1,", "x/config.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("x/config.json: not valid JSON"), std::string::npos);
}
