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

}  // namespace dsinfer::runner
