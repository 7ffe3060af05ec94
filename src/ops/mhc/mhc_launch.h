// Parameters and kernel launchers behind mhc_cuda.h (no CUDA types, no Status; validated by mhc_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/routed_sum.h"

namespace dsinfer::ops::cuda {

// One mHC site (or the head) plus the RMSNorm that follows it. Device pointers.
struct HcNormParams {
  const float* fn = nullptr;     // [(2+n)*n, n*dim] (hc_head: [n, n*dim])
  const float* base = nullptr;   // [(2+n)*n]        (hc_head: [n])
  const float* scale = nullptr;  // [3]              (hc_head: [1])
  int64_t n = 4, dim = 0, sinkhorn_iters = 20;
  float hc_eps = 1e-6f, rms_eps = 1e-6f;  // rms_eps: the mixing RMS and the following norm (rms_norm_eps)
  const float* norm_w = nullptr;  // [dim] weights of the norm after the collapse (attn_norm / ffn_norm / norm)
  // Batch-invariant mode: the mixing reduction's split and the finalize's team size fixed by (n, dim), not T, so
  // a token's bits do not depend on the other tokens of the call (hc_invariant_split).
  bool batch_invariant = false;
  // DeepSeek-V4.1 (hc_pre_norm only): collapse with these carried coefficients [T, n] instead of the site's own
  // pre, and store the site's own pre into pre_out [T, n]. Null = V4 behaviour. Must not alias each other.
  const float* pre_in = nullptr;
  float* pre_out = nullptr;
  // DeepSeek-V4.1 official numerics: the collapse and the norm's output rounded to bf16 (as the official code stores
  // them); the norm's statistics read the rounded collapse; the mixes in the CPU reference's exact arithmetic (mhc.cu).
  bool round_bf16 = false;
  // hc_pre_norm only: the finalize computes pre (the collapse needs nothing else) and leaves the raw post / comb mixes
  // (mu[n, 2n) and mu[2n, (2+n)n)) in post / comb, for hc_comb to turn into the coefficients later, off the collapse's
  // critical path (the forward runs it on a side stream; hc_post needs them). The same arithmetic either way.
  bool defer_comb = false;
  // Where not null: the normed output y also rounded to bf16 (round to nearest even, the rounding the cuBLASLt
  // engine's bf16 matmuls apply to an fp32 x: small_float::f32_to_bf16_bits) into y_bf16 [T (or R), dim], for the
  // projections that read y on a bf16 matmul (the V4 forward at prefill), which then skip their own rounding pass.
  // 8-byte aligned. y itself is unchanged.
  uint16_t* y_bf16 = nullptr;
  // With y_bf16: y's fp32 values are not stored (the caller's readers all take y_bf16; session 38, the V4 forward at
  // prefill). y is still the kernels' scratch (the mixes' partials, pre), so it holds no normed values afterwards.
  bool y_bf16_only = false;
  // hc_pre_norm only: the mixing partials are already in y, written by hc_post_mix (mhc_cuda.h) with these parameters
  // and the same T over the same X; only the finalize runs.
  bool premixed = false;
};

namespace detail {
inline constexpr int kHcMaxN = 8;
inline constexpr int kHcChunk = 128;  // floats of the n*dim reduction staged in shared memory per pipeline stage

// How the mixing reduction of one call is split (mhc_cuda.cpp picks it, the kernels follow it): `splits` blocks
// along n*dim per token tile, each covering `chunks_per_split` chunks of kHcChunk floats; tile = 8 or 32 tokens
// (1 or 4 m-tiles of the fp64 mma). The order of a token's sums depends on the split only, never on the tile.
// wide: the finalize runs one token per block (8 warps), else one token per warp; the split sums and the sum of
// squares of the norm are added in a different order, so it must not depend on T in batch-invariant mode.
// mma16: the 32-token tile on sm_90's m16n8k4 fp64 shape (else Ampere's m8n8k4, as the 8-token tile); false only
// for the bench's A/B and the test that the two shapes give the same bits.
// split_fin (used only when !wide): the narrow finalize as two kernels, the coefficients (one warp per token: partial
// sums, Sinkhorn; pre parked in y) and then the collapse + norm (one warp per token, the collapsed row kept in shared
// memory for the norm instead of written to y and read back); the same arithmetic in the same order, so the same
// bits as the fused narrow kernel (session 19; false only for the bench's A/B and GpuMhc.SplitFinalizeEqualsFused).
struct HcSplit {
  int splits = 1, chunks_per_split = 1, tile = 32;
  bool wide = true;
  bool mma16 = true;
  bool split_fin = true;
};
// Largest split count whose double partials [splits, mixes + 1] fit in one output row of dim floats (the
// partials live in y until the finalize kernel overwrites y; see mhc.cu). 0: dim too small.
inline int64_t hc_max_splits(int64_t dim, int64_t mixes) { return (dim / 2) / (mixes + 1); }
// Token tile of the mixing kernel: 8 tokens for a few, else 32 (fn reused by 4 m-tiles); 8 when the mixes need
// more than 3 n-tiles (n > 4), to bound the accumulator registers.
inline int hc_tile(int64_t T, int64_t mixes) { return T <= 8 || mixes > 24 ? 8 : 32; }
// Batch-invariant split: at most kHcInvariantSplits slices of the n*dim reduction (V4-Flash: 32 slices of 4 chunks),
// always the wide finalize. The tile is still chosen from T: it only changes which block holds a token, not the
// order of its sums.
inline constexpr int64_t kHcInvariantSplits = 32;
inline HcSplit hc_invariant_split(int64_t T, int64_t n, int64_t dim, int64_t mixes) {
  HcSplit s;
  s.tile = hc_tile(T, mixes);
  const int64_t nchunks = (n * dim + kHcChunk - 1) / kHcChunk, cap = hc_max_splits(dim, mixes);
  int64_t splits = kHcInvariantSplits < nchunks ? kHcInvariantSplits : nchunks;
  if (splits > cap) splits = cap;
  if (splits < 1) splits = 1;
  s.chunks_per_split = int((nchunks + splits - 1) / splits);
  s.splits = int((nchunks + s.chunks_per_split - 1) / s.chunks_per_split);
  s.wide = true;
  return s;
}

// The split of the default (and exact) path: about one wave of the mixing kernel on this device (mhc_cuda.cpp).
HcSplit hc_default_split(int64_t T, int64_t n, int64_t dim, int64_t mixes);

// hc_post fused with the next site's mixing reduction (launch_hc_post_mix): n = 4 and 24 mixes only, 32-token tiles,
// chunks of kHcPostMixCols channels of all four streams (kHcChunk values of the reduction), dim % kHcPostMixCols == 0.
inline constexpr int kHcPostMixTile = 32;
inline constexpr int kHcPostMixCols = kHcChunk / 4;
// Its split (mhc_cuda.cpp): about one wave of two blocks an SM, chunks_per_split counted in those chunks; always the
// narrow finalize (the fused form is for prefill-sized T).
HcSplit hc_post_mix_split(int64_t T, int64_t dim);

// hc_pre / hc_head in two kernels: the split mixing reduction (launch_hc_mix, mhc_mix.cu), then the finalize
// (sigmoids, Sinkhorn, collapse, RMSNorm). rows == nullptr: hc_pre over T tokens; else hc_head over the R = T
// listed rows. launch_hc_norm runs both; the two halves are exposed for the bench's breakdown.
void launch_hc_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& split,
                    float* y, float* post, float* comb, void* stream);
void launch_hc_mix(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& split,
                   float* y, void* stream);
void launch_hc_finalize(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& split,
                        float* y, float* post, float* comb, void* stream);
// y[r] = rmsnorm(sum_j pre[rows[r], j] * X[rows[r], j, :], norm_w) (DeepSeek-V4.1's final collapse).
void launch_hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                             const float* norm_w, float eps, bool round_bf16, float* y, void* stream);
// hc_post in place on X, and in the same pass over the new streams the mixing reduction of the next site `next`
// (hc_pre's first kernel, split sp = hc_post_mix_split) into y; the next site's finalize (launch_hc_finalize with the
// same split) completes its hc_pre.
void launch_hc_post_mix(const HcNormParams& next, int64_t T, const float* f, const float* post, const float* comb,
                        float* X, const HcSplit& sp, float* y, void* stream);
// f null and routed not null: hc_post_routed (f summed from the MoE's routed outputs).
void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const RoutedSum* routed, const float* post,
                    const float* comb, float* X, bool round_bf16, void* stream);
// Finishes a deferred hc_pre (HcNormParams::defer_comb): post [T, n] and comb [T, n, n] in place from the raw mixes
// the finalize left there; one warp per token, 8 tokens per block.
void launch_hc_comb(const HcNormParams& p, int64_t T, float* post, float* comb, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
