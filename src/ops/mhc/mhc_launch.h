// Parameters and kernel launchers behind mhc_cuda.h (no CUDA types, no Status; validated by mhc_cuda.cpp).
#pragma once
#include <cstdint>

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
};

namespace detail {
inline constexpr int kHcMaxN = 8;
inline constexpr int kHcChunk = 64;  // floats of the n*dim reduction staged in shared memory per step

// How the mixing reduction of one call is split (mhc_cuda.cpp picks it, the kernels follow it): `splits` blocks
// along n*dim per token tile, each covering `chunks_per_split` chunks of kHcChunk floats; tile = 8 or 32 tokens.
// wide: the finalize runs one token per block (8 warps), else one token per warp; the sum of squares of the norm
// is added in a different order, so it must not depend on T in batch-invariant mode.
struct HcSplit {
  int splits = 1, chunks_per_split = 1, tile = 32;
  bool wide = true;
};
// Largest split count whose double partials [splits, mixes + 1] fit in one output row of dim floats (the
// partials live in y until the finalize kernel overwrites y; see mhc.cu). 0: dim too small.
inline int64_t hc_max_splits(int64_t dim, int64_t mixes) { return (dim / 2) / (mixes + 1); }
// Batch-invariant split: at most kHcInvariantSplits slices of the n*dim reduction (V4-Flash: 32 slices of 8 chunks,
// ~24 % of 132 SMs' two-block target at T = 1), always the wide finalize. The tile (8 or 32 tokens) is still
// chosen from T: it only changes which block holds a token, not the order of its sums.
inline constexpr int64_t kHcInvariantSplits = 32;
inline HcSplit hc_invariant_split(int64_t T, int64_t n, int64_t dim, int64_t mixes) {
  HcSplit s;
  s.tile = T <= 64 ? 8 : 32;
  const int64_t nchunks = (n * dim + kHcChunk - 1) / kHcChunk, cap = hc_max_splits(dim, mixes);
  int64_t splits = kHcInvariantSplits < nchunks ? kHcInvariantSplits : nchunks;
  if (splits > cap) splits = cap;
  if (splits < 1) splits = 1;
  s.chunks_per_split = int((nchunks + splits - 1) / splits);
  s.splits = int((nchunks + s.chunks_per_split - 1) / s.chunks_per_split);
  s.wide = true;
  return s;
}

// hc_pre / hc_head in two kernels: the split mixing reduction, then the finalize (sigmoids, Sinkhorn, collapse,
// RMSNorm). rows == nullptr: hc_pre over T tokens; else hc_head over the R = T listed rows.
void launch_hc_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& split,
                    float* y, float* post, float* comb, void* stream);
// y[r] = rmsnorm(sum_j pre[rows[r], j] * X[rows[r], j, :], norm_w) (DeepSeek-V4.1's final collapse).
void launch_hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                             const float* norm_w, float eps, float* y, void* stream);
void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
                    void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
