// Index and bit logic of the fast (decode) MoE kernels (moe_fast.cu), shared with their CPU self-checks
// (tests/unit/test_moe_fast.cpp). No CUDA types. Design in docs/kernels.md "MoE fast path".
//
// mma.sync m16n8k16 with the expert weights as the A operand (16 weight rows) and tokens as B (8 tokens). A dot
// product does not care about the order of k, so each lane feeds the tensor core its own 32 consecutive k (one
// 16-byte FP4 vector = one E8M0 scale group) over 8 mma k-steps: lane t (= lane & 3) of a 128-k chunk owns
// elements [32t, 32t + 32). In the 32-element group, bf16 "pair" P (0..15) holds elements (8(P/4) + P%4,
// 8(P/4) + P%4 + 4): word q of the FP4 vector (codes 8q..8q+7, code j in nibble j) gives pairs 4q..4q+3 with a few
// shifts and masks, no table. k-step s uses pair 2s in the fragment registers of columns (2t, 2t+1) and pair
// 2s + 1 in those of columns (2t+8, 2t+9), for A and B alike. The B operand (activations) is stored in that pair
// order ("pair layout": slot 2P + h of a group holds element pair_src(2P + h)), so a lane loads its 8 k-steps of B
// as 64 contiguous bytes.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::ops::moe_detail {

inline constexpr int kFastThreads = 256, kFastWarps = 8;
inline constexpr int kFastChunk = 128;     // k per warp step: 4 lanes (t) x 32
inline constexpr int kFastTokens = 8;      // tokens (mma N) per pass over an expert's rows
inline constexpr int kFastTiles = 4;       // m16 weight tiles per block
inline constexpr int kFastGateRows = 32;   // gate/up kernel: I rows per block (tiles: W1 x2, W3 x2)
inline constexpr int kFastDownRows = 64;   // down kernel: D rows per block (tiles: W2 x4)
// The weights are decoded as value * 2^-(126 + kFastScaleShift) (see fp4_scale_bf16); the fp32 accumulators are
// multiplied back by 2^kFastScaleShift in the epilogue. Exact for E8M0 scale bytes 66..192 (scales 2^-61 .. 2^65;
// real FP4 expert scales are near 2^-9): below, the smallest codes underflow bf16 (flush toward 0).
inline constexpr int kFastScaleShift = 64;

// Element (0..31) held in slot i (0..31) of a pair-layout group.
DSI_HD int pair_src(int i) {
  const int P = i >> 1;
  return 8 * (P >> 2) + (P & 3) + 4 * (i & 1);
}
// Inverse of pair_src: the slot of element e.
DSI_HD int pair_dst(int e) {
  const int q = e >> 3, r = e & 7;
  return 2 * (4 * q + (r & 3)) + (r >> 2);
}

// bf16x2 bits of FP4 codes p (low half) and p + 4 (high half) of word w (p = 0..3), each as the bf16 whose bits
// are sign << 15 | eem << 6 (eem = the code's 3 magnitude bits): that is the e2m1 value times 2^-126 (the code
// 001, 0.5, lands on the subnormal 2^-127; codes with exponent bits land on normal numbers). Multiplying by a
// power of two brings it back exactly.
DSI_HD uint32_t fp4_pair_bits(uint32_t w, int p) {
  const int sh = 6 - 4 * p;  // moves bits 4p..4p+2 to 6..8 (and 16+4p.. to 22..24)
  const uint32_t mag = (sh >= 0 ? (w << sh) : (w >> -sh)) & 0x01C001C0u;
  const uint32_t sign = (w << (12 - 4 * p)) & 0x80008000u;  // bit 4p+3 -> 15, bit 4p+19 -> 31
  return mag | sign;
}

// fp4_pair_bits(w, p) of p = 0..3 at once. Two bit-selects line the codes up: a = sign bits from w << 8, the other
// bits from w << 2 (codes 1 / 5 in place, codes 0 / 4 four bits lower); b = sign bits from w, the others from w >> 6
// (codes 3 / 7 in place, codes 2 / 6 four bits lower). A mask (after a shift by 4 for codes 0 / 4 and 2 / 6) takes
// each pair out: 11 integer operations for the word's four pairs instead of ~16 (bench/NOTES.md "Session 23 —
// helper s23-moed"). The same bits as fp4_pair_bits for every word (tests/unit/test_moe_fast.cpp).
DSI_HD uint32_t bit_select(uint32_t mask, uint32_t x, uint32_t y) {  // x where mask has ones, else y
#ifdef __CUDA_ARCH__
  uint32_t r;  // one lop3 (the compiler splits the expression in two when x and y are shifts)
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(r) : "r"(x), "r"(y), "r"(mask));
  return r;
#else
  return (x & mask) | (y & ~mask);
#endif
}

DSI_HD void fp4_word_pairs(uint32_t w, uint32_t (&out)[4]) {
  constexpr uint32_t kSel = 0x88008800u;   // bits 11, 15, 27, 31: where a and b hold sign bits
  constexpr uint32_t kPair = 0x81C081C0u;  // a pair's bits: signs 15 / 31, magnitudes 6..8 / 22..24
  const uint32_t a = bit_select(kSel, w << 8, w << 2);
  const uint32_t b = bit_select(kSel, w, w >> 6);
  out[0] = (a << 4) & kPair;
  out[1] = a & kPair;
  out[2] = (b << 4) & kPair;
  out[3] = b & kPair;
}

// Half of fp4_word_pairs: fp4_pair_bits(w, 2h) and fp4_pair_bits(w, 2h + 1) from one of its two bit-selects (h = 0:
// a, h = 1: b), for kernels whose steps use two pairs of a word each (the RS grouped kernels' 16-k steps,
// moe_grouped_rs_decode.cuh): 6 integer operations for h = 0 and 5 for h = 1 instead of 8. The same bits as
// fp4_pair_bits for every word (tests/unit/test_moe_fast.cpp).
DSI_HD void fp4_half_pairs(uint32_t w, int h, uint32_t (&out)[2]) {
  constexpr uint32_t kSel = 0x88008800u;   // as fp4_word_pairs
  constexpr uint32_t kPair = 0x81C081C0u;
  const uint32_t v = h == 0 ? bit_select(kSel, w << 8, w << 2) : bit_select(kSel, w, w >> 6);
  out[0] = (v << 4) & kPair;
  out[1] = v & kPair;
}

// bf16 bits of 2^(s - 127) * 2^126 / 2^kFastScaleShift for an E8M0 scale byte s: the factor that turns
// fp4_pair_bits values into weight * 2^-kFastScaleShift. 0xFF (NaN scale) gives a bf16 NaN; bytes above 192
// (scales over 2^65, not produced by real checkpoints) saturate to inf.
DSI_HD uint32_t fp4_scale_bf16(uint32_t s) {
  s &= 0xFFu;
  const uint32_t m = s < 193u ? s : 193u;  // biased bf16 exponent of 2^(s - 1 - shift): m + 62, 255 (inf) from 193 on
  const uint32_t f = (m + uint32_t(126 - kFastScaleShift)) << 7;
  return s == 0xFFu ? 0x7FC0u : f;
}

// fp4_scale_bf16(s) in both halves (the bf16x2 factor of the kernels) for a scale byte s <= 255: the range checks as
// a min (bytes above 192 give the inf factor, as there) and one multiply-add, a NaN bit for 0xFF. 4 operations
// against 7.
DSI_HD uint32_t fp4_scale_bf16x2(uint32_t s) {
  const uint32_t m = s < 193u ? s : 193u;  // biased exponent m + 62: 255 (inf) from 193 on
  const uint32_t f = m * 0x00800080u + uint32_t(126 - kFastScaleShift) * 0x00800080u;
  return s == 0xFFu ? (f | 0x00400040u) : f;
}

// FP8 e4m3 weights (the shared expert run inside the fast kernels, moe_fast_shared.h): a lane's 32 elements of a
// 128-k chunk are 32 bytes; elements 8q..8q+3 are bytes 0..3 of word 2q, 8q+4..8q+7 those of word 2q+1. bf16x2 bits
// of byte p of word a (low half: element 8q + p) and of word b (high half: element 8q + p + 4), each as the bf16
// whose bits are sign << 15 | (the byte's 7 magnitude bits) << 4: the e4m3 value times 2^-120 (the exponent fields
// line up at that shift, so e4m3 subnormals land on bf16 subnormals and normals on normals; the e4m3fn NaN codes
// 0x7F / 0xFF decode as 480, which real checkpoints do not hold). On the GPU one prmt gathers the two bytes.
DSI_HD uint32_t e4m3_pair_bits(uint32_t a, uint32_t b, int p) {
#ifdef __CUDA_ARCH__
  const uint32_t sel = uint32_t(p) * 0x11u + uint32_t(4 + p) * 0x1100u;  // bytes: a.p, a.p, b.p, b.p
  const uint32_t t = __byte_perm(a, b, sel);
#else
  const uint32_t t = (((a >> (8 * p)) & 0xFFu) << 8) | (((b >> (8 * p)) & 0xFFu) << 24);
#endif
  return (t & 0x80008000u) | ((t >> 4) & 0x07F007F0u);
}

// bf16 bits of 2^(s - 127) * 2^120 / 2^kFastScaleShift for an E8M0 block scale byte s: the factor that turns
// e4m3_pair_bits values into weight * 2^-kFastScaleShift. Exact for s = 74..198 (the product stays a normal bf16
// for every e4m3 value: 2^-9 * 2^(s - 191) >= 2^-126); 0xFF gives a bf16 NaN, bytes above 198 saturate to inf.
DSI_HD uint32_t e4m3_scale_bf16(uint32_t s) {
  s &= 0xFFu;
  if (s == 0xFFu) return 0x7FC0u;
  const uint32_t e = s + 120u - uint32_t(kFastScaleShift);  // biased bf16 exponent of 2^(s - 127 + 120 - shift)
  return e >= 255u ? 0x7F80u : (e << 7);
}

}  // namespace dsinfer::ops::moe_detail
