// Batch-invariant GEMM dispatch (GemmPrecision::kBatchInvariant; the runner's --batch-invariant mode, docs/kernels.md
// "Batch invariance"). Default dispatch picks the kernel and the streaming kernel's K split from M, so a row's
// reduction order (and its last bits) can change with the batch. Here every choice is a function of the weight
// (format, N, K, block_k, alignment, groups) and the device's SM count only, never of M: the same row gives the
// same bits in any batch. Each kernel's per-row sum is independent of the other rows once its K partition is fixed
// (skinny: a lane chain + fixed butterfly per row; tiled: one thread's fixed-order mma chain per element;
// streaming: per-split chains summed in cluster-rank order, tokens per block only change which block holds a row).
// Plain host code without CUDA types, so the CPU tests check it (tests/unit/test_batch_invariant.cpp).
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_launch.h"

namespace dsinfer::ops::cuda {

enum class GemmKernel { kSkinny, kTiled, kStream };

// Bytes of the streaming kernel's bf16 x tile per block (two blocks per SM at 64 tokens); plan_gemm_stream's bound.
inline constexpr int64_t kGemmStreamXsMax = 96 * 1024;
// Single FP8 weights up to this many outputs take the streaming kernel (it beat the default kernels for N <= 4096 at
// M = 9-128 on the H200, bench/NOTES.md); larger N (wq_b, the indexer's wq_b) take the tiled kernel.
inline constexpr int64_t kGemmInvariantStreamMaxN = 4096;
// Other single weights up to this many outputs take the skinny fp32 kernel in one launch for any M (it walks the
// rows in chunks of 8, re-reading a small weight from L2): router, indexer weights, compressor projections. Larger
// ones (lm head) and grouped weights (wo_a) take the tiled kernel.
inline constexpr int64_t kGemmInvariantSkinnyMaxN = 1024;

// The weight facts the choice may depend on.
struct GemmWeightShape {
  WeightFormat fmt = WeightFormat::F32;
  int64_t N = 0, K = 0, block_k = 128, groups = 1;
  bool w_vec = false;     // 16-byte weight vectors legal (GemmArgs::w_vec)
  bool gathered = false;  // MoE row gather / per-expert pointers / row offsets
};

struct GemmInvariantPlan {
  GemmKernel kernel = GemmKernel::kTiled;
  int splits = 1, kb_per_split = 1;  // streaming kernel: fixed K partition (scale blocks per split)
};

// The streaming kernel applies to the weight at all (any M <= kGemmStreamMaxM).
inline bool gemm_stream_weight_ok(const GemmWeightShape& w) {
  return w.fmt == WeightFormat::FP8_BLOCK && w.w_vec && !w.gathered && w.groups == 1 && w.K > 0 && w.K % 64 == 0 &&
         w.block_k > 0 && w.block_k % 64 == 0;
}

// x tile bytes of one streaming block: `tokens` rows of kb_per_split scale blocks in bf16, +16 bytes of padding.
inline int64_t gemm_stream_xs_bytes(int64_t tokens, int64_t kb_per_split, int64_t block_k) {
  return tokens * (kb_per_split * block_k * 2 + 16);
}

// Kernel and K partition from the weight and the SM count. Streaming split: doubled (<= 8) while one token chunk
// of the weight gives fewer than 2 blocks per SM or the 8-token x tile exceeds kGemmStreamXsMax — the default
// plan's rule at M = 1, so decode keeps its parallelism; larger M only adds token chunks on grid z.
inline GemmInvariantPlan gemm_invariant_plan(const GemmWeightShape& w, int sm_count) {
  GemmInvariantPlan p;
  if (gemm_stream_weight_ok(w) && w.N <= kGemmInvariantStreamMaxN) {
    const int64_t kblocks = (w.K + w.block_k - 1) / w.block_k;
    const int64_t row_blocks = (w.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows;
    const int64_t sms = sm_count > 0 ? sm_count : 1;
    auto per = [&](int64_t s) { return (kblocks + s - 1) / s; };
    int64_t s = 1;
    while (s < 8 && 2 * s <= kblocks &&
           (row_blocks * s < 2 * sms || gemm_stream_xs_bytes(8, per(s), w.block_k) > kGemmStreamXsMax))
      s *= 2;
    if (gemm_stream_xs_bytes(8, per(s), w.block_k) <= kGemmStreamXsMax) {
      p.kernel = GemmKernel::kStream;
      p.kb_per_split = int(per(s));
      p.splits = int((kblocks + per(s) - 1) / per(s));  // every split non-empty
      return p;
    }
  }
  p.kernel = w.w_vec && !w.gathered && w.groups == 1 && w.N <= kGemmInvariantSkinnyMaxN ? GemmKernel::kSkinny
                                                                                      : GemmKernel::kTiled;
  return p;
}

// Tokens per streaming block for a chunk of M <= kGemmStreamMaxM rows under a fixed K partition: the power of two
// >= M (8..64), halved while the x tile exceeds kGemmStreamXsMax. Changes only which block holds a row, never a
// row's sums. 0 when even 8 tokens do not fit (gemm_invariant_plan never returns such a plan).
inline int gemm_invariant_stream_tokens(int64_t M, int64_t kb_per_split, int64_t block_k) {
  int64_t tokens = 8;
  while (tokens < 64 && tokens < M) tokens *= 2;
  while (tokens > 8 && gemm_stream_xs_bytes(tokens, kb_per_split, block_k) > kGemmStreamXsMax) tokens /= 2;
  return gemm_stream_xs_bytes(tokens, kb_per_split, block_k) > kGemmStreamXsMax ? 0 : int(tokens);
}

}  // namespace dsinfer::ops::cuda
