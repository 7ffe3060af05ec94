// Index and bit logic shared by the GEMM/MoE CUDA kernels and their CPU self-checks (tests/unit/test_gemm_tiling.cpp):
// the tensor-core tile shape, which thread loads which tile element, the mma.sync m16n8k16 fragment layout, and the
// FP4 nibble order of packed weights. Compiles with and without nvcc (no CUDA types), so the CPU build tests it.
#pragma once
#include <cstdint>

#include "core/host_device.h"

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

// ---- streaming tensor-core kernel (gemm_stream.cu, FP8 weights, 1 <= M <= 256): 4 warps x 16 weight rows per
// block, weights are the mma A operand (m16), tokens the B operand (n8). Each lane streams 16 bytes of weight row g
// and of row g + 8 per 64-wide K chunk straight into registers: within a chunk, lane (g, t) holds bytes
// [16t, 16t + 16) and mma step s (0..3) uses bytes 16t + 4s + {0, 2} as fragment k (2t, 2t + 1) and 16t + 4s + {1, 3}
// as k (2t + 8, 2t + 9). Any k order gives the same dot product as long as x uses the same one, so x is stored in
// shared memory with each group of 4 consecutive k as (k0, k2, k1, k3) and a lane's B fragments are its 32
// contiguous bytes. st_chunk_k: the chunk offset that fragment k kk (0..15; lane quad t = kk % 8 / 2) of step s holds.
inline constexpr int kStRows = 64, kStWarps = 4, kStThreads = 128, kStChunk = 64, kStPartLd = kStRows + 4;
DSI_HD int st_chunk_k(int s, int kk) { return 16 * (kk % 8 / 2) + 4 * s + (kk >= 8 ? 1 : 0) + 2 * (kk % 2); }
// Position of chunk offset k in a row of the permuted shared-memory x tile (quads stored as k0, k2, k1, k3).
DSI_HD int st_x_slot(int k) { return (k & ~3) + ((k & 1) ? 2 : 0) + ((k & 2) ? 1 : 0); }
// e4m3 bytes 0 and 2 (even) / 1 and 3 (odd) of a word as a bf16 pair (low half = lower byte): sign to bit 15,
// exponent and mantissa to bits 10..4. Each half is the e4m3 value times 2^-120 exactly (e4m3 subnormals become
// bf16 subnormals; the NaN codes 0x7F / 0xFF become +-480 * 2^-120); the kernel multiplies by 2^120 in bf16.
DSI_HD uint32_t st_e4m3_even_bf16(uint32_t w) { return ((w << 8) & 0x80008000u) | ((w << 4) & 0x07F007F0u); }
DSI_HD uint32_t st_e4m3_odd_bf16(uint32_t w) { return (w & 0x80008000u) | ((w >> 4) & 0x07F007F0u); }

// ---- weight formats: the scalar decoders are core/small_float.h (shared with the host conversions) ----
// FP4 vectors: byte c holds element 2c in its low nibble, so in a little-endian 32-bit word element j (0..7) is
// nibble j.
DSI_HD uint32_t fp4_code_in_word(uint32_t word, int j) { return (word >> (4 * j)) & 0xFu; }

}  // namespace dsinfer::ops::gemm_detail
