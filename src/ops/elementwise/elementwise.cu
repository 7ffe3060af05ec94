// Elementwise kernels of the CUDA runner (see elementwise_cuda.h; launchers in elementwise_launch.h).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/pdl.cuh"
#include "ops/elementwise/elementwise_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
__global__ void scale_kernel(float* x, int64_t n, float s) {
  dsinfer::cuda::pdl_wait_then_release();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] *= s;
}
}  // namespace

void launch_scale(float* x, int64_t n, float s, void* stream) {
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 4096));
  dsinfer::cuda::pdl_launch(scale_kernel, dim3(unsigned(blocks)), dim3(256), 0, static_cast<cudaStream_t>(stream), x, n,
                            s);
}

}  // namespace dsinfer::ops::cuda::detail
