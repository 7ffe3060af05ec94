// Kernels of the cuBLASLt GEMM engine (see gemm_lt_launch.h): FP8 activation quantization, the one-time weight
// scale conversion and the bf16-output epilogue. The quantization arithmetic is gemm_lt_quant.h (shared with the
// host reference), so the kernel is bit-exact against it.
#include <cuda_runtime.h>

#include "ops/gemm/gemm_lt_launch.h"
#include "ops/gemm/gemm_lt_quant.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace lt = dsinfer::ops::gemm_lt;
constexpr int kWarpsPerBlock = 8;

// Warp w of the grid owns (row m, block b) = (w % s_ld, w / s_ld): consecutive warps write consecutive scale
// entries (of a matrix of row stride s_stride >= s_ld: 2 M for the stacked terms' one matrix). Lane l handles
// channels [4l, 4l + 4) of the block and stores their 4 codes as one 32-bit word.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    gemm_lt_quant_kernel(const float* __restrict__ x, int64_t M, int64_t ldx, int64_t K, uint8_t* __restrict__ q,
                         float* __restrict__ s, int64_t s_ld, uint8_t* __restrict__ q2, float* __restrict__ s2,
                         bool x_vec, int64_t s_stride) {
  const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  const int64_t blocks = K / lt::kActBlock;
  if (warp >= s_ld * blocks) return;
  const int64_t m = warp % s_ld, b = warp / s_ld;
  if (m >= M) {  // padding column of the scale matrix
    if (lane == 0) s[lt::act_scale_index(m, b, s_stride)] = 0.0f;
    if (lane == 0 && s2) s2[lt::act_scale_index(m, b, s_stride)] = 0.0f;
    return;
  }
  const float* xb = x + m * ldx + b * lt::kActBlock + 4 * lane;
  float v[4];
  lt::load_lane4(xb, x_vec, v);
  float sc = 0.0f;
  const uint32_t word = lt::quantize_warp(v, sc);
  const int64_t at = m * K + b * lt::kActBlock + 4 * lane;
  *reinterpret_cast<uint32_t*>(q + at) = word;
  if (lane == 0) s[lt::act_scale_index(m, b, s_stride)] = sc;
  if (!q2) return;  // warp-uniform
  float r[4];
  lt::residual4(v, word, sc, r);
  float sc2 = 0.0f;
  const uint32_t word2 = lt::quantize_warp(r, sc2);
  *reinterpret_cast<uint32_t*>(q2 + at) = word2;
  if (lane == 0) s2[lt::act_scale_index(m, b, s_stride)] = sc2;
}

__global__ void gemm_lt_wscale_kernel(const void* __restrict__ src, bool e8m0, int64_t nb, int64_t kb,
                                      float* __restrict__ dst, int64_t ld) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nb * ld; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ld, c = i % ld;
    float v = 0.0f;
    if (c < kb) {
      const int64_t j = r * kb + c;
      v = e8m0 ? small_float::from_bits(small_float::e8m0_f32_bits(static_cast<const uint8_t*>(src)[j]))
               : static_cast<const float*>(src)[j];
    }
    dst[lt::wscale_index(r, c, ld)] = v;  // == i
  }
}

__global__ void gemm_lt_epilogue_kernel(const uint16_t* __restrict__ t, int64_t M, int64_t N, float* __restrict__ y,
                                        int64_t ldy, bool acc) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    const float v = small_float::from_bits(small_float::bf16_f32_bits(t[i]));
    float* o = y + m * ldy + n;
    *o = acc ? *o + v : v;
  }
}

// The stacked two-term product d [2M, N] (rows [0, M) the first term's, [M, 2M) the second's) into y, in the order
// of the two accumulating matmuls it replaces: y = ((acc ? y : 0) + d1) + d2, one fp32 rounding each.
__global__ void gemm_lt_sum2_kernel(const float* __restrict__ d, int64_t M, int64_t N, float* __restrict__ y,
                                    int64_t ldy, bool acc) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float* o = y + m * ldy + n;
    const float d1 = __ldg(d + i), d2 = __ldg(d + M * N + i);
    const float v = acc ? __fadd_rn(*o, d1) : d1;
    *o = __fadd_rn(v, d2);
  }
}

// The same, 4 outputs a thread (N % 4 == 0, ldy % 4 == 0, d and y 16-byte aligned).
__global__ void gemm_lt_sum2_vec_kernel(const float4* __restrict__ d, int64_t M, int64_t N4, float* __restrict__ y,
                                        int64_t ldy, bool acc) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N4; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N4, n = i % N4;
    float4* o = reinterpret_cast<float4*>(y + m * ldy) + n;
    const float4 d1 = __ldg(d + i), d2 = __ldg(d + M * N4 + i);
    float4 v = d1;
    if (acc) {
      const float4 p = *o;
      v = make_float4(__fadd_rn(p.x, d1.x), __fadd_rn(p.y, d1.y), __fadd_rn(p.z, d1.z), __fadd_rn(p.w, d1.w));
    }
    *o = make_float4(__fadd_rn(v.x, d2.x), __fadd_rn(v.y, d2.y), __fadd_rn(v.z, d2.z), __fadd_rn(v.w, d2.w));
  }
}

// Row-major bf16 copy of x (round to nearest even, as small_float::f32_to_bf16_bits on the host).
__global__ void gemm_lt_bf16_kernel(const float* __restrict__ x, int64_t M, int64_t ldx, int64_t K,
                                    uint16_t* __restrict__ xb) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / K, k = i % K;
    xb[i] = small_float::f32_to_bf16_bits(x[m * ldx + k]);
  }
}

// The same conversion, 8 values a thread (two 16-byte loads, one 16-byte store): x 16-byte aligned, ldx % 4 == 0,
// K % 8 == 0. Block (c, m) converts columns [8 (c * 256 + t), +8) of row m (grid.y covers rows in slices of 65535).
__global__ void __launch_bounds__(256) gemm_lt_bf16_vec_kernel(const float* __restrict__ x, int64_t M, int64_t ldx,
                                                               int64_t K, uint16_t* __restrict__ xb) {
  const int64_t k = 8 * (int64_t(blockIdx.x) * 256 + threadIdx.x);
  if (k >= K) return;
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
    const float4* src = reinterpret_cast<const float4*>(x + m * ldx + k);
    const float4 a = __ldg(src), b = __ldg(src + 1);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = uint32_t(small_float::f32_to_bf16_bits(v[2 * i])) | (uint32_t(small_float::f32_to_bf16_bits(v[2 * i + 1])) << 16);
    *reinterpret_cast<uint4*>(xb + m * K + k) = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return unsigned(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));  // grid-stride loops cover the rest
}

}  // namespace

void launch_lt_quant(const float* x, int64_t M, int64_t ldx, int64_t K, uint8_t* q, float* s, int64_t s_ld,
                     uint8_t* q2, float* s2, void* stream, int64_t s_stride) {
  const int64_t warps = s_ld * (K / lt::kActBlock);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  const unsigned grid = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int64_t ld = s_stride > 0 ? s_stride : s_ld;
  gemm_lt_quant_kernel<<<grid, 32 * kWarpsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(x, M, ldx, K, q, s, s_ld,
                                                                                            q2, s2, x_vec, ld);
}

void launch_lt_weight_scales(const void* src, bool e8m0, int64_t nb, int64_t kb, float* dst, int64_t ld, void* stream) {
  gemm_lt_wscale_kernel<<<grid_for(nb * ld, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(src, e8m0, nb, kb, dst,
                                                                                               ld);
}

void launch_lt_bf16(const float* x, int64_t M, int64_t ldx, int64_t K, uint16_t* xb, void* stream) {
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(xb) % 16 == 0 && ldx % 4 == 0 &&
                   K % 8 == 0 && (K / 8 + 255) / 256 <= 0x7fffffff;
  if (vec) {
    const dim3 grid{unsigned((K / 8 + 255) / 256), unsigned(M < 65535 ? M : 65535)};
    gemm_lt_bf16_vec_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, M, ldx, K, xb);
    return;
  }
  gemm_lt_bf16_kernel<<<grid_for(M * K, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, M, ldx, K, xb);
}

void launch_lt_epilogue(const uint16_t* t, int64_t M, int64_t N, float* y, int64_t ldy, bool accumulate, void* stream) {
  gemm_lt_epilogue_kernel<<<grid_for(M * N, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(t, M, N, y, ldy,
                                                                                               accumulate);
}

void launch_lt_sum2(const float* d, int64_t M, int64_t N, float* y, int64_t ldy, bool accumulate, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool vec = N % 4 == 0 && ldy % 4 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (vec) {
    gemm_lt_sum2_vec_kernel<<<grid_for(M * N / 4, 256), 256, 0, s>>>(reinterpret_cast<const float4*>(d), M, N / 4, y,
                                                                     ldy, accumulate);
    return;
  }
  gemm_lt_sum2_kernel<<<grid_for(M * N, 256), 256, 0, s>>>(d, M, N, y, ldy, accumulate);
}

}  // namespace dsinfer::ops::cuda::detail
