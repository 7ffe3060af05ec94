// The backend factory: runner::RunnerOptions -> the backend's runner. The one place above both backends that names them.
#pragma once
#include <memory>

#include "runner/model_runner.h"

namespace dsinfer::engine {

// Creates the runner the options name; kCuda fails clearly when the binary was built without CUDA.
Result<std::unique_ptr<runner::ModelRunner>> create_runner(const runner::RunnerOptions& opts);

}  // namespace dsinfer::engine
