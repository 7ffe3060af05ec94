// Device side of ops/routed_sum.h: one token's MoE output, four columns at a time.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/routed_sum.h"

namespace dsinfer::ops {

// Four consecutive values of yp's row p (d4 float4 columns a row) at column q, widened from bf16 where they are.
__device__ __forceinline__ float4 routed_row4(const RoutedSum& f, int64_t p, int64_t d4, int64_t q) {
  if (!f.yp_bf16) return reinterpret_cast<const float4*>(f.yp)[p * d4 + q];
  const uint2 v = reinterpret_cast<const uint2*>(f.yp)[p * d4 + q];  // 4 bf16: 8 bytes
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xffff0000u));
}

// f[t] columns [4 q, 4 q + 4) with rows of d4 float4 (dim % 4 == 0; yp and shared 16-byte aligned, a bf16 yp 8-byte
// aligned): the routed terms in k order into a zero accumulator, then the shared row. moe.cu's combine kernels and
// mhc.cu's hc_post_routed all take it from here, so their f are the same bits.
__device__ __forceinline__ float4 routed_sum4(const RoutedSum& f, int64_t t, int64_t d4, int64_t q) {
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t k = 0; k < f.topk; ++k) {
    const int32_t p = f.pos_of[t * f.topk + k];
    if (p < 0) continue;
    const float w = f.weight[t * f.topk + k];
    const float4 y = routed_row4(f, p, d4, q);
    acc.x += w * y.x;
    acc.y += w * y.y;
    acc.z += w * y.z;
    acc.w += w * y.w;
  }
  if (f.shared) {
    const float4 s = reinterpret_cast<const float4*>(f.shared)[t * d4 + q];
    acc.x += s.x;
    acc.y += s.y;
    acc.z += s.z;
    acc.w += s.w;
  }
  return acc;
}

}  // namespace dsinfer::ops
