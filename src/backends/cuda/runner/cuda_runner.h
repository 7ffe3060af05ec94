// Factory of the CUDA backend on one GPU (built only with CUDA; engine/runner_factory.cpp calls it, and
// backends/cuda/parallel for several GPUs).
#pragma once
#include <memory>

#include "io/config.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

// The config the options run (DeepSeek-V4 or V4.1): loaded, a numerics profile its GPU forward cannot run refused,
// cut to opts.num_layers, and the parallel sizes checked against
// the visible GPUs (docs/multi_gpu.md). Both the one-GPU runner and the ParallelRunner start from it.
Result<io::ModelConfig> cuda_model_config(const runner::RunnerOptions& opts);

// One GPU (opts.gpus == 1; several GPUs: create_parallel_runner, backends/cuda/parallel/parallel_runner.h).
Result<std::unique_ptr<runner::ModelRunner>> create_cuda_runner(const runner::RunnerOptions& opts);

}  // namespace dsinfer::backends
