// create_cpu_drafter (see drafter.h).
#include "speculative/drafter.h"

#include "speculative/dspark.h"
#include "speculative/mtp1.h"

namespace dsinfer::speculative {

Result<std::unique_ptr<Drafter>> create_cpu_drafter(const SpeculativeConfig& cfg, const io::ModelConfig& target,
                                                    int32_t num_slots) {
  if (!cfg.enabled()) return Status::error("create_cpu_drafter: speculative decoding is off");
  DSI_ASSIGN_OR_RETURN(SharedWeights sw, load_shared_weights(target, cfg.model_dir));
  if (cfg.method == SpecMethod::kDspark) {
    DSI_ASSIGN_OR_RETURN(DsparkWeights w, target.is_v41() ? load_dspark_weights_v41(target, cfg.draft, cfg.model_dir)
                                                           : load_dspark_weights(target, cfg.draft, cfg.model_dir));
    return std::unique_ptr<Drafter>(new DsparkCpu(target, cfg.draft, std::move(w), std::move(sw), num_slots));
  }
  if (target.is_v41())
    return Status::errorf("{}: DeepSeek-V4.1 has no MTP-1 drafter (its drafter is DSpark: --speculative dspark)",
                          cfg.model_dir);
  DSI_ASSIGN_OR_RETURN(Mtp1Weights w, load_mtp1_weights(target, cfg.draft, cfg.model_dir));
  return std::unique_ptr<Drafter>(new Mtp1Cpu(target, std::move(w), std::move(sw), num_slots));
}

}  // namespace dsinfer::speculative
