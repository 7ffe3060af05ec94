// load_cpu_model (see cpu_model.h): the architecture in config.json picks the reference model.
#include "backends/cpu/cpu_model.h"

#include "model/deepseek_v41.h"

namespace dsinfer::backends {

Result<std::unique_ptr<CpuModel>> load_cpu_model(const std::string& model_dir, const model::Numerics& num,
                                                 model::EngramPlacement engram) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(model_dir));
  DSI_RETURN_IF_ERROR(model::check_engram_placement(cfg, engram, model_dir));
  if (engram == model::EngramPlacement::kSharded)
    return Status::error("--engram-placement sharded splits the tables over several ranks, which the cpu backend "
                         "runs for DeepSeek-V4 only so far (use host or device)");
  if (cfg.is_v41()) {
    DSI_ASSIGN_OR_RETURN(auto m, model::DeepseekV41Cpu::load(model_dir, num, engram));
    return std::unique_ptr<CpuModel>(new CpuModelOf<model::DeepseekV41Cpu>(std::move(m)));
  }
  DSI_ASSIGN_OR_RETURN(auto m, model::DeepseekV4Cpu::load(model_dir, num));
  return std::unique_ptr<CpuModel>(new CpuModelOf<model::DeepseekV4Cpu>(std::move(m)));
}

}  // namespace dsinfer::backends
