// Factory of the CUDA backend (built only with CUDA; engine/runner_factory.cpp calls it).
#pragma once
#include <memory>

#include "runner/model_runner.h"

namespace dsinfer::backends {

Result<std::unique_ptr<runner::ModelRunner>> create_cuda_runner(const runner::RunnerOptions& opts);

}  // namespace dsinfer::backends
