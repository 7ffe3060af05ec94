// The backend factory: runner::RunnerOptions -> the backend's runner.
#include "engine/runner_factory.h"

#include <string>

#include "backends/cpu/cpu_parallel_runner.h"
#include "backends/cpu/cpu_runner.h"
#include "parallel/parallel_plan.h"
#if DSINFER_HAS_CUDA
#include "backends/cuda/parallel/parallel_runner.h"
#include "backends/cuda/runner/cuda_runner.h"
#endif

namespace dsinfer::engine {

Result<std::unique_ptr<runner::ModelRunner>> create_runner(const runner::RunnerOptions& opts) {
  if (opts.eplb && opts.batch_invariant)
    return Status::error("--eplb cannot be combined with --batch-invariant: a token's expert replica (and so the GPU "
                         "that computes it) follows its index in the step, which makes results depend on the batch");
  if (opts.backend == runner::Backend::kCpu) {
    // torchrun variables (WORLD_SIZE > 1): one process per rank, this one holding rank RANK (docs/multi_gpu.md
    // "Bootstrap").
    const std::map<std::string, std::string> env = parallel::torchrun_env();
    DSI_RETURN_IF_ERROR(parallel::validate_parallel({opts.gpus, opts.expert_parallel_size, opts.data_parallel_size,
                                                     opts.tensor_parallel_size}, env, -1, true).status());
    DSI_ASSIGN_OR_RETURN(const std::optional<parallel::LaunchEnv> launch, parallel::parse_launch_env(env, -1));
    if (opts.eplb || opts.num_redundant_experts != 0)
      return Status::error("--eplb / --num-redundant-experts need the cuda backend with --gpus > 1");
    if (!opts.fault_injection.empty() && opts.gpus < 2) return Status::error("--inject-fault needs --gpus > 1");
    // --gpus N on the cpu backend: N ranks of the reference in this process (in-process communicator), or this
    // process's rank of N (socket communicator).
    if (opts.gpus > 1) return backends::create_cpu_parallel_runner(opts, launch);
    return backends::create_cpu_runner(opts);
  }
#if DSINFER_HAS_CUDA
  // One CUDA runner for every model family (backends/cuda/runner/cuda_forward.h picks the family's forward).
  if (opts.gpus > 1) return backends::create_parallel_runner(opts);
  return backends::create_cuda_runner(opts);
#else
  return Status::error("this dsinfer was built without CUDA (configure with the 'cuda' preset for the cuda backend)");
#endif
}

}  // namespace dsinfer::engine
