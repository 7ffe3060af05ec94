// The CUDA drafters' own kernels (plain header; launchers in draft_kernels_launch.h, kernels in draft_kernels.cu).
// Everything else of the drafter forward reuses the target's ops (GEMM, RMSNorm, RoPE, mHC, router, MoE, embed).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/draft_kernels/draft_kernels_launch.h"

namespace dsinfer::ops::cuda {

// Window attention with per-token key ranges (DraftKeys) and per-head sinks, K = V (semantics of
// ops::sparse_attention_ref over the key list "ring range, then new rows"); the query's norm + RoPE and the output's
// inverse RoPE fused where DraftAttnArgs asks. Every token's key count must be <= a.max_keys (checked on the host by
// the caller, which built the ranges).
Status draft_attention_cuda(const DraftAttnArgs& a, void* stream);
Status stream_mean_cuda(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream);
// rows: optional device indices of the T rows to scatter (null = rows 0..T-1); a row of slot < 0 is skipped (padding).
Status ring_scatter_cuda(const float* kv, const int32_t* slot, const int64_t* pos, int64_t T, int64_t dim, float* ring,
                         int64_t slot_stride, int64_t window, void* stream, const int32_t* rows = nullptr);
Status draft_pick_cuda(const DraftPickArgs& a, void* stream);
// Every draft position's Markov bias, confidence and pick in one launch (DraftPicksArgs; draft_picks_supported).
Status draft_picks_cuda(const DraftPicksArgs& a, void* stream);
// The drafter's MoE for a few tokens in two launches (DraftMoeArgs; draft_moe_supported).
Status draft_moe_cuda(const DraftMoeArgs& a, void* stream);
Status copy_rows_cuda(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows, int64_t T,
                      int64_t width, void* stream);
Status add_rows_cuda(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream);
// The one-wait round's acceptance and next-propose inputs (SpecRoundArgs). The argmax is sampling's (NaN as -inf, ties
// to the lower id; every logit -inf: id 0), so the accepted tokens are Sampler::sample's greedy tokens of the rows.
Status spec_round_cuda(const SpecRoundArgs& a, void* stream);

}  // namespace dsinfer::ops::cuda
