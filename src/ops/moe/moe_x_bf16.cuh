// The fast (decode) MoE kernels' B operand of the gate/up projection: a token's fp32 x row rounded to bf16 (nearest
// even) in pair layout (moe_fast_common.h pair_src), written by the permutation's launch (moe.cu moe_prep_kernel) or by
// its own (moe_fast.cu moe_x_bf16_kernel). Included by .cu files only.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/moe/moe_fast_common.h"

namespace dsinfer::ops::cuda::detail {

// Row `row` of x [., K] into the same row of xb, by the block's threads.
__device__ __forceinline__ void moe_x_bf16_row(const float* x, int64_t row, int64_t K, uint16_t* xb) {
  const float* src = x + row * K;
  uint16_t* dst = xb + row * K;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
    dst[i] = __bfloat16_as_ushort(
        __float2bfloat16_rn(src[(i & ~int64_t(31)) + ::dsinfer::ops::moe_detail::pair_src(int(i & 31))]));
}

}  // namespace dsinfer::ops::cuda::detail
