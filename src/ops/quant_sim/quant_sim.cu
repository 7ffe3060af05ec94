// CUDA numerics simulations (see quant_sim_cuda.h): each row is staged in shared memory and processed by the
// block-cooperative routines of cuda/ops_device.cuh.
#include <algorithm>

#include "cuda/ops_device.cuh"
#include "ops/quant_sim/quant_sim_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;

__global__ void fp8_block_sim_kernel(float* x, int64_t row_stride, int n, int block) {
  extern __shared__ float fp8_row[];
  float* r = x + int64_t(blockIdx.x) * row_stride;
  for (int i = threadIdx.x; i < n; i += blockDim.x) fp8_row[i] = r[i];
  dev::smem_block_quant_sim(fp8_row, n, block, true);
  for (int i = threadIdx.x; i < n; i += blockDim.x) r[i] = fp8_row[i];
}

__global__ void hadamard_fp4_kernel(float* x, int dim, int block) {
  extern __shared__ double had_scratch[];  // [dim] doubles, then [dim] floats
  float* v = reinterpret_cast<float*>(had_scratch + dim);
  float* r = x + int64_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) v[i] = r[i];
  dev::smem_hadamard(v, dim, had_scratch);
  dev::smem_block_quant_sim(v, dim, block, false);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) r[i] = v[i];
}
__global__ void round_bf16_kernel(float* x, int64_t rows, int64_t ld, int64_t col0, int64_t width) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float* v = x + (i / width) * ld + col0 + i % width;
    *v = dev::round_bf16(*v);
  }
}

}  // namespace

void launch_round_bf16(float* x, int64_t rows, int64_t ld, int64_t col0, int64_t col1, void* stream) {
  const int64_t n = rows * (col1 - col0);
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 4096));
  round_bf16_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, rows, ld, col0, col1 - col0);
}

void launch_fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t n, int64_t block, void* stream) {
  fp8_block_sim_kernel<<<unsigned(rows), 128, size_t(n) * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
      x, row_stride, int(n), int(block));
}

void launch_hadamard_fp4_sim(float* x, int64_t rows, int64_t dim, int64_t block, void* stream) {
  hadamard_fp4_kernel<<<unsigned(rows), 128, size_t(dim) * (sizeof(double) + sizeof(float)),
                        static_cast<cudaStream_t>(stream)>>>(x, int(dim), int(block));
}

}  // namespace dsinfer::ops::cuda::detail
