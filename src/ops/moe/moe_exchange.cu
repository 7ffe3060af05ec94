// Row packing of the expert dispatch (see moe_exchange_cuda.h): grid-stride elementwise kernels, bf16 rounded to
// nearest even (__float2bfloat16_rn, as moe_x_bf16_row).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "ops/moe/moe_exchange_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

__global__ void pack_rows_kernel(const float* x, int64_t dim, const int32_t* rows, int64_t n, bool bf16, void* out) {
  const int64_t total = n * dim;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / dim, d = i - p * dim;
    const float v = x[(rows ? int64_t(rows[p]) : p) * dim + d];
    if (bf16)
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else
      static_cast<float*>(out)[i] = v;
  }
}

__global__ void widen_rows_kernel(const void* in, int64_t count, bool bf16, float* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(in)[i]) : static_cast<const float*>(in)[i];
}

__global__ void fill_kernel(float* out, int64_t n, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

unsigned blocks(int64_t total) { return unsigned(std::clamp<int64_t>((total + 255) / 256, 1, 132 * 16)); }

}  // namespace

void launch_pack_rows(const float* x, int64_t dim, const int32_t* rows, int64_t n, bool bf16, void* out, void* stream) {
  pack_rows_kernel<<<blocks(n * dim), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, dim, rows, n, bf16, out);
}

void launch_widen_rows(const void* in, int64_t count, bool bf16, float* out, void* stream) {
  widen_rows_kernel<<<blocks(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(in, count, bf16, out);
}

void launch_fill(float* out, int64_t n, float value, void* stream) {
  fill_kernel<<<blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, n, value);
}

}  // namespace dsinfer::ops::cuda::detail
