// The FP8 skinny wgmma GEMM (session 24, issue 31; on the H200 since session 26): y[M, N] (+)= x[M, K] . W[N, K]^T for
// FP8_BLOCK weights with 128 x 128 scale blocks at decode sizes (1 <= M <= kGemmFp8SkinnyMaxM), single or grouped
// (wo_a). x is quantized per token and 128 channels to one or two e4m3 terms exactly as the cuBLASLt engine's FP8
// routes do (gemm_lt_quant.h; two terms = GemmLtActivations::kFp8x2's numerics, one = official act_quant), then a
// warp-specialised TMA + wgmma kernel streams the weight as the wgmma M side with the tokens as N, promoting every
// 128-k block in fp32. Deterministic (fixed-order split-K through DSMEM, no atomics). Parameters, layouts and the
// kernel description: gemm_fp8_skinny_launch.h / gemm_fp8_skinny.cu; launch shape gemm_plan.h plan_gemm_fp8_skinny;
// routing (DSINFER_GEMM_FP8_SKINNY, default auto: gemm_fp8_skinny_auto's cells) GemmCallPlan::fp8_skinny_terms. Plain
// C++ header (no CUDA types).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_launch.h"

namespace dsinfer::ops::cuda {

// Workspace bytes (quantized activations and their scales) for any call of up to kGemmFp8SkinnyMaxM rows over
// k_total = groups * K activation columns with `terms` terms.
size_t gemm_fp8_skinny_workspace_bytes(int64_t k_total, int terms);

// Group g (0 <= g < groups; groups = 1 for a single weight) computes y_g[M, N_g] (+)= x_g[M, K] . W_g^T with
// N_g = w.rows / groups, W_g = rows [g N_g, (g + 1) N_g) of w, x_g = x + g * x_gstride, y_g = y + g * y_gstride (rows
// at ldx / ldy). Needs gemm_fp8_skinny_supports(w, groups), 1 <= M <= kGemmFp8SkinnyMaxM, terms 1 or 2, ldx >= K,
// ldy >= N_g, 16-byte aligned weight data and workspace of gemm_fp8_skinny_workspace_bytes(groups * K, terms)
// bytes; sm_count = the device's multiprocessors (the launch shape). Errors leave y untouched (checked before the
// first launch), except a failed launch.
Status gemm_fp8_skinny_cuda(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, const DeviceWeight& w,
                            int64_t groups, float* y, int64_t ldy, int64_t y_gstride, bool accumulate, int terms,
                            void* workspace, size_t workspace_bytes, int sm_count, void* stream);

// The two kernels' arguments for such a call at launch shape p (gemm_fp8_skinny_cuda's own, after its checks; the
// GEMM bench drives detail::launch_fp8sk_quant / launch_fp8sk_gemm with other shapes through it).
detail::Fp8SkinnyArgs gemm_fp8_skinny_args(const float* x, int64_t M, int64_t ldx, int64_t x_gstride,
                                           const DeviceWeight& w, int64_t groups, float* y, int64_t ldy,
                                           int64_t y_gstride, bool accumulate, void* workspace,
                                           const detail::Fp8SkinnyParams& p);

}  // namespace dsinfer::ops::cuda
