// Factory of the CUDA backend (implemented in src/runtime/cuda_runner_cuda.cpp when built with CUDA; without
// CUDA the stub in cuda_runner_none.cpp reports that the binary has no CUDA backend).
#pragma once
#include <memory>

#include "runtime/model_runner.h"

namespace dsinfer::runtime {

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const RunnerOptions& opts);

}  // namespace dsinfer::runtime
