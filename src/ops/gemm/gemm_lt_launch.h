// Kernel launchers behind the cuBLASLt GEMM engine (gemm_lt_cuda.h; validated there; no CUDA types, no Status).
// The caller checks each launch (DSI_CUDA_LAUNCHED) under the kernel's name.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {

// "gemm_lt_quant_kernel": x [M, ldx] fp32 with K % 128 == 0 -> q [M, K] e4m3 codes (row stride K) and the 1x128
// scales in cuBLASLt's VEC128_32F layout for the B operand, s[gemm_lt::act_scale_index(m, b, s_ld)] (block b of
// row m; token dimension fastest), s_ld >= M; the entries of rows [M, s_ld) are set to 0. With q2 / s2 non-null, also the second term
// (gemm_lt::residual quantized again) in the same layouts. One warp per (row, block). s_stride > 0: the scale
// matrices' row stride (>= s_ld) instead of s_ld, e.g. 2 M with s2 = s + M: the two terms' scales as one [K/128, 2 M]
// matrix, the B scales of one matmul over the terms stacked as 2 M rows (q2 = q + M K).
void launch_lt_quant(const float* x, int64_t M, int64_t ldx, int64_t K, uint8_t* q, float* s, int64_t s_ld,
                     uint8_t* q2, float* s2, void* stream, int64_t s_stride = 0);

// "gemm_lt_sum2_kernel": y[m, n] = ((accumulate ? y[m, n] : 0) + d[m, n]) + d[M + m, n] for m < M, n < N (fp32, one
// rounding per addition: the order of the two accumulating matmuls the stacked product replaces); d [2 M, N] with
// row stride N.
void launch_lt_sum2(const float* d, int64_t M, int64_t N, float* y, int64_t ldy, bool accumulate, void* stream);

// "gemm_lt_wscale_kernel": weight block scales [nb, kb] (E8M0 bytes or fp32, row-major) -> fp32 [nb, ld] with
// ld >= kb (cuBLASLt's BLK128x128_32F layout for the transposed A operand, ld = gemm_lt::wscale_ld(kb));
// entries [kb, ld) of a row are 0. Host reference: gemm_lt::weight_scales_to_lt_ref.
void launch_lt_weight_scales(const void* src, bool e8m0, int64_t nb, int64_t kb, float* dst, int64_t ld, void* stream);

// "gemm_lt_bf16_kernel": x [M, ldx] fp32 -> xb [M, K] bf16 bits (row stride K), round to nearest even (8 values a
// thread with 16-byte accesses when x / xb are 16-byte aligned, ldx % 4 == 0 and K % 8 == 0; same bits); the B
// operand of the dense (BF16 weight) matmul.
void launch_lt_bf16(const float* x, int64_t M, int64_t ldx, int64_t K, uint16_t* xb, void* stream);

// "gemm_lt_epilogue_kernel": y[m, n] = (accumulate ? y[m, n] : 0) + t[m, n] for m < M, n < N; t bf16 [M, N]
// (row stride N). Used when cuBLASLt offers only bf16 output for the block-scaled mode.
void launch_lt_epilogue(const uint16_t* t, int64_t M, int64_t N, float* y, int64_t ldy, bool accumulate, void* stream);

}  // namespace dsinfer::ops::cuda::detail
