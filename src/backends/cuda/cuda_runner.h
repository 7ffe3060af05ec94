// Factory of the CUDA backend (built only with CUDA; engine/runner_factory.cpp calls it).
#pragma once
#include <memory>

#include "engine/model_runner.h"

namespace dsinfer::backends {

Result<std::unique_ptr<engine::ModelRunner>> create_cuda_runner(const engine::RunnerOptions& opts);

}  // namespace dsinfer::backends
