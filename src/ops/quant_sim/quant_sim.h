// Numerics simulations of the official DeepSeek-V4 inference (architecture notes §3.5): values are quantized
// and dequantized in place so the fp32 reference sees the same rounding as the official FP8/FP4 kernels.
#pragma once
#include <cstdint>

namespace dsinfer::ops {

// FP8 e4m3 simulation in blocks of `block` channels, power-of-two scale s = 2^ceil(log2(amax/448)),
// amax >= 1e-4 (official act_quant with ue8m0 scales). Applied to x[0, n).
void fp8_block_sim_ref(float* x, int64_t n, int64_t block);
// FP4 e2m1 simulation in blocks of 32: s = 2^ceil(log2(amax/6)), amax >= 6 * 2^-126.
void fp4_block_sim_ref(float* x, int64_t n, int64_t block);
// Normalized Walsh-Hadamard transform (Sylvester order, scale n^-1/2); n must be a power of two.
void hadamard_ref(float* x, int64_t n);

}  // namespace dsinfer::ops
