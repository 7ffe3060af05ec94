// Expert-parallel index remap (see expert_remap_cuda.h): argument checks and the launch.
#include "ops/moe/expert_remap_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/moe/expert_remap_launch.h"

namespace dsinfer::ops::cuda {

Status remap_experts_cuda(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream) {
  if (n < 0 || lo < 0 || hi < lo) return Status::errorf("remap_experts_cuda: bad n={} or range [{}, {})", n, lo, hi);
  if (n == 0) return Status::ok();
  if (!idx) return Status::error("remap_experts_cuda: null index array");
  if ((n + 255) / 256 > 0x7fffffff) return Status::error("remap_experts_cuda: too many entries");
  detail::launch_remap_experts(idx, n, lo, hi, stream);
  DSI_CUDA_LAUNCHED("remap_experts_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
