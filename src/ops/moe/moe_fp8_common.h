// Numeric contract of the FP8 grouped (prefill) MoE GEMMs (moe_grouped_fp8.cu), shared with their CPU reference
// (moe_fp8.h / moe_fp8_ref.cpp). No CUDA types. Design in docs/kernels.md "MoE grouped FP8 path".
//
// Activations are quantized per row in blocks of B k (x: B = 128, as DeepGEMM's 1x128; the SwiGLU output h: B = 64, see
// below) to two e4m3 terms with one scale: s = amax / 448, v = a * (448 / amax) (fp32), q = e4m3_rn(v), lo =
// e4m3_rn(v - q) (amax = 0: s = 0, q = lo = 0); s * (q + lo) carries ~8 significant bits where q alone carries 4 (one
// term put the fast path outside the fidelity gate: bench/NOTES.md, issue 30). FP4_G32 weights with E8M0 scales are
// expanded to e4m3 per weight row and B-k block (B / 32 scale groups with exponent bytes e_g): with m = max_g e_g, code
// c of group g becomes e4m3(e2m1(c) * 2^(e_g - m + 6)) and the block's scale is 2^(m - 133) (= 2^(m - 127) / 2^6). The
// expansion is exact when the block's scale bytes are within 14 of each other (always so on real checkpoints; else the
// smaller groups' codes round to e4m3 subnormals, nearest even). The tensor cores sum each B-k block of both terms in
// fp32 (2 B / 32 wgmma k-steps: q then lo, same weights), and the block sum is promoted: acc += block_sum * (s_row *
// s_col). h uses B = 64 because the gate/up kernel's CTA owns 64 h columns: it quantizes h in its epilogue (one block
// per row) without a second pass; the down kernel (K = inter) then promotes every 64 k, the gate/up kernel every 128.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::ops::moe_detail {

inline constexpr int kFp8BlockGateUp = 128;  // k per x scale and per promoted block sum of the gate/up GEMM
inline constexpr int kFp8BlockDown = 64;     // k per h scale and per promoted block sum of the down GEMM

// e4m3 code (positive) of e2m1 magnitude mag (0..7: 0, .5, 1, 1.5, 2, 3, 4, 6) times 2^(d + 6), d <= 0, rounded to
// nearest even where it falls below the e4m3 subnormal step 2^-9 (d < -2).
DSI_HD uint32_t fp4_mag_e4m3(uint32_t mag, int d) {
  if (mag == 0u) return 0u;
  const uint32_t e = mag >> 1, m = mag & 1u;
  // value = N * 2^E: 0.5 = 1 * 2^-1, else (2 + m) * 2^(e - 2); e4m3 normal = (8 + mant) * 2^(f - 10), f = 1..15
  const uint32_t N = e ? 2u + m : 1u;
  const int E = e ? int(e) + d + 4 : d + 5;
  const int f = e ? E + 8 : E + 7;  // f <= 15 as d <= 0
  if (f >= 1) return uint32_t(f) << 3 | (e ? m << 2 : 0u);
  // subnormal: mant = N * 2^(E + 9), rounded to nearest even
  const int sh = E + 9;
  if (sh >= 0) return N << sh;  // sh <= 1 (N >= 2) or <= 2 (N = 1) here: at most 7
  const int k = -sh > 8 ? 8 : -sh;
  uint32_t r = N >> k;
  const uint32_t rem = N & ((1u << k) - 1u), half = 1u << (k - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return r;
}

// e4m3 code of FP4 code c (sign in bit 3) in a block whose scale-exponent offset is d (see fp4_mag_e4m3).
DSI_HD uint32_t fp4_code_e4m3(uint32_t c, int d) { return fp4_mag_e4m3(c & 7u, d) | ((c & 8u) << 4); }

// fp32 bits of a weight block's scale 2^(m - 133) for its largest E8M0 byte m (an fp32 subnormal for m < 7); NaN for a
// NaN scale byte (m = 0xFF).
DSI_HD uint32_t fp8_block_scale_bits(uint32_t m) {
  m &= 0xFFu;
  if (m == 0xFFu) return 0x7FC00000u;
  return m >= 7u ? (m - 6u) << 23 : 1u << (m + 16u);
}

// The 8 magnitude codes of fp4_mag_e4m3(., d) as bytes: t0 = magnitudes 0..3, t1 = 4..7 (the prmt table of the kernel's
// expansion). For -11 <= d <= 0 every nonzero entry is normal, so the table is d = 0's with d subtracted from each
// exponent field (no borrow: each field is >= 12 - 11); else entry by entry.
DSI_HD void fp4_e4m3_table(int d, uint32_t& t0, uint32_t& t1) {
  if (d >= -11 && d <= 0) {
    const uint32_t k = uint32_t(-d);
    t0 = 0x6C686000u - k * 0x08080800u;
    t1 = 0x7C787470u - k * 0x08080808u;
    return;
  }
  t0 = 0u;
  t1 = 0u;
  for (uint32_t i = 1; i < 8; ++i) (i < 4 ? t0 : t1) |= fp4_mag_e4m3(i, d) << (8 * (i & 3));
}

}  // namespace dsinfer::ops::moe_detail
