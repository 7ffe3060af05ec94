// ModelConfig: the DeepSeek-V4 hyper-parameters, read from config.json in either form seen in the wild:
// the normalized transformers form (layer_types, mlp_layer_types, rope_parameters{main,compress}) and the
// official DeepSeek form (compress_ratios incl. the trailing MTP entry, num_hash_layers, rope_scaling,
// expert_dtype, quantization_config). Field names are the config.json keys. DeepSeek-V4.1 configs (arch
// DeepseekV41) fill the same fields plus `v41`; their layers are Sliding (ratio 0) or CSA2 (ratio 2 / 1).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config_enums.h"

namespace dsinfer::io {

struct RopeParams {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 1.0;  // multiplies cos/sin (HF); official never scales
};

// DeepSeek-V4.1 additions (research/dsv41-architecture.md §1; parsed by io/config_v41.cpp). Layer ids are
// backbone layer indices.
struct V41Params {
  std::vector<int64_t> kv_source_layer_ids;     // own a compressor; publish compressed KV + indexer keys
  std::vector<int64_t> index_source_layer_ids;  // run the indexer; publish top-k indices
  int64_t candidate_source_layer_id = -1;       // < 0: no two-level (candidate block) selection
  int64_t candidate_topk_blocks = 0, candidate_block_size = 0;
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;  // one table (rows) per engram layer
  int64_t engram_max_ngram_size = 0, engram_vocab_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_id = 2, engram_compressed_vocab_size = 0;
  double gate_temp = 1.0;                       // router logits are divided by it
  int64_t image_token_id = 129264, pad_token_id = -1;
  bool vision = false;                          // a vision tower is configured (ffn.gate.bias_vl, image_* exist)
  // DSpark drafter (mtp.*): parsed for the drafter, unused by the backbone forward.
  int64_t dspark_block_size = 0, dspark_noise_token_id = -1, dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0, dspark_num_experts_per_tok = 0;
  std::vector<int64_t> dspark_target_layer_ids;
};

struct ModelConfig {
  io::Arch arch = io::Arch::DeepseekV4;
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, head_dim = 0, qk_rope_head_dim = 0;
  int64_t q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t sliding_window = 0;
  std::vector<AttnType> layer_types;      // size num_hidden_layers
  std::vector<MlpType> mlp_layer_types;   // size num_hidden_layers
  std::vector<int64_t> compress_ratios;   // per layer: 0, csa ratio or hca ratio
  int64_t csa_ratio = 4, hca_ratio = 128;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t n_routed_experts = 0, num_experts_per_tok = 0, n_shared_experts = 1, moe_intermediate_size = 0;
  ScoringFunc scoring_func = ScoringFunc::SqrtSoftplus;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  double swiglu_limit = 0.0;  // 0 = no clamp
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, rms_norm_eps = 1e-6;
  RopeParams rope_main, rope_compress;
  int64_t num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0, eos_token_id = 1;
  int64_t max_position_embeddings = 0;
  // Storage formats (informational for the loader; the loader trusts each tensor's own dtype).
  bool fp8_weights = false;          // quantization_config.quant_method == fp8
  int64_t fp8_block_n = 128, fp8_block_k = 128;
  ExpertDtype expert_dtype = ExpertDtype::Same;
  V41Params v41;  // arch == DeepseekV41 only

  bool is_v41() const { return arch == io::Arch::DeepseekV41; }
  // V4.1 roles of a layer: the KV source / index source whose compressed KV / top-k it reads (the most recent
  // one at or before it; -1 for ratio-0 layers), and its engram table (index into engram_layer_ids, or -1).
  int64_t kv_source_of(int64_t layer) const;
  int64_t index_source_of(int64_t layer) const;
  int64_t engram_index(int64_t layer) const;

  int64_t rope_dim() const { return qk_rope_head_dim; }
  int64_t nope_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t ratio(int64_t layer) const { return compress_ratios[size_t(layer)]; }
  const RopeParams& rope_for_layer(int64_t layer) const {
    return compress_ratios[size_t(layer)] == 0 ? rope_main : rope_compress;
  }
};

Result<ModelConfig> parse_model_config_json(const std::string& json_text, const std::string& source);
// DeepSeek-V4.1 forms (io/config_v41.cpp): the transformers composite (model_type deepseek_v41 with text_config),
// its flat text config (deepseek_v41_text) and the official inference/config.json (ModelArgs names).
bool is_v41_config_json(const std::string& json_text);
Result<ModelConfig> parse_v41_config_json(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& model_dir);  // reads model_dir/config.json

}  // namespace dsinfer::io
