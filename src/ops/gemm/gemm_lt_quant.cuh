// The warp step of the activation quantization (gemm_lt_quant.h's arithmetic) that the cuBLASLt engine's quantize
// kernel (gemm_lt.cu) and the FP8 skinny GEMM's (gemm_fp8_skinny.cu) share, so their codes and scales are one
// function's: a warp holds one 128-channel block, 4 values a lane.
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::gemm_lt {

// A lane's 4 activations of its block at xb: one 16-byte load where `vec` (xb 16-byte aligned), else 4 loads.
__device__ __forceinline__ void load_lane4(const float* xb, bool vec, float (&v)[4]) {
  if (vec) {
    const float4 f = *reinterpret_cast<const float4*>(xb);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    for (int i = 0; i < 4; ++i) v[i] = xb[i];
  }
}

// The block's amax over the lanes' 4 values each, its scale `sc`, the 4 codes packed into a word (byte i = value i).
__device__ __forceinline__ uint32_t quantize_warp(const float (&v)[4], float& sc) {
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  sc = act_scale(amax);
  uint32_t word = 0;
  for (int i = 0; i < 4; ++i) word |= uint32_t(quantize(v[i], sc)) << (8 * i);
  return word;
}

}  // namespace dsinfer::ops::gemm_lt
