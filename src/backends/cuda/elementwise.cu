// Elementwise helpers (see elementwise_cuda.h).
#include "cuda/cuda_common.h"
#include "backends/cuda/elementwise_cuda.h"

namespace dsinfer::ops::cuda {

namespace {
__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] *= s;
}
}  // namespace

Status scale_cuda(float* x, int64_t n, float s, void* stream) {
  if (n <= 0) return Status::ok();
  if (!x) return Status::error("scale_cuda: null pointer");
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 4096));
  scale_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, n, s);
  DSI_CUDA_LAUNCHED("scale_cuda");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
