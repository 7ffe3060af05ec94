// The expert-parallel index remap kernel (see expert_remap_cuda.h): one thread per top-k entry, the same
// remap_expert as the CPU reference (parallel/expert_remap.h).
#include <cuda_runtime.h>

#include "ops/moe/expert_remap_launch.h"
#include "parallel/expert_remap.h"

namespace dsinfer::ops::cuda::detail {

namespace {

__global__ void remap_experts_kernel(int32_t* idx, int64_t n, int32_t lo, int32_t hi) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) idx[i] = parallel::remap_expert(idx[i], lo, hi);
}

}  // namespace

void launch_remap_experts(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream) {
  remap_experts_kernel<<<unsigned((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(idx, n, lo, hi);
}

}  // namespace dsinfer::ops::cuda::detail
