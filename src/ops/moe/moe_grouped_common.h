// Tile sizes and the k order of the grouped (prefill) MoE GEMMs (moe_grouped.cu), shared with their CPU self-checks
// (tests/unit/test_moe_grouped.cpp). No CUDA types. Design in docs/kernels.md "MoE grouped path".
//
// mma.sync m16n8k16 with the activation rows as the A operand (ldmatrix from shared memory) and the FP4 weight rows
// as B, decoded in registers straight from the raw FP4 bytes in shared memory (no bf16 weight tile). A dot product
// does not care about the order of k, so the activations are stored in the order in which the weights decode
// cheaply ("chunk layout"): in a 128-k chunk, lane t (= lane & 3) owns the 32 k of its FP4 vector (bytes 16t..16t+15
// of the row, one E8M0 scale) and feeds its bf16 pairs P = 2s (mma columns 2t, 2t+1) and P = 2s + 1 (columns
// 2t+8, 2t+9) at k-step s (0..7); pair P holds the group's elements (8(P/4) + P%4, +4) (moe_fast_common.h, whose
// decode is reused). So memory slot 16s + 8(P%2) + 2t + h of a chunk holds element 32t + pair_src(2P + h).
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "ops/moe/moe_fast_common.h"

namespace dsinfer::ops::moe_detail {

inline constexpr int kGrpBM = 128;       // permuted rows (one expert) per CTA tile
inline constexpr int kGrpBN = 128;       // weight rows per CTA tile (gate/up: 64 of W1 + the same 64 of W3)
inline constexpr int kGrpHCols = 64;     // gate/up: SwiGLU output columns per CTA tile
inline constexpr int kGrpBK = 128;       // k per pipeline stage (one chunk)
inline constexpr int kGrpStages = 3;     // cp.async ring depth
inline constexpr int kGrpThreads = 256;  // 8 warps: 2 (rows) x 4 (columns), warp tile 64 x 32

// Element (0..127) of a chunk held in memory slot p (0..127).
DSI_HD int grp_elem(int p) {
  const int s = p >> 4, c = p & 15;
  const int P = 2 * s + (c >> 3), t = (c & 7) >> 1, h = c & 1;
  return 32 * t + pair_src(2 * P + h);
}
// Inverse of grp_elem: the memory slot of chunk element k (0..127).
DSI_HD int grp_slot(int k) {
  const int t = k >> 5, slot = pair_dst(k & 31);
  const int P = slot >> 1, h = slot & 1;
  return 16 * (P >> 1) + 8 * (P & 1) + 2 * t + h;
}

// Upper bound on the CTA row tiles of a permutation of n rows over `experts` groups: sum_e ceil(c_e / BM)
// <= n / BM + (number of non-empty groups).
inline int64_t grp_max_tiles(int64_t n, int64_t experts) {
  return n / kGrpBM + (n < experts ? n : experts) + 1;
}

}  // namespace dsinfer::ops::moe_detail
