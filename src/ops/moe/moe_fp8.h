// CPU reference of the FP8 grouped (prefill) MoE path (moe_grouped_fp8.cu): exactly what the kernels compute, up to the
// order of fp32 sums. Activations quantized to two e4m3 terms (hi + lo) per row in 1 x B blocks, FP4_G32 expert
// weights expanded to e4m3 with one fp32 power-of-two scale per (row, B-k block), block sums (hi and lo terms summed
// together) promoted with the product of the two scales; B = 128 for the gate/up GEMMs (x), 64 for the down GEMM (h).
// The numeric contract (formulas, exactness) is in moe_fp8_common.h; docs/kernels.md "MoE grouped FP8 path".
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops {

// x[n] (n % block == 0) -> e4m3 codes q[n] and scales s[n / block]: s = amax / 448, v = x * (448 / amax) in fp32, q =
// e4m3_rn(v); an all-zero block gets s = 0, q = 0. With lo: the second term lo[n] = e4m3_rn(v - e4m3(q)) (same scale),
// so s * (q + lo) is within ~2^-8 of x (relative) instead of 2^-4.
void quantize_e4m3_ref(const float* x, int64_t n, int64_t block, uint8_t* q, float* s, uint8_t* lo = nullptr);

// One FP4_G32 weight: codes [rows, cols / 2] (low nibble first), E8M0 scales [rows, cols / 32] -> e4m3 q [rows, cols]
// and fp32 block scales s [rows, cols / block] (block = 64 or 128, cols % block == 0).
struct Fp8Weight {
  int64_t rows = 0, cols = 0, block = 0;
  std::vector<uint8_t> q;
  std::vector<float> s;
};
Fp8Weight expand_fp4_weight_ref(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, int64_t block);

// sum over block-k blocks b of (sa[b] * sb[b]) * (sum of (e4m3(qa) + e4m3(qa_lo)) * e4m3(qb) over the block), in
// double; qa_lo may be null (one term).
double fp8_dot_ref(const uint8_t* qa, const uint8_t* qa_lo, const float* sa, const uint8_t* qb, const float* sb,
                   int64_t n, int64_t block);

struct ExpertFp8Params {
  const Fp8Weight* w1 = nullptr;  // [I, D] gate, block 128
  const Fp8Weight* w3 = nullptr;  // [I, D] up, block 128
  const Fp8Weight* w2 = nullptr;  // [D, I] down, block 64
  float limit = 0.0f;             // 0 = no clamp
  int x_terms = 2, h_terms = 2;   // e4m3 terms of x and of h: 2 = the kernels' numerics; 1 = the numerics study
  bool bf16_out = false;          // g, u and y rounded to bf16 (the CUTLASS path's GEMM outputs)
};

// out[D] += scale * expert(x) on the FP8 path: x quantized in w1's blocks; g, u = fp8 dots rounded to fp32 (then to
// bf16 with bf16_out); h = silu(min(g, L)) * clamp(u, -L, L) in fp32, quantized in w2's blocks; y = fp8 dots of h
// with W2 rows (fp32, then bf16 with bf16_out).
void expert_fp8_accumulate_ref(const ExpertFp8Params& p, const float* x, float scale, double* out);

}  // namespace dsinfer::ops
