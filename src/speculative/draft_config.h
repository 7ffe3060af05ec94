// Drafter configuration for speculative decoding: which drafter (DSpark, MTP-1, none) and the DSpark keys of
// config.json (dspark_block_size, dspark_markov_rank, dspark_target_layer_ids, dspark_noise_token_id,
// dspark_n_routed_experts, dspark_num_experts_per_tok, dspark_sliding_window, dspark_sts_temperatures[_greedy],
// mtp1_file), see docs/small_model.md. The drafter layers otherwise share the target's dimensions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsinfer::speculative {

enum class SpecMethod { kOff, kDspark, kMtp1 };
Result<SpecMethod> parse_spec_method(const std::string& name);  // "off", "dspark", "mtp1"
const char* spec_method_name(SpecMethod m);

struct DraftConfig {
  int64_t num_layers = 0;                 // num_nextn_predict_layers (DSpark backbone layers)
  int64_t block_size = 0;                 // gamma: anchor + block_size - 1 noise slots -> block_size drafts
  int64_t markov_rank = 0;
  int64_t noise_token_id = -1;
  int64_t n_routed_experts = 0, num_experts_per_tok = 0;
  int64_t sliding_window = 0;
  std::vector<int64_t> target_layer_ids;  // target layers whose outputs (mean of the hc streams) form the context
  std::vector<double> sts_temperatures;         // confidence-logit temperatures, temperature-1 sampling
  std::vector<double> sts_temperatures_greedy;  // the same for greedy requests
  std::string mtp1_file;                  // relative to the model directory ("" = none)
};

// Reads model_dir/config.json (its text_config when nested, as DeepSeek-V4.1's; official ModelArgs names such as
// n_mtp_layers accepted). A config without DSpark keys, or with num_nextn_predict_layers 0, gives num_layers 0 (no
// DSpark drafter); present keys are checked (types, ranges, the target layer ids against num_hidden_layers).
Result<DraftConfig> load_draft_config(const std::string& model_dir);

}  // namespace dsinfer::speculative
