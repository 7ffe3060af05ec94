// create_cpu_drafter (see drafter.h).
#include "speculative/drafter.h"

#include "speculative/dspark.h"
#include "speculative/mtp1.h"

namespace dsinfer::speculative {

Result<std::unique_ptr<Drafter>> create_cpu_drafter(SpecMethod method, const std::string& model_dir,
                                                    const io::ModelConfig& target, int32_t num_slots) {
  if (method == SpecMethod::kOff) return Status::error("create_cpu_drafter: speculative decoding is off");
  DSI_ASSIGN_OR_RETURN(DraftConfig dc, load_draft_config(model_dir));
  DSI_ASSIGN_OR_RETURN(SharedWeights sw, load_shared_weights(target, model_dir));
  if (method == SpecMethod::kDspark) {
    DSI_ASSIGN_OR_RETURN(DsparkWeights w, load_dspark_weights(target, dc, model_dir));
    return std::unique_ptr<Drafter>(new DsparkCpu(target, std::move(dc), std::move(w), std::move(sw), num_slots));
  }
  DSI_ASSIGN_OR_RETURN(Mtp1Weights w, load_mtp1_weights(target, dc, model_dir));
  return std::unique_ptr<Drafter>(new Mtp1Cpu(target, std::move(w), std::move(sw), num_slots));
}

}  // namespace dsinfer::speculative
