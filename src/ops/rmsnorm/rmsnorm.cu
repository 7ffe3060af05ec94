// CUDA RMSNorm kernel (see rmsnorm_cuda.h): one block of 256 threads per row, double sum of squares.
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/rmsnorm/rmsnorm_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
__global__ void rmsnorm_kernel(const float* x, int64_t dim, const float* w, float eps, float* y, bool round) {
  dsinfer::cuda::pdl_wait_then_release();
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(xr[i]) * double(xr[i]);
  ss = dsinfer::cuda::dev::block_sum(ss);  // every read of xr happens before this barrier: x == y is safe
  const float inv = float(1.0 / sqrt(ss / double(dim) + double(eps)));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __fmul_rn(__fmul_rn(xr[i], inv), w ? w[i] : 1.0f);
    yr[i] = round ? dsinfer::cuda::dev::round_bf16(v) : v;
  }
}
}  // namespace

void launch_rmsnorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y, void* stream,
                    bool round_bf16) {
  dsinfer::cuda::pdl_launch(rmsnorm_kernel, dim3(unsigned(rows)), dim3(256), 0, static_cast<cudaStream_t>(stream), x, dim,
                            w, eps, y, round_bf16);
}

}  // namespace dsinfer::ops::cuda::detail
