// cuda_config.h: the CUDA runner's host-side config decisions.
#include "backends/cuda/runner/cuda_config.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace dsinfer::backends {

std::string cuda_numerics_refusal(const io::ModelConfig& cfg, const model::Numerics& num, int64_t gpus) {
  if (!cfg.is_v41() || !num.bf16_activations) return "";
  if (gpus > 1)
    return fmt::format("DeepSeek-V4.1 with '{}' numerics runs on one GPU only: the official MoE adds a token's experts "
                       "in one fp32 sum in expert-id order, which {} expert-parallel ranks would split (use --numerics "
                       "hf or hf-noqat on several GPUs)", num.name, gpus);
  return "";
}

void keep_first_layers(io::ModelConfig& cfg, int64_t n) {
  cfg.num_hidden_layers = n;
  cfg.layer_types.resize(size_t(n));
  cfg.mlp_layer_types.resize(size_t(n));
  cfg.compress_ratios.resize(size_t(n));
  if (!cfg.is_v41()) return;
  auto cut = [n](std::vector<int64_t>& ids) { std::erase_if(ids, [n](int64_t l) { return l >= n; }); };
  auto& v = cfg.v41;
  cut(v.kv_source_layer_ids);
  cut(v.index_source_layer_ids);
  if (v.candidate_source_layer_id >= n) v.candidate_source_layer_id = -1;
  std::vector<int64_t> ids, rows;
  for (size_t e = 0; e < v.engram_layer_ids.size(); ++e)
    if (v.engram_layer_ids[e] < n) {
      ids.push_back(v.engram_layer_ids[e]);
      if (e < v.engram_num_embeddings.size()) rows.push_back(v.engram_num_embeddings[e]);
    }
  v.engram_layer_ids = ids;
  v.engram_num_embeddings = rows;
}

}  // namespace dsinfer::backends
