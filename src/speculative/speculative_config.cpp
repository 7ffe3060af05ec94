// SpeculativeConfig resolution (see speculative_config.h).
#include "speculative/speculative_config.h"

namespace dsinfer::speculative {

int32_t max_speculative_tokens(SpecMethod method, const DraftConfig& draft) {
  switch (method) {
    case SpecMethod::kDspark: return int32_t(draft.block_size);
    case SpecMethod::kMtp1: return 1;
    case SpecMethod::kOff: return 0;
  }
  return 0;
}

Result<SpeculativeConfig> resolve_speculative_config(const std::string& method, int32_t num_speculative_tokens,
                                                     int64_t budget, double min_survival,
                                                     const std::string& cost_model, const std::string& model_dir) {
  SpeculativeConfig c;
  DSI_ASSIGN_OR_RETURN(c.method, parse_spec_method(method));
  if (!c.enabled()) return c;
  if (budget < 0) return Status::errorf("speculative_budget must be >= 0, found {}", budget);
  if (!(min_survival >= 0 && min_survival <= 1))
    return Status::errorf("speculative_min_survival must be in [0, 1], found {}", min_survival);
  if (cost_model.empty())
    return Status::error("speculative_cost_model must be 'auto', 'off' or a file path, found an empty string");
  DSI_ASSIGN_OR_RETURN(c.draft, load_draft_config(model_dir));
  if (c.method == SpecMethod::kDspark && (c.draft.num_layers < 1 || c.draft.block_size < 1))
    return Status::errorf("speculative 'dspark': {}/config.json has no DSpark drafter (dspark_block_size / "
                          "num_nextn_predict_layers)", model_dir);
  const int32_t max_k = max_speculative_tokens(c.method, c.draft);
  if (num_speculative_tokens < 0 || num_speculative_tokens > max_k)
    return Status::errorf("num_speculative_tokens must be in [0, {}] for the {} drafter (0 = {}), found {}", max_k,
                          spec_method_name(c.method), max_k, num_speculative_tokens);
  c.num_speculative_tokens = num_speculative_tokens > 0 ? num_speculative_tokens : max_k;
  c.model_dir = model_dir;
  c.budget = budget;
  c.min_survival = min_survival;
  c.cost_model = cost_model;
  return c;
}

}  // namespace dsinfer::speculative
