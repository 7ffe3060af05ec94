// The RS grouped MoE kernels' A-operand decode (moe_grouped_rs.cu), CUDA only: one 16-k step's four bf16x2 wgmma A
// registers from a consumer thread's two weight rows. In a header so that the GPU test runs the kernel's own code over
// every e2m1 code in every nibble position and every E8M0 scale byte (tests/gpu/test_moe_rs_decode_gpu.cu).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/moe/moe_fast_common.h"

namespace dsinfer::ops::moe_detail {

// bf16x2 multiply (exact for the scale bytes moe_fast_common.h documents: a power-of-two factor, results in the normal
// range).
__device__ __forceinline__ uint32_t rs_bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a), y = *reinterpret_cast<__nv_bfloat162*>(&b);
  __nv_bfloat162 r = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t rs_word(const uint4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// The A registers of 16-k step s (0..7) of a 128-k stage for the thread's weight rows g (w0: its 16 FP4 bytes, lane
// t's 32 k of the chunk; F0: fp4_scale_bf16 of its scale byte in both halves) and g + 8 (w1, F1): a[0] row g pair 2s
// (k 2t, 2t + 1: nibbles 2(s % 2) and 2(s % 2) + 4 of word s / 2), a[1] row g + 8 pair 2s, a[2] row g pair 2s + 1
// (nibbles 2(s % 2) + 1 and 2(s % 2) + 5), a[3] row g + 8 pair 2s + 1.
__device__ __forceinline__ void rs_decode_step(const uint4& w0, const uint4& w1, uint32_t F0, uint32_t F1, int s,
                                               uint32_t (&a)[4]) {
  const int q = s >> 1, pp = 2 * (s & 1);
  a[0] = rs_bf16x2_mul(fp4_pair_bits(rs_word(w0, q), pp), F0);
  a[1] = rs_bf16x2_mul(fp4_pair_bits(rs_word(w1, q), pp), F1);
  a[2] = rs_bf16x2_mul(fp4_pair_bits(rs_word(w0, q), pp + 1), F0);
  a[3] = rs_bf16x2_mul(fp4_pair_bits(rs_word(w1, q), pp + 1), F1);
}

// rs_decode_step with each row's two pairs from one bit-select (fp4_half_pairs: 11 integer operations per word's two
// steps and row instead of 16; MoeGroupedRsVariant::kWordStageItem). The same A registers for every word: each
// fp4_half_pairs output is fp4_pair_bits's (tests/unit/test_moe_fast.cpp), multiplied by the same factor.
__device__ __forceinline__ void rs_decode_step_word(const uint4& w0, const uint4& w1, uint32_t F0, uint32_t F1, int s,
                                                    uint32_t (&a)[4]) {
  const int q = s >> 1, h = s & 1;
  uint32_t p0[2], p1[2];
  fp4_half_pairs(rs_word(w0, q), h, p0);
  fp4_half_pairs(rs_word(w1, q), h, p1);
  a[0] = rs_bf16x2_mul(p0[0], F0);
  a[1] = rs_bf16x2_mul(p1[0], F1);
  a[2] = rs_bf16x2_mul(p0[1], F0);
  a[3] = rs_bf16x2_mul(p1[1], F1);
}

}  // namespace dsinfer::ops::moe_detail
