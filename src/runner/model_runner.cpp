// The runner options' names -> enums (once, here: the engine, bench and check-reference all parse through them).
#include "runner/model_runner.h"

namespace dsinfer::runner {

Result<Backend> parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  return Status::errorf("unknown backend '{}' (expected cpu or cuda)", name);
}

Result<LoadFormat> parse_load_format(const std::string& name) {
  if (name == "auto") return LoadFormat::kAuto;
  if (name == "dummy") return LoadFormat::kDummy;
  return Status::errorf("unknown load format '{}' (expected auto or dummy)", name);
}

Result<RunnerOptions> runner_options(const std::string& model_dir, const std::string& backend,
                                     const std::string& numerics, const std::string& load_format) {
  RunnerOptions ro;
  ro.model_dir = model_dir;
  DSI_ASSIGN_OR_RETURN(ro.backend, parse_backend(backend));
  DSI_ASSIGN_OR_RETURN(ro.numerics, model::Numerics::from_name(numerics));
  DSI_ASSIGN_OR_RETURN(ro.load_format, parse_load_format(load_format));
  return ro;
}

}  // namespace dsinfer::runner
