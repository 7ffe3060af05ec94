// Argument checks and launch of the CUDA row argmax (see argmax_cuda.h).
#include "ops/argmax/argmax_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/argmax/argmax_launch.h"

namespace dsinfer::ops::cuda {

Status argmax_rows(const float* logits, int64_t R, int64_t V, int32_t* out, void* stream) {
  if (R < 0 || R > 0x7fffffff || V <= 0 || V > 0x7fffffff) return Status::errorf("argmax_rows: bad shape R={} V={}", R, V);
  if (R == 0) return Status::ok();
  if (!logits || !out) return Status::error("argmax_rows: null logits or output");
  detail::launch_argmax_rows(logits, R, V, out, stream);
  DSI_CUDA_LAUNCHED("argmax_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
