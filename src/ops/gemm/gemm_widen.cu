// FP8 block-scaled weight -> bf16 (see gemm_widen_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "core/small_float.h"
#include "ops/gemm/gemm_widen_launch.h"

namespace dsinfer::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

// Two e4m3 codes (low byte first) times a scale, as two bf16 values (low half first). The hardware conversion
// e4m3x2 -> f16x2 is exact (e4m3's range and subnormals are f16 normals; NaN stays NaN), f16 -> f32 exact, the
// product by a power of two exact (an fp32 subnormal result only for scales below 2^-117, kept: no flush to zero),
// and the bf16 rounding exact (4 significant bits). The bits equal the scalar decode small_float::e4m3_f32_bits
// times the scale rounded to bf16 (the CPU reference, tests/gpu/test_v41_fast_gpu.cpp); session 15's per-element
// software decode made the widening ALU-bound (56 us for wo_a's 32 MB on the H200).
__device__ __forceinline__ uint32_t widen_pair(uint32_t codes16, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes16 & 0xFFFFu), __NV_E4M3);
  const float lo = __half2float(__ushort_as_half(h.x)), hi = __half2float(__ushort_as_half(h.y));
  const __nv_bfloat162 b = __floats2bfloat162_rn(__fmul_rn(lo, scale), __fmul_rn(hi, scale));
  return uint32_t(__bfloat16_as_ushort(b.x)) | (uint32_t(__bfloat16_as_ushort(b.y)) << 16);
}

__device__ __forceinline__ float e8m0(uint32_t sb) {
  return dsinfer::small_float::from_bits(dsinfer::small_float::e8m0_f32_bits(sb));
}

// Thread t widens weights k = 4 (blockIdx.y * kThreads + t) .. + 3 of row blockIdx.x (K % 4 == 0; each weight uses
// its own scale block, so any block_k works: a pair that straddles two blocks is widened one weight at a time).
__global__ void __launch_bounds__(kThreads) widen_fp8_bf16_kernel(const uint8_t* data, const uint8_t* scale, int K,
                                                                   int block_n, int block_k, uint16_t* out) {
  const int64_t n = blockIdx.x;
  const int k = 4 * (int(blockIdx.y) * kThreads + int(threadIdx.x));
  if (k >= K) return;
  const uint32_t codes = __ldg(reinterpret_cast<const uint32_t*>(data + n * K + k));
  const uint8_t* srow = scale + int64_t(int(n) / block_n) * ((K + block_k - 1) / block_k);
  uint32_t o[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int b0 = (k + 2 * j) / block_k, b1 = (k + 2 * j + 1) / block_k;
    const uint32_t c = codes >> (16 * j);
    const float s0 = e8m0(__ldg(srow + b0));
    o[j] = b0 == b1 ? widen_pair(c, s0)
                    : (widen_pair(c & 0xFFu, s0) & 0xFFFFu) | (widen_pair((c >> 8) & 0xFFu, e8m0(__ldg(srow + b1))) << 16);
  }
  *reinterpret_cast<uint2*>(out + n * K + k) = make_uint2(o[0], o[1]);
}

// 16 weights a thread (one 16-byte load, two 16-byte stores) under one scale, over a flat grid of 16-weight chunks
// (rows of any K % 16 == 0 share blocks, so a short K like wq_b's 1,024 keeps every thread busy): block_k % 16 == 0,
// data and out 16-byte aligned.
__global__ void __launch_bounds__(kThreads) widen_fp8_bf16_vec_kernel(const uint8_t* data, const uint8_t* scale,
                                                                       int64_t chunks, int K, int block_n, int block_k,
                                                                       uint16_t* out) {
  const int per_row = K / 16, kb_row = (K + block_k - 1) / block_k;
  for (int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * kThreads) {
    const int64_t n = c / per_row;
    const int k = int(c - n * per_row) * 16;
    const uint4 codes = __ldg(reinterpret_cast<const uint4*>(data) + c);
    const float sc = e8m0(__ldg(scale + (n / block_n) * kb_row + k / block_k));
    const uint32_t word[4] = {codes.x, codes.y, codes.z, codes.w};
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = widen_pair(word[i / 2] >> (16 * (i % 2)), sc);
    uint4* dst = reinterpret_cast<uint4*>(out) + 2 * c;
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

}  // namespace

void launch_widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, void* stream) {
  const bool vec = w.cols % 16 == 0 && w.block_k % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec) {
    const int64_t chunks = w.rows * (w.cols / 16);
    // A flat grid of at most 4,096 blocks (over 30 per SM on an H200); each thread then walks a few chunks.
    const int64_t want = (chunks + kThreads - 1) / kThreads;
    const unsigned grid = unsigned(want < 4096 ? want : 4096);
    widen_fp8_bf16_vec_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), chunks, int(w.cols),
        int(w.block_n), int(w.block_k), out);
    return;
  }
  const dim3 grid{unsigned(w.rows), unsigned((w.cols / 4 + kThreads - 1) / kThreads)};
  widen_fp8_bf16_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), int(w.cols), int(w.block_n),
      int(w.block_k), out);
}

}  // namespace dsinfer::ops::cuda::detail
