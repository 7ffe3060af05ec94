// The kernels around the CUTLASS grouped FP8 GEMM (see moe_grouped_cutlass_launch.h): activations quantized to one
// e4m3 term per element with one scale per row and 128 k, written in the GEMM's per-expert scale layout, the SwiGLU
// of the bf16 gate/up outputs quantized the same way, the combine of the bf16 down outputs, and E8M0 weight scales
// widened to fp32. Kept out of moe_grouped_cutlass.cu so that file stays the only CUTLASS one.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "ops/moe/moe_grouped_cutlass_launch.h"

namespace dsinfer::ops::cuda {
namespace {

constexpr int kQuantWarps = 8;  // warps per block; one warp per (row, 128-k block)

// Expert owning permuted row p (offsets increasing; p < offsets[experts]).
__device__ __forceinline__ int expert_of(const int32_t* offsets, int64_t experts, int32_t p) {
  int lo = 0, hi = int(experts) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= p) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// One warp quantizes the 128 values v[0..3] of its lanes (lane l holds k = 4l .. 4l + 3 of the block) of permuted
// row p, block kb: s = amax / 448, q = e4m3_rn(v * (448 / amax)) (moe_fp8.h quantize_e4m3_ref).
__device__ __forceinline__ void quant_block(float4 v, int32_t p, int64_t kb, int64_t K, const int32_t* offsets,
                                            int64_t experts, uint8_t* q, float* s, int lane) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
  const uint32_t c = uint32_t(__nv_cvt_float_to_fp8(v.x * inv, __NV_SATFINITE, __NV_E4M3)) |
                     uint32_t(__nv_cvt_float_to_fp8(v.y * inv, __NV_SATFINITE, __NV_E4M3)) << 8 |
                     uint32_t(__nv_cvt_float_to_fp8(v.z * inv, __NV_SATFINITE, __NV_E4M3)) << 16 |
                     uint32_t(__nv_cvt_float_to_fp8(v.w * inv, __NV_SATFINITE, __NV_E4M3)) << 24;
  reinterpret_cast<uint32_t*>(q + int64_t(p) * K + kb * kMoeCutlassBlock)[lane] = c;
  if (lane == 0) {
    const int e = expert_of(offsets, experts, p);
    const int64_t first = offsets[e], m = int64_t(offsets[e + 1]) - first;
    s[first * (K / kMoeCutlassBlock) + kb * m + (p - first)] = amax / 448.0f;
  }
}

__global__ void moe_cutlass_quant_kernel(const float* x, const int32_t* perm, const int32_t* offsets, int64_t experts,
                                         int64_t rows, int64_t K, uint8_t* q, float* s) {
  const int lane = threadIdx.x & 31;
  const int64_t kbs = K / kMoeCutlassBlock, valid = min(rows, int64_t(offsets[experts]));
  const int64_t item = int64_t(blockIdx.x) * kQuantWarps + (threadIdx.x >> 5);
  if (item >= valid * kbs) return;
  const int32_t p = int32_t(item / kbs);
  const int64_t kb = item - int64_t(p) * kbs;
  const int64_t src = perm ? int64_t(perm[p]) : int64_t(p);
  const float4 v = reinterpret_cast<const float4*>(x + src * K + kb * kMoeCutlassBlock)[lane];
  quant_block(v, p, kb, K, offsets, experts, q, s, lane);
}

// Four bf16 values (8 bytes) as fp32.
__device__ __forceinline__ float4 load_bf16x4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

__global__ void moe_cutlass_swiglu_quant_kernel(const __nv_bfloat16* g, const __nv_bfloat16* u, const int32_t* offsets,
                                                int64_t experts, int64_t rows, int64_t N, float limit, uint8_t* q,
                                                float* s) {
  const int lane = threadIdx.x & 31;
  const int64_t kbs = N / kMoeCutlassBlock, valid = min(rows, int64_t(offsets[experts]));
  const int64_t item = int64_t(blockIdx.x) * kQuantWarps + (threadIdx.x >> 5);
  if (item >= valid * kbs) return;
  const int32_t p = int32_t(item / kbs);
  const int64_t kb = item - int64_t(p) * kbs, at = int64_t(p) * N + kb * kMoeCutlassBlock;
  const float4 gv = load_bf16x4(g + at + 4 * lane);
  const float4 uv = load_bf16x4(u + at + 4 * lane);
  auto h = [limit](float gg, float uu) {
    if (limit > 0.0f) {
      gg = fminf(gg, limit);
      uu = fminf(fmaxf(uu, -limit), limit);
    }
    return gg / (1.0f + expf(-gg)) * uu;
  };
  const float4 v = make_float4(h(gv.x, uv.x), h(gv.y, uv.y), h(gv.z, uv.z), h(gv.w, uv.w));
  quant_block(v, p, kb, N, offsets, experts, q, s, lane);
}

// One thread per 8 outputs of a token (16-byte loads of the bf16 rows); fp32 sums in k order.
__global__ void moe_cutlass_combine_kernel(const __nv_bfloat16* y, const int32_t* pos_of, const float* weight,
                                           int64_t T, int64_t topk, int64_t D, const float* shared, float* out) {
  const int64_t groups = D / 8, total = T * groups;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / groups, d = (i - t * groups) * 8;
    float acc[8] = {};
    for (int64_t k = 0; k < topk; ++k) {
      const int32_t p = pos_of[t * topk + k];
      if (p < 0) continue;
      const float w = weight[t * topk + k];
      const uint4 raw = *reinterpret_cast<const uint4*>(y + int64_t(p) * D + d);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
        acc[2 * j] += w * v.x;
        acc[2 * j + 1] += w * v.y;
      }
    }
    float* o = out + t * D + d;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = acc[j] + (shared ? shared[t * D + d + j] : 0.0f);
  }
}

__global__ void moe_cutlass_scales_kernel(const void* const* scale, int64_t experts, int64_t count, float* out) {
  const int64_t total = experts * count;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i / count;
    const uint32_t b = static_cast<const uint8_t*>(scale[e])[i - e * count];
    // 2^(b - 127); b = 0 is 2^-127 (an fp32 subnormal), 0xFF NaN
    out[i] = b == 0xFFu ? __int_as_float(0x7FC00000) : b == 0u ? __int_as_float(0x00400000) : __int_as_float(int(b << 23));
  }
}

unsigned quant_blocks(int64_t rows, int64_t K) {
  return unsigned((rows * (K / kMoeCutlassBlock) + kQuantWarps - 1) / kQuantWarps);
}

}  // namespace

namespace detail {

void launch_moe_cutlass_quant(const float* x, const int32_t* perm, const int32_t* offsets, int64_t experts,
                              int64_t rows, int64_t K, uint8_t* q, float* s, void* stream) {
  if (rows <= 0) return;
  moe_cutlass_quant_kernel<<<quant_blocks(rows, K), 32 * kQuantWarps, 0, static_cast<cudaStream_t>(stream)>>>(
      x, perm, offsets, experts, rows, K, q, s);
}

void launch_moe_cutlass_swiglu_quant(const void* g, const void* u, const int32_t* offsets, int64_t experts,
                                     int64_t rows, int64_t N, float limit, uint8_t* q, float* s, void* stream) {
  if (rows <= 0) return;
  moe_cutlass_swiglu_quant_kernel<<<quant_blocks(rows, N), 32 * kQuantWarps, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(g), static_cast<const __nv_bfloat16*>(u), offsets, experts, rows, N, limit, q,
      s);
}

void launch_moe_cutlass_combine(const void* y, const int32_t* pos_of, const float* weight, int64_t T, int64_t topk,
                                int64_t D, const float* shared, float* out, void* stream) {
  const int64_t total = T * (D / 8);
  if (total <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 132 * 16));
  moe_cutlass_combine_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(y), pos_of, weight, T, topk, D, shared, out);
}

void launch_moe_cutlass_scales(const void* const* scale, int64_t experts, int64_t count, float* out, void* stream) {
  const int64_t total = experts * count;
  if (total <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
  moe_cutlass_scales_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(scale, experts, count, out);
}

}  // namespace detail
}  // namespace dsinfer::ops::cuda
