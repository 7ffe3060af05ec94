// Index and bit logic shared by the GEMM/MoE CUDA kernels and their CPU self-checks (tests/unit/test_gemm_tiling.cpp):
// the tensor-core tile shape, which thread loads which tile element, the mma.sync m16n8k16 fragment layout, and the
// bit-level decoders of the weight formats. Compiles with and without nvcc (no CUDA types), so the CPU build tests it.
#pragma once
#include <cstdint>

#include "ops/state_view.h"  // DSI_HD

namespace dsinfer::ops::gemm_detail {

// ---- tiled tensor-core kernel (gemm_tiled.cu): block tile BM x BN over K steps of BK, 8 warps as 2 (M) x 4 (N),
// each warp owns a 32 x 32 sub-tile = 2 (m16) x 4 (n8) mma tiles. Shared tiles are bf16, row = output row (A) or
// weight row (B), k contiguous, rows padded to kLds elements (80 bytes: fragment reads hit 32 distinct banks).
inline constexpr int kBM = 64, kBN = 128, kBK = 32, kLds = kBK + 8, kTiledThreads = 256;
inline constexpr int kWarpM = 32, kWarpN = 32;

struct Coord {
  int row, col;
};

// X tile loader: thread t converts 8 consecutive k of one row (64 rows x 4 segments = 256 threads).
DSI_HD Coord x_load_coord(int tid) { return {tid / 4, (tid % 4) * 8}; }
inline constexpr int kXLoadRun = 8;
// W tile loader: thread t dequantizes 16 consecutive k of one weight row (128 rows x 2 segments).
DSI_HD Coord w_load_coord(int tid) { return {tid / 2, (tid % 2) * 16}; }
inline constexpr int kWLoadRun = 16;

// Warp sub-tile origin inside the block tile.
DSI_HD Coord warp_origin(int warp) { return {(warp / 4) * kWarpM, (warp % 4) * kWarpN}; }

// mma.sync.m16n8k16 .row.col fragment layout (PTX ISA "Matrix Fragments for mma.m16n8k16", bf16):
// A (16x16, row-major): register r (0..3) of lane holds A[row][col], A[row][col+1] (low half = col).
DSI_HD Coord frag_a(int lane, int r) {
  const int g = lane >> 2, t = lane & 3;
  return {g + ((r & 1) ? 8 : 0), 2 * t + ((r & 2) ? 8 : 0)};
}
// B (16x8, "col"): register r (0..1) holds B[k][n], B[k+1][n] returned as {row = n, col = k} because the shared
// tile stores B transposed (weight row n, k contiguous).
DSI_HD Coord frag_b(int lane, int r) {
  const int g = lane >> 2, t = lane & 3;
  return {g, 2 * t + (r ? 8 : 0)};
}
// C/D (16x8 fp32): element j (0..3) of lane sits at C[row][col].
DSI_HD Coord frag_c(int lane, int j) {
  const int g = lane >> 2, t = lane & 3;
  return {g + ((j & 2) ? 8 : 0), 2 * t + (j & 1)};
}

// ---- skinny (small-M) kernel (gemm_skinny.cu): x rows in chunks of kSkMaxM, each warp owns kSkRowsPerWarp
// weight rows, each lane streams 16-byte weight vectors.
inline constexpr int kSkMaxM = 8, kSkWarps = 4, kSkRowsPerWarp = 2, kSkVecPerLane = 2;

// ---- scalar format decoders (bit exact; the host conversions in core/dtypes.h are the specification) ----
DSI_HD uint32_t e2m1_f32_bits(uint32_t code) {
  const uint32_t s = (code >> 3) & 1u, e = (code >> 1) & 3u, m = code & 1u;
  const uint32_t mag = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3F000000u : 0u);  // 0x3F000000 = 0.5f
  return mag | (s << 31);
}
DSI_HD uint32_t e8m0_f32_bits(uint32_t b) {
  b &= 0xFFu;
  if (b == 0xFFu) return 0x7FC00000u;  // NaN
  if (b == 0u) return 0x00400000u;     // 2^-127 is an fp32 subnormal
  return b << 23;
}
// e4m3fn: bias 7, subnormal m * 2^-9, 0x7F / 0xFF NaN, no inf.
DSI_HD uint32_t e4m3_f32_bits(uint32_t b) {
  const uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15u && m == 7u) return 0x7FC00000u;
  if (e == 0u) {
    if (m == 0u) return s << 31;
    // m * 2^-9 with m in 1..7: normalise the 3-bit mantissa.
    uint32_t shift = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);  // position of the leading one
    uint32_t frac = (m << (23u - shift)) & 0x7FFFFFu;
    return (s << 31) | ((118u + shift) << 23) | frac;   // 2^-9 has biased exponent 118
  }
  return (s << 31) | ((e + 120u) << 23) | (m << 20);
}
// FP4 vectors: byte c holds element 2c in its low nibble, so in a little-endian 32-bit word element j (0..7) is
// nibble j.
DSI_HD uint32_t fp4_code_in_word(uint32_t word, int j) { return (word >> (4 * j)) & 0xFu; }

}  // namespace dsinfer::ops::gemm_detail
