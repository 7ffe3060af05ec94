// load_cpu_model (see cpu_model.h): the architecture in config.json picks the reference model.
#include "backends/cpu/cpu_model.h"

#include "model/deepseek_v41.h"

namespace dsinfer::backends {

Result<std::unique_ptr<CpuModel>> load_cpu_model(const std::string& model_dir, const model::Numerics& num) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(model_dir));
  if (cfg.is_v41()) {
    DSI_ASSIGN_OR_RETURN(auto m, model::DeepseekV41Cpu::load(model_dir, num));
    return std::unique_ptr<CpuModel>(new CpuModelOf<model::DeepseekV41Cpu>(std::move(m)));
  }
  DSI_ASSIGN_OR_RETURN(auto m, model::DeepseekV4Cpu::load(model_dir, num));
  return std::unique_ptr<CpuModel>(new CpuModelOf<model::DeepseekV4Cpu>(std::move(m)));
}

}  // namespace dsinfer::backends
