// FP8 block-scaled weight -> bf16 (see gemm_widen_cuda.h).
#include <cuda_bf16.h>

#include "core/small_float.h"
#include "ops/gemm/gemm_widen_launch.h"

namespace dsinfer::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint16_t widen_one(uint32_t code, float scale) {
  const float v = __fmul_rn(dsinfer::small_float::from_bits(dsinfer::small_float::e4m3_f32_bits(code)), scale);
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Block (n, c) widens row n, thread t its weights k = 4 (c * kThreads + t) .. + 3 (K % 4 == 0; each weight reads
// its own scale, so any block_k works). E8M0 scale bytes as core/small_float.h decodes them (0xFF NaN).
__global__ void __launch_bounds__(kThreads) widen_fp8_bf16_kernel(const uint8_t* data, const uint8_t* scale, int K,
                                                                   int block_n, int block_k, uint16_t* out) {
  const int64_t n = blockIdx.x;
  const int k = 4 * (int(blockIdx.y) * kThreads + int(threadIdx.x));
  if (k >= K) return;
  const uint32_t codes = __ldg(reinterpret_cast<const uint32_t*>(data + n * K + k));
  const uint8_t* srow = scale + int64_t(int(n) / block_n) * ((K + block_k - 1) / block_k);
  uint16_t v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t sb = __ldg(srow + (k + j) / block_k);
    v[j] = widen_one((codes >> (8 * j)) & 0xFFu, dsinfer::small_float::from_bits(dsinfer::small_float::e8m0_f32_bits(sb)));
  }
  *reinterpret_cast<ushort4*>(out + n * K + k) = make_ushort4(v[0], v[1], v[2], v[3]);
}

}  // namespace

void launch_widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, void* stream) {
  const dim3 grid{unsigned(w.rows), unsigned((w.cols / 4 + kThreads - 1) / kThreads)};
  widen_fp8_bf16_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), int(w.cols), int(w.block_n),
      int(w.block_k), out);
}

}  // namespace dsinfer::ops::cuda::detail
