// Built only without CUDA (CMake drops it when DSINFER_CUDA is ON): the cuda backend is unavailable.
#include "runtime/cuda_runner.h"

namespace dsinfer::runtime {

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const RunnerOptions&) {
  return Status::error("this dsinfer was built without CUDA (configure with the 'cuda' preset for --backend cuda)");
}

}  // namespace dsinfer::runtime
