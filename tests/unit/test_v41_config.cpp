// DeepSeek-V4.1 config.json: the transformers composite form (fixtures, configs/deepseek-v4.1-flash), the flat
// text config and the official inference/config.json all parse to the same ModelConfig; schedule errors name
// the key. Also the V4.1 state layout of the released shapes.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/state_layout.h"
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

// research/dsv41-architecture.md §1.2: the official inference/config.json of DeepSeek-V4.1-Flash.
json official_flash() {
  std::vector<int> ratios = {0, 0};
  ratios.insert(ratios.end(), 18, 2);
  ratios.insert(ratios.end(), 20, 1);
  ratios.insert(ratios.end(), 3, 0);
  return json{{"vocab_size", 129280}, {"dim", 5120}, {"moe_inter_dim", 2304}, {"n_layers", 40}, {"n_mtp_layers", 3},
              {"dspark_block_size", 5}, {"dspark_noise_token_id", 128799}, {"dspark_target_layer_ids", {37, 38, 39}},
              {"dspark_markov_rank", 256}, {"dspark_n_routed_experts", 128}, {"dspark_n_activated_experts", 3},
              {"n_heads", 64}, {"n_routed_experts", 384}, {"n_shared_experts", 1}, {"n_activated_experts", 6},
              {"score_func", "sqrtsoftplus"}, {"route_scale", 1.5}, {"swiglu_limit", 10.0}, {"q_lora_rank", 1280},
              {"head_dim", 512}, {"rope_head_dim", 64}, {"norm_eps", 1e-20}, {"o_groups", 8}, {"o_lora_rank", 1024},
              {"window_size", 128}, {"kv_source_layers", {2, 8, 14, 20}},
              {"index_source_layers", {2, 8, 14, 20, 24, 28, 32, 36}}, {"original_seq_len", 65536},
              {"rope_theta", 10000}, {"rope_factor", 16}, {"beta_fast", 32}, {"beta_slow", 1}, {"index_n_heads", 32},
              {"index_head_dim", 128}, {"index_topk", 512}, {"candidate_source_layer", 20},
              {"candidate_topk_blocks", 2048}, {"candidate_block_size", 8}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
              {"hc_eps", 1e-6}, {"engram_layer_ids", {1, 14}}, {"engram_vocab_size", 16000000},
              {"engram_num_embeddings", {384006168, 384016682}}, {"engram_max_ngram_size", 4}, {"engram_pad_id", 2},
              {"engram_compressed_vocab_size", 99092}, {"engram_n_heads", 8}, {"engram_head_dim", 256},
              {"dtype", "fp8"}, {"expert_dtype", "fp4"}, {"compress_rope_theta", 160000}, {"compress_ratios", ratios},
              {"vision_n_layers", 32}, {"vision_dim", 1024}, {"image_token_id", 129264}, {"max_batch_size", 4},
              {"max_seq_len", 4096}};
}

void expect_flash(const io::ModelConfig& c) {
  EXPECT_TRUE(c.is_v41());
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_nextn_predict_layers, 3);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.moe_intermediate_size, 2304);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.compress_ratios.size(), 40u);
  EXPECT_EQ(c.ratio(1), 0);
  EXPECT_EQ(c.ratio(2), 2);
  EXPECT_EQ(c.ratio(19), 2);
  EXPECT_EQ(c.ratio(20), 1);
  EXPECT_EQ(c.layer_types[0], io::AttnType::Sliding);
  EXPECT_EQ(c.layer_types[20], io::AttnType::CSA2);
  EXPECT_EQ(c.mlp_layer_types[0], io::MlpType::MoE);
  EXPECT_EQ((std::vector<int64_t>{2, 8, 14, 20}), c.v41.kv_source_layer_ids);
  EXPECT_EQ((std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}), c.v41.index_source_layer_ids);
  EXPECT_EQ(c.v41.candidate_source_layer_id, 20);
  EXPECT_EQ(c.v41.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.v41.candidate_block_size, 8);
  EXPECT_EQ((std::vector<int64_t>{1, 14}), c.v41.engram_layer_ids);
  EXPECT_EQ((std::vector<int64_t>{384006168, 384016682}), c.v41.engram_num_embeddings);
  EXPECT_EQ(c.v41.engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c.v41.dspark_noise_token_id, 128799);
  EXPECT_EQ((std::vector<int64_t>{37, 38, 39}), c.v41.dspark_target_layer_ids);
  EXPECT_TRUE(c.v41.vision);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 65536);
  EXPECT_TRUE(c.fp8_weights);
  EXPECT_EQ(c.fp8_block_n, 32);
  EXPECT_EQ(c.fp8_block_k, 32);
  EXPECT_EQ(c.expert_dtype, io::ExpertDtype::FP4);
  // layer roles (research §1.3)
  EXPECT_EQ(c.kv_source_of(1), -1);
  EXPECT_EQ(c.kv_source_of(7), 2);
  EXPECT_EQ(c.kv_source_of(19), 14);
  EXPECT_EQ(c.kv_source_of(39), 20);
  EXPECT_EQ(c.index_source_of(27), 24);
  EXPECT_EQ(c.index_source_of(39), 36);
  EXPECT_EQ(c.engram_index(14), 1);
  EXPECT_EQ(c.engram_index(2), -1);
}

}  // namespace

TEST(V41Config, PublishedFlashHubForm) {
  auto c = io::load_model_config(test::source_dir() + "/configs/deepseek-v4.1-flash");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  expect_flash(*c);
  EXPECT_EQ(c->v41.pad_token_id, 2);
  EXPECT_EQ(c->v41.image_token_id, 129264);
}

TEST(V41Config, OfficialInferenceForm) {
  auto c = parse(official_flash());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  expect_flash(*c);
  EXPECT_EQ(c->max_position_embeddings, 1048576);
}

TEST(V41Config, FlatTextConfigAndDefaults) {
  json j = read_json(test::source_dir() + "/configs/deepseek-v4.1-flash/config.json")["text_config"];
  for (const char* k : {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id"})
    j.erase(k);  // transformers' defaults are the released schedule
  auto c = parse(j);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ((std::vector<int64_t>{2, 8, 14, 20}), c->v41.kv_source_layer_ids);
  EXPECT_EQ((std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}), c->v41.index_source_layer_ids);
  EXPECT_EQ(c->v41.candidate_source_layer_id, 20);
  EXPECT_FALSE(c->fp8_weights);  // quantization_config lives in the composite form only
}

TEST(V41Config, Fixtures) {
  auto a = io::load_model_config(test::own_fixture("tiny-v41-a"));
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_TRUE(a->is_v41());
  EXPECT_EQ((std::vector<int64_t>{0, 0, 2, 2, 2, 2, 1, 1, 1, 1}), a->compress_ratios);
  EXPECT_EQ((std::vector<int64_t>{2, 4, 6}), a->v41.kv_source_layer_ids);
  EXPECT_EQ(a->v41.candidate_source_layer_id, 6);
  EXPECT_EQ(a->qk_rope_head_dim, 16);
}

TEST(V41Config, ScheduleErrors) {
  const json base = read_json(test::own_fixture("tiny-v41-a") + "/config.json");
  auto with = [&](const char* k, json v) {
    json j = base;
    j["text_config"][k] = std::move(v);
    return j;
  };
  expect_error(with("kv_source_layer_ids", {1, 4, 6}), "kv_source_layer_ids[0] = 1 must name a layer < 10 with compress_ratios > 0");
  expect_error(with("index_source_layer_ids", {4, 6, 8}), "kv_source_layer_ids entry 2 is not in index_source_layer_ids");
  expect_error(with("candidate_source_layer_id", 7), "candidate_source_layer_id 7 must be in index_source_layer_ids");
  expect_error(with("num_hash_layers", 3), "no hash-routed layers");
  expect_error(with("num_key_value_heads", 2), "'num_key_value_heads' must be 1");
  json lt = with("layer_types", base["text_config"]["layer_types"]);
  lt["text_config"]["layer_types"][3] = "shared_compressed_attention";
  expect_error(lt, "layer_types[3] = \"shared_compressed_attention\" disagrees with kv_source_layer_ids");
  json mixed = base;
  mixed["text_config"]["kv_source_layer_ids"] = {2, 4};
  mixed["text_config"]["index_source_layer_ids"] = {2, 4};
  mixed["text_config"]["candidate_source_layer_id"] = -1;
  mixed["text_config"].erase("layer_types");
  expect_error(mixed, "layer 6 (ratio 1) reads the compressed KV of source layer 4 with a different ratio 2");
  mixed["text_config"]["compress_ratios"] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1};
  expect_error(mixed, "'compress_ratios' must have num_hidden_layers (10) to num_hidden_layers + num_nextn_predict_layers (10)");
  expect_error(with("engram_num_embeddings", {864}), "engram_num_embeddings has 1 entries for 2 engram_layer_ids");
  expect_error(with("quantization_config", {{"quant_method", "awq"}}), "quant_method must be 'fp8'");
}

TEST(V41StateLayout, ReleasedShapes) {
  auto c = io::load_model_config(test::source_dir() + "/configs/deepseek-v4.1-flash");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 2;
  cc.num_speculative_tokens = 3;
  const cache::StateSizes s = cache::compute_state_sizes(*c, cc);
  // three ratio-2 sources and one ratio-1 source, (512 + 128) bf16 values per entry
  EXPECT_DOUBLE_EQ(s.bytes_per_token, 3 * 640.0 * 2 / 2 + 640.0 * 2);
  EXPECT_EQ(s.ring_bytes, 40 * (128 + 3) * 512 * 2);
  EXPECT_EQ(s.frontier_bytes, 3 * (2 + 3) * 2 * 512 * 4 + (4 + 3) * 4);
  auto L = cache::compute_state_layout(*c, cc);
  ASSERT_TRUE(L.is_ok()) << L.status().message();
  EXPECT_EQ(L->block_size, 16);
  EXPECT_EQ(L->layers.size(), 40u);
  EXPECT_EQ(L->layers[3].entries_offset, -1);  // reuse layers own no compressed state
  EXPECT_EQ(L->layers[3].frontier_offset, -1);
  EXPECT_EQ(L->layers[2].entries_per_block, 8);
  EXPECT_EQ(L->layers[2].frontier_rows, 5);
  EXPECT_EQ(L->layers[20].entries_per_block, 16);
  EXPECT_EQ(L->layers[20].frontier_offset, -1);  // ratio 1: every token is its own group
  EXPECT_GE(L->layers[20].index_keys_offset, 0);
  EXPECT_EQ(L->ngram_rows, 7);
  EXPECT_GE(L->ngram_offset, 0);
  cc.block_size = 24;
  EXPECT_TRUE(cache::compute_state_layout(*c, cc).is_ok());
  cc.block_size = 25;
  EXPECT_FALSE(cache::compute_state_layout(*c, cc).is_ok());
}

// A field of the wrong type in the official form (read with json::value()) is a config error, not a crash.
TEST(V41Config, WrongTypedOfficialFieldIsAnError) {
  json j = official_flash();
  j["original_seq_len"] = "x";
  expect_error(j, "malformed field");
  j = official_flash();
  j["eos_token_id"] = json::array({"x"});
  expect_error(j, "eos_token_id[0]");
}
