// Argument checks and launch of the CUDA RMSNorm (see rmsnorm_cuda.h).
#include "ops/rmsnorm/rmsnorm_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/rmsnorm/rmsnorm_launch.h"

namespace dsinfer::ops::cuda {

Status rmsnorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y, void* stream,
               bool round_bf16) {
  if (rows < 0 || dim <= 0) return Status::errorf("rmsnorm: bad shape rows={} dim={}", rows, dim);
  if (rows == 0) return Status::ok();
  if (!x || !y) return Status::error("rmsnorm: null input or output");
  if (rows > 0x7fffffff) return Status::errorf("rmsnorm: {} rows exceed the grid limit", rows);
  detail::launch_rmsnorm(x, rows, dim, w, eps, y, stream, round_bf16);
  DSI_CUDA_LAUNCHED("rmsnorm_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
