// Argument checks and launches of the elementwise helpers (see elementwise_cuda.h).
#include "ops/elementwise/elementwise_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/elementwise/elementwise_launch.h"

namespace dsinfer::ops::cuda {

Status scale_cuda(float* x, int64_t n, float s, void* stream) {
  if (n <= 0) return Status::ok();
  if (!x) return Status::error("scale_cuda: null pointer");
  detail::launch_scale(x, n, s, stream);
  DSI_CUDA_LAUNCHED("scale_cuda");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
