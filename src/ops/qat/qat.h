// DeepSeek-V4.1's quantization-aware-training quantizers, applied (quantize + dequantize in place) where the
// model stores state (research/dsv41-architecture.md §2.3-2.4, §2.8): window KV FP8 e4m3 per 32 channels with a
// UE8M0 scale, compressed KV FP4 e2m1 per 16 with an E4M3 scale, indexer queries / keys FP4 e2m1 per 32 with a
// UE8M0 scale. Bit-faithful to transformers' `_fake_quant_fp8_block` / `_fake_quant_fp4_block` and the official
// `act_quant` / `fp4_act_quant`: the UE8M0 scale is 2^ceil(log2(amax * fp32(1/qmax))) read off the fp32 bits,
// e4m3 / e2m1 rounding is nearest-even. A vector whose length is not a multiple of the block is left unchanged
// (transformers skips shapes the reference cannot block).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

// 2^ceil(log2(t)) for t > 0 from the fp32 bit pattern (exponent - 127, plus one for a nonzero mantissa).
float pow2_ceil_scale(float t);

// FP8 e4m3, one UE8M0 scale per `block` values, amax floored at 1e-4.
void fp8_qat_ref(float* x, int64_t n, int64_t block);
// FP4 e2m1 per `block` values: UE8M0 scale (amax floored at 6 * 2^-126) or, with e4m3_scale, an E4M3 scale
// e4m3(max(amax, 6 * 2^-9) / 6).
void fp4_qat_ref(float* x, int64_t n, int64_t block, bool e4m3_scale);

}  // namespace dsinfer::ops
