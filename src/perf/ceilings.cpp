// The ceilings option of `dsinfer bench` (perf/ceilings.h); the measurement itself is ceilings_cuda.cpp.
#include "perf/ceilings.h"

namespace dsinfer::perf {

Status validate_ceilings_mode(const std::string& mode) {
  if (mode == "measured" || mode == "nominal") return Status::ok();
  return Status::errorf("bench ceilings must be 'measured' or 'nominal', found '{}'", mode);
}

}  // namespace dsinfer::perf
