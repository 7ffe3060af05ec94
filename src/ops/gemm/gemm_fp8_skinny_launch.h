// Parameters and launchers of the FP8 skinny wgmma GEMM (gemm_fp8_skinny.cu; API gemm_fp8_skinny_cuda.h, plan
// gemm_plan.h plan_gemm_fp8_skinny). No CUDA types, no Status (validated by gemm_fp8_skinny_cuda.cpp).
//
// y[M, N] (+)= x[M, K] . W[N, K]^T for FP8_BLOCK weights with 128 x 128 scale blocks (E8M0 or fp32) at decode sizes
// (M <= kGemmFp8SkinnyMaxM), on Hopper's FP8 wgmma with the WEIGHT as the wgmma M side (64 weight rows per consumer
// warpgroup) and the tokens as wgmma N ("swap AB"). Two launches:
//   1. "gemm_fp8sk_quant_kernel": x quantized per token and 128 channels exactly as the cuBLASLt engine's two-term
//      route (gemm_lt_quant.h: the same codes and scales, bit for bit), into the kernel's token layout below;
//   2. "gemm_fp8sk_kernel": TMA streams the weight tile and the activation codes through an mbarrier ring; each
//      128-k block's wgmma sum (both terms as columns of one wgmma) is promoted in fp32 as
//      acc[token] += (w_scale * s_term1[token]) * P1 + (w_scale * s_term2[token]) * P2.
//
// Token layout of the quantized activations (one definition: fp8sk_row): tokens are cut into units of `tok`; unit u
// holds `terms` x tok rows, term t of token m at row (m / tok * terms + t) * tok + m % tok. A consumer warpgroup's
// wgmma B operand is one unit (N = terms * tok columns: term 1 tokens, then term 2 tokens). Codes [rows][k_total]
// e4m3 (k_total = groups * K: group g's x columns at g * K), scales fp32 [k_total / 128][rows]. Tokens past M are
// zero codes with scale 0.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::ops::cuda::detail {

// Launch shape (gemm_plan.h plan_gemm_fp8_skinny).
struct Fp8SkinnyParams {
  int terms = 2;         // activation terms: 2 (the cuBLASLt kFp8x2 numerics) or 1 (official act_quant)
  int tok = 8;           // tokens per consumer warpgroup (wgmma N = terms * tok): 8, 16, 32, 64, 128 (one term: >= 16)
  int wg_rows = 2;       // consumer warpgroups along weight rows: 2 (a CTA = 128 rows x tok tokens) or 1 (64 rows x
                         // 2 tok tokens: the two warpgroups on the two units of the token tile, the weight read once)
  int units = 1;         // token units (ceil(M / tok) rounded up to whole token tiles)
  int token_tiles = 1;   // units / (2 / wg_rows)
  int splits = 1;        // K splits = thread-block cluster size (1..8), summed in rank order through DSMEM
  int kb_per_split = 1;  // 128-k blocks per split
  int stages = 4;        // mbarrier ring depth
  int64_t row_tiles = 1; // ceil(N_total / (64 * wg_rows)) (grouped: per group, times groups)
  int64_t items = 1;     // row_tiles * token_tiles
  int64_t grid = 1;      // CTAs: items * splits when splits > 1 (one item per cluster), else min(items, SMs)
  int smem = 0;          // dynamic shared memory bytes
};

// A consumer thread holds the weight scales of 128-k blocks t, t + 128, ... of a split in this many registers, so a
// split has at most 128 * kFp8SkWsRegs blocks (K <= 32,768 a split; plan_gemm_fp8_skinny's rule).
inline constexpr int kFp8SkWsRegs = 2;

// Row of (token m, term t) in the quantized activations.
inline constexpr int64_t fp8sk_row(int64_t m, int t, int terms, int tok) {
  return (m / tok * terms + t) * tok + m % tok;
}
inline constexpr int64_t fp8sk_rows(const Fp8SkinnyParams& p) { return int64_t(p.units) * p.terms * p.tok; }

// Where the kernel's values sit (one definition for the kernel and the CPU emulation in
// tests/unit/test_gemm_fp8_skinny.cpp). wgmma m64nNk32's accumulator (PTX ISA, "wgmma D fragment"): element
// 4 j + i (i < 4) of thread t (0..127) of a warpgroup is row 16 (t / 32) + (t % 32) / 4 + 8 (i / 2) of the 64-row
// tile and column 8 j + 2 (t % 4) + i % 2.
DSI_HD constexpr int fp8sk_acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (i >> 1); }
DSI_HD constexpr int fp8sk_acc_col(int t, int j, int i) { return 8 * j + 2 * (t % 4) + (i & 1); }
// Float index, in a stage's token scales, of the scale of term `term`, column group j, element i of thread t of the
// consumer on token unit `half` (the stage holds halves units of terms x tok scales: term 1 tokens, then term 2).
DSI_HD constexpr int fp8sk_scale_index(int half, int ncol, int tok, int term, int t, int j, int i) {
  return half * ncol + term * tok + fp8sk_acc_col(t, j, i);
}
// Token of promoted element 4 j + i of thread t on unit unit0 + half; weight row (over groups x N rows) of element i
// of thread t of the consumer whose rows start at row0 + row_off.
DSI_HD constexpr int64_t fp8sk_out_token(int64_t unit0, int half, int tok, int t, int j, int i) {
  return (unit0 + half) * tok + fp8sk_acc_col(t, j, i);
}
DSI_HD constexpr int64_t fp8sk_out_row(int64_t row0, int row_off, int t, int i) {
  return row0 + row_off + fp8sk_acc_row(t, i);
}
// The split-K partial tile (over the dead ring): promoted element f of consumer thread ct (0..255) at f * 256 + ct.
DSI_HD constexpr int fp8sk_partial_index(int f, int ct) { return f * 256 + ct; }

// Shared-memory layout of one ring stage (bytes; 1024-aligned tiles for the 128-byte swizzle).
inline constexpr int fp8sk_stage_w(int wg_rows) { return 64 * wg_rows * 128; }
inline constexpr int fp8sk_stage_x(int terms, int tok, int wg_rows) { return (2 / wg_rows) * terms * tok * 128; }
inline constexpr int fp8sk_stage_s(int terms, int tok, int wg_rows) { return (2 / wg_rows) * terms * tok * 4; }
inline constexpr int fp8sk_stage_bytes(int terms, int tok, int wg_rows) {
  return (fp8sk_stage_w(wg_rows) + fp8sk_stage_x(terms, tok, wg_rows) + fp8sk_stage_s(terms, tok, wg_rows) + 1023) /
         1024 * 1024;
}
// The split-K partial tile (aliases the ring after the last stage): 256 consumer threads x tok / 2 floats.
inline constexpr int fp8sk_partial_bytes(int tok) { return 256 * (tok / 2) * 4; }

struct Fp8SkinnyArgs {
  const float* x = nullptr;  // [M, ldx]; group g's columns at g * x_gstride
  int64_t ldx = 0, x_gstride = 0;
  int64_t M = 0;
  int64_t groups = 1;
  int64_t N = 0;             // rows of one group (single weight: all rows)
  int64_t K = 0;             // columns of the weight (one group's x columns)
  const uint8_t* wdata = nullptr;  // e4m3 [groups * N, K]
  const void* wscale = nullptr;    // [ceil(groups * N / 128), K / 128] E8M0 bytes or fp32
  bool scale_e8m0 = true;
  float* y = nullptr;  // [M, ldy]; group g's columns at g * y_gstride
  int64_t ldy = 0, y_gstride = 0;
  bool accumulate = false;
  uint8_t* q = nullptr;  // workspace: codes [fp8sk_rows][groups * K]
  float* s = nullptr;    // workspace: scales [groups * K / 128][fp8sk_rows]
  bool x_vec = false;    // x, ldx, x_gstride allow 16-byte loads
};

// "gemm_fp8sk_quant_kernel" (x -> q, s in the token layout above). Returns the cudaError_t of the launch (as int;
// also check DSI_CUDA_LAUNCHED). Both launches are programmatic dependent launches where pdl_enabled() (cuda/pdl.h).
int launch_fp8sk_quant(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, void* stream);
// "gemm_fp8sk_kernel" (q, s, W -> y). Returns the cudaError_t of the launch or of the tensor-map encoding
// (cudaErrorInvalidValue).
int launch_fp8sk_gemm(const Fp8SkinnyArgs& a, const Fp8SkinnyParams& p, void* stream);

}  // namespace dsinfer::ops::cuda::detail
