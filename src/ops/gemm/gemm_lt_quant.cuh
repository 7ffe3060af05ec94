// The warp step of the activation quantization (gemm_lt_quant.h's arithmetic) that the cuBLASLt engine's quantize
// kernel (gemm_lt.cu) and the FP8 skinny GEMM's (gemm_fp8_skinny.cu) share, so their codes and scales are one
// function's: a warp holds one 128-channel block, 4 values a lane.
#pragma once
#include <cuda_fp16.h>

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

// quantize(v[i], sc) for 4 values, packed into a word (byte i = value i), on the hardware conversion
// (cvt.rn.satfinite.e4m3x2.f32, sm_89+) instead of the software rounding: ~10x fewer instructions, the same bits.
// Why the same: sc is a power of two in [2^-22, 2^120] (act_scale's floor and FLT_MAX / 448) or inf (an inf amax),
// so 1 / sc is exact and x * (1 / sc) is the correctly rounded x / sc (for sc = inf: +-0, or NaN for an inf x, as the
// quotient); RNE with saturation at +-448 equals quantize's clamp to +-448 followed by RNE (the clamp never leaves the
// last binade); a NaN gets quantize's 0x7F whatever its sign. GemmLtQuantGpu.HardwareCodesEqualQuantize compares
// the two on every fp32 bit pattern at several scales.
__device__ __forceinline__ uint32_t codes4(const float (&v)[4], float sc) {
  const float inv = __frcp_rn(sc);
  float q[4];
  for (int i = 0; i < 4; ++i) q[i] = __fmul_rn(v[i], inv);
  uint32_t word = 0;
  for (int i = 0; i < 4; i += 2) {
    uint16_t pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(q[i + 1]), "f"(q[i]));  // value i: low byte
    word |= uint32_t(pair) << (8 * i);
  }
  for (int i = 0; i < 4; ++i)
    if (q[i] != q[i]) word = (word & ~(0xFFu << (8 * i))) | (0x7Fu << (8 * i));
  return word;
}

// residual(v[i], byte i of word, sc) for 4 values: the codes widened by the hardware (cvt.rn.f16x2.e4m3x2: every
// e4m3 value, subnormals included, is a normal or zero half, so the widening is exact), then dequantize's product and
// the difference as single IEEE operations.
__device__ __forceinline__ void residual4(const float (&v)[4], uint32_t word, float sc, float (&r)[4]) {
  for (int i = 0; i < 4; i += 2) {
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(uint16_t(word >> (8 * i))));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    r[i] = __fsub_rn(v[i], __fmul_rn(f.x, sc));
    r[i + 1] = __fsub_rn(v[i + 1], __fmul_rn(f.y, sc));
  }
}

// The block's amax over the lanes' 4 values each, its scale `sc`, the 4 codes packed into a word (byte i = value i).
__device__ __forceinline__ uint32_t quantize_warp(const float (&v)[4], float& sc) {
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  sc = act_scale(amax);
  return codes4(v, sc);
}

}  // namespace dsinfer::ops::gemm_lt
