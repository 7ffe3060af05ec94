// The fast path's cuBLASLt calls for weights that plan_gemm_call / plan_gemm_grouped_call (gemm_plan.h) do not send
// there, both DeepSeek-V4.1's:
// (1) FP8 weights whose blocks cuBLASLt cannot scale (DeepSeek-V4.1's 32 x 32 UE8M0 blocks;
// cuBLASLt's block-scaled FP8 mode on Hopper takes 128 x 128 weight blocks only, gemm_plan.h gemm_lt_supports): at
// M >= GemmSettings::lt_min_m rows the weight is widened to an exact bf16 copy in a scratch buffer
// (gemm_widen_cuda.h) and cuBLASLt runs its bf16 GEMM on it (fp32 accumulation, x rounded to bf16: the numerics of
// the bf16 tiled kernel it replaces). Below that the GEMV / skinny / tiled kernels of plan_gemm_call stay.
// (2) a grouped BF16 weight (V4.1's wo_a) from kGemmGroupedLtMinM rows: one cuBLASLt bf16 GEMM per group on a view of
// the group's rows, as the V4 runner does for its FP8 wo_a.
// Host code without CUDA types (dsinfer_core); tests/unit/test_gemm_widen_plan.cpp pins it at V4.1-Flash shapes.
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_plan.h"

namespace dsinfer::ops::cuda {

// An FP8_BLOCK weight with scales that cuBLASLt does not take (gemm_lt_supports false) and a bf16 copy it does
// (K % 8 == 0, N % 4 == 0, E8M0 scales: the widening is then exact).
bool gemm_widen_supports(const DeviceWeight& w);
// kFast with s.cublaslt, gemm_widen_supports(w) and M >= s.lt_min_m (the FP8 cuBLASLt threshold, so
// DSINFER_CUBLASLT_MIN_M moves both).
bool gemm_widen_wants(const DeviceWeight& w, int64_t M, KernelMode mode, const GemmSettings& s);
// kFast with s.cublaslt, a BF16 weight of groups > 1 whole groups that cuBLASLt takes (each group's rows % 4 == 0,
// K % 8 == 0) and M >= kGemmGroupedLtMinM.
bool gemm_grouped_bf16_lt_wants(const DeviceWeight& w, int64_t groups, int64_t M, KernelMode mode, const GemmSettings& s);
// Group g of a grouped BF16 weight: rows [g * N / groups, (g + 1) * N / groups).
DeviceWeight gemm_group_view_bf16(const DeviceWeight& w, int64_t groups, int64_t g);

}  // namespace dsinfer::ops::cuda
