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

// ---- weight formats: the scalar decoders are core/small_float.h (shared with the host conversions) ----
// FP4 vectors: byte c holds element 2c in its low nibble, so in a little-endian 32-bit word element j (0..7) is
// nibble j.
DSI_HD uint32_t fp4_code_in_word(uint32_t word, int j) { return (word >> (4 * j)) & 0xFu; }

}  // namespace dsinfer::ops::gemm_detail
