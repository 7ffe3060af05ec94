// Device side of ops/routed_sum.h: one token's MoE output, four columns at a time.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/routed_sum.h"

namespace dsinfer::ops {

// f[t] columns [4 q, 4 q + 4) with rows of d4 float4 (dim % 4 == 0; yp and shared 16-byte aligned): the routed
// terms in k order into a zero accumulator, then the shared row. moe.cu's combine4_kernel and mhc.cu's
// hc_post_routed both take it from here, so their f are the same bits.
__device__ __forceinline__ float4 routed_sum4(const RoutedSum& f, int64_t t, int64_t d4, int64_t q) {
  const float4* yp = reinterpret_cast<const float4*>(f.yp);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t k = 0; k < f.topk; ++k) {
    const int32_t p = f.pos_of[t * f.topk + k];
    if (p < 0) continue;
    const float w = f.weight[t * f.topk + k];
    const float4 y = yp[int64_t(p) * d4 + q];
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
