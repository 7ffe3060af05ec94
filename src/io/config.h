// ModelConfig: the DeepSeek-V4 hyper-parameters, read from config.json in either form seen in the wild:
// the normalized transformers form (layer_types, mlp_layer_types, rope_parameters{main,compress}) and the
// official DeepSeek form (compress_ratios incl. the trailing MTP entry, num_hash_layers, rope_scaling,
// expert_dtype, quantization_config). Field names are the config.json keys.
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

struct ModelConfig {
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

  int64_t rope_dim() const { return qk_rope_head_dim; }
  int64_t nope_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t ratio(int64_t layer) const { return compress_ratios[size_t(layer)]; }
  const RopeParams& rope_for_layer(int64_t layer) const {
    return compress_ratios[size_t(layer)] == 0 ? rope_main : rope_compress;
  }
};

Result<ModelConfig> parse_model_config_json(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& model_dir);  // reads model_dir/config.json

}  // namespace dsinfer::io
