// Host references of the FP8 skinny wgmma GEMM (gemm_fp8_skinny_cuda.h): its activation quantization in the kernel's
// token layout (gemm_lt::quantize_ref, the cuBLASLt engine's reference, rearranged: the same codes and scales) and
// the GEMM of the quantized operands in fp64 (exact dequantized products, one rounding to fp32 at the end).
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops::gemm_fp8sk {

// x [M, ldx] with `groups` groups of K columns at g * x_gstride -> codes q [rows][groups * K] and scales
// s [groups * K / 128][rows] with rows = units * terms * tok, term t of token m at
// detail::fp8sk_row(m, t, terms, tok) (gemm_fp8_skinny_launch.h); tokens [M, units * tok) zero codes and scale 0.
void quantize_ref(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, int64_t groups, int64_t K, int terms,
                  int tok, int units, std::vector<uint8_t>& q, std::vector<float>& s);

// y[m, g * N + n] (fp64 -> fp32; group g's output columns placed side by side) = sum over 128-k blocks b of
// w_scale(row, b) * sum over terms t of s_t(m, b) * sum_k e4m3(W[row, k]) * e4m3(q_t[m, k]), with row = g * N + n,
// from x quantized as quantize_ref does (terms 1 or 2); W e4m3 codes [groups * N, K], scales [ceil(groups N / 128),
// K / 128] E8M0 bytes (e8m0) or fp32. The exact product of the dequantized operands the kernel multiplies (each
// 128-k block's sum is exact in fp64: e4m3 products span < 2^36). Only outputs with n % row_step == 0 are computed
// (the others stay 0): large GPU tests sample rows.
std::vector<double> gemm_ref(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, int64_t groups, int64_t N,
                             int64_t K, const uint8_t* w, const void* wscale, bool e8m0, int terms,
                             int64_t row_step = 1);

}  // namespace dsinfer::ops::gemm_fp8sk
