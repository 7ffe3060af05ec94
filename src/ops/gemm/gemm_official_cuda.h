// The GEMMs of DeepSeek-V4.1's official numerics on the GPU, bit for bit the CPU reference (model/deepseek_v41_numerics
// .cpp Num::linear): kQuantized (FP8 / FP4 GEMMs) quantizes each 32-value block of an x row as act_quant does (UE8M0
// scale from the block's largest magnitude, e4m3 values), sums the block's products with the weight in double,
// rounds that partial to fp32, scales it and adds it to an fp32 accumulator in K order (one warp per output, lane =
// position in the block), then rounds to bf16; kBf16 / kF32 sum all products in double and round the result to fp32
// (and then bf16). The products are exact in double and a block's 32 of them add exactly unless their magnitudes
// span more than ~25 bits, so the tree sum of the warp equals the reference's sequential one. Slow by design (the
// exact path of a correctness profile). Plain C++ header (no CUDA types).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_launch.h"  // DeviceWeight, GemmArgs

namespace dsinfer::ops::cuda {

enum class OfficialGemm { kQuantized, kBf16, kF32 };

// y [M, ldy] = x [M, ldx] . w^T with the semantics of `mode`. groups > 1 (wo_a): group g reads x columns
// [g * K, (g + 1) * K) with K = w.cols, weight rows [g * N, (g + 1) * N) with N = w.rows / groups, and writes y
// columns [g * N, (g + 1) * N).
Status gemm_official_cuda(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy,
                          OfficialGemm mode, void* stream, int64_t groups = 1);

namespace detail {
// The kernel over prepared arguments (gemm_official.cu): a.groups groups of rows (a.row_off / a.x_rows / per-group
// weights as the grouped GEMMs use them, or a.M rows each), every output column of each.
void launch_gemm_official(WeightFormat f, const GemmArgs& a, OfficialGemm mode, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
