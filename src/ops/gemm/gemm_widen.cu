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

// The same widening, 16 weights a thread (one 16-byte load, two 16-byte stores) under one scale: K % 16 == 0,
// block_k % 16 == 0, data and out 16-byte aligned.
__global__ void __launch_bounds__(kThreads) widen_fp8_bf16_vec_kernel(const uint8_t* data, const uint8_t* scale, int K,
                                                                       int block_n, int block_k, uint16_t* out) {
  const int64_t n = blockIdx.x;
  const int k = 16 * (int(blockIdx.y) * kThreads + int(threadIdx.x));
  if (k >= K) return;
  const uint4 codes = __ldg(reinterpret_cast<const uint4*>(data + n * K + k));
  const uint32_t sb = __ldg(scale + int64_t(int(n) / block_n) * ((K + block_k - 1) / block_k) + k / block_k);
  const float sc = dsinfer::small_float::from_bits(dsinfer::small_float::e8m0_f32_bits(sb));
  const uint32_t word[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t c = word[i / 2] >> (16 * (i % 2));
    o[i] = uint32_t(widen_one(c & 0xFFu, sc)) | (uint32_t(widen_one((c >> 8) & 0xFFu, sc)) << 16);
  }
  uint4* dst = reinterpret_cast<uint4*>(out + n * K + k);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

}  // namespace

void launch_widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, void* stream) {
  const bool vec = w.cols % 16 == 0 && w.block_k % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec) {
    const dim3 grid{unsigned(w.rows), unsigned((w.cols / 16 + kThreads - 1) / kThreads)};
    widen_fp8_bf16_vec_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), int(w.cols), int(w.block_n),
        int(w.block_k), out);
    return;
  }
  const dim3 grid{unsigned(w.rows), unsigned((w.cols / 4 + kThreads - 1) / kThreads)};
  widen_fp8_bf16_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), int(w.cols), int(w.block_n),
      int(w.block_k), out);
}

}  // namespace dsinfer::ops::cuda::detail
