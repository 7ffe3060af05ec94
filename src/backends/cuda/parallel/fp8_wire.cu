// FP8 dispatch wire kernels (see fp8_wire_cuda.h). Pack: one block of 128 threads per (row, 128-value block; rows on the grid's x), one
// value a thread; the block's amax by warp shuffles and shared memory, s = amax / 448 and x / s in IEEE division
// (__fdiv_rn, as the host's), the e4m3 code by the RNE saturating conversion (__nv_cvt_float_to_fp8 with
// __NV_SATFINITE, as core/dtypes.cpp's f32_to_e4m3 for finite values). Unpack: the code's exact fp32 value times s.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backends/cuda/parallel/fp8_wire_cuda.h"
#include "core/small_float.h"
#include "parallel/fp8_wire.h"

namespace dsinfer::backends::detail {

namespace {

constexpr int kBlock = int(parallel::kFp8WireBlock);  // threads per CUDA block = values per scale block

__global__ void fp8_wire_pack_kernel(const float* x, int64_t dim, const int32_t* rows, uint8_t* out,
                                     int64_t row_bytes, int64_t scale_offset) {
  __shared__ float warp_max[kBlock / 32];
  const int64_t j = blockIdx.x, b = blockIdx.y, i = b * kBlock + threadIdx.x;
  const int64_t src = rows ? int64_t(rows[j]) : j;
  const float v = i < dim ? x[src * dim + i] : 0.0f;
  float m = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  float amax = warp_max[0];
  for (int w = 1; w < kBlock / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float s = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  uint8_t* row = out + j * row_bytes;
  if (i < dim) row[i] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(v, s), __NV_SATFINITE, __NV_E4M3));
  else if (i < scale_offset) row[i] = 0;  // the padding before the scales
  if (threadIdx.x == 0) reinterpret_cast<float*>(row + scale_offset)[b] = s;
}

__global__ void fp8_wire_unpack_kernel(const uint8_t* in, int64_t dim, int64_t row_bytes, int64_t scale_offset,
                                       float* out) {
  const int64_t j = blockIdx.x, i = int64_t(blockIdx.y) * kBlock + threadIdx.x;
  if (i >= dim) return;
  const uint8_t* row = in + j * row_bytes;
  const float s = reinterpret_cast<const float*>(row + scale_offset)[i / kBlock];
  const float q = small_float::from_bits(small_float::e4m3_f32_bits(row[i]));
  out[j * dim + i] = __fmul_rn(q, s);
}

}  // namespace

void launch_fp8_wire_pack(const float* x, int64_t dim, const int32_t* rows, int64_t n, uint8_t* out, void* stream) {
  if (n <= 0 || dim <= 0) return;
  const dim3 grid(unsigned(n), unsigned(parallel::fp8_wire_scales(dim)));  // rows on x: up to 2^31 - 1
  fp8_wire_pack_kernel<<<grid, kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      x, dim, rows, out, parallel::fp8_wire_row_bytes(dim), parallel::fp8_wire_scale_offset(dim));
}

void launch_fp8_wire_unpack(const uint8_t* in, int64_t n, int64_t dim, float* out, void* stream) {
  if (n <= 0 || dim <= 0) return;
  const dim3 grid(unsigned(n), unsigned(parallel::fp8_wire_scales(dim)));  // rows on x: up to 2^31 - 1
  fp8_wire_unpack_kernel<<<grid, kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      in, dim, parallel::fp8_wire_row_bytes(dim), parallel::fp8_wire_scale_offset(dim), out);
}

}  // namespace dsinfer::backends::detail
