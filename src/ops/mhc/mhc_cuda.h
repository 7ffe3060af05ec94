// CUDA mHC (same semantics as mhc.h) fused with the RMSNorm that always follows a collapse: hc_pre + attn_norm /
// ffn_norm, hc_post, and hc_head + the final norm for the rows that need logits. All pointers are device
// pointers; activations fp32.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/mhc/mhc_launch.h"  // HcNormParams

namespace dsinfer::ops::cuda {

// X: [T, n, dim] residual streams. Outputs y [T, dim] = rmsnorm(sum_j pre_j X_j, norm_w), post [T, n],
// comb [T, n, n] (comb[t, j, k], row-major). Two kernels: the mixing reduction of all tokens split over n*dim
// (its double partials are parked in y, which must not alias X), then per token the Sinkhorn in one warp and the
// collapse + norm. n <= 8, dim % 4 == 0, dim >= 2 * ((2+n)*n + 1); X, y, fn 16-byte aligned.
// With p.defer_comb, post and comb hold the raw post / comb mixes afterwards, and hc_comb (same p) must run before
// anything reads them. With p.y_bf16, y is also written rounded to bf16 there (hc_head_norm likewise).
Status hc_pre_norm(const HcNormParams& p, const float* X, int64_t T, float* y, float* post, float* comb, void* stream);

// Finishes hc_pre_norm(p with defer_comb) of the same T tokens: post and comb in place, the bits hc_pre_norm without
// defer_comb writes. One small kernel (a warp per token), for a side stream: nothing on the main stream waits for it
// until hc_post.
Status hc_comb(const HcNormParams& p, int64_t T, float* post, float* comb, void* stream);

// Whether a forward defers the coefficients of a T-token step to a side stream (HcNormParams::defer_comb + hc_comb):
// decode steps (T <= kHcDeferMaxT, the wide finalize's one block per token), where the Sinkhorn chain of one warp is
// the finalize's critical path; not at prefill, where a warp per token of Sinkhorn would compete with the main
// stream's kernels for the SMs. DSINFER_HC_DEFER=0 turns it off (a measurement switch, read once; same bits).
inline constexpr int64_t kHcDeferMaxT = 512;
bool hc_defer_comb(int64_t T);

// In place: X[t, k, :] = post[t, k] * f[t, :] + sum_j comb[t, j, k] * X[t, j, :] (double accumulation; every
// thread reads all n old streams of its channels before writing). One thread per (token, 4 channels);
// dim % 4 == 0, f and X 16-byte aligned. round_bf16 (V4.1 official numerics): the new streams rounded to bf16
// (round_bf16_cuda fused: the same bits as the two launches).
Status hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
               void* stream, bool round_bf16 = false);

// hc_post fused with the mixing reduction of the next site's hc_pre (`next`, over the new streams): one pass over X
// instead of two at prefill sizes. The new X is hc_post's bits; the mixes' double partials go to y as hc_pre_norm
// parks them, and hc_pre_norm(next with premixed set, X, T, y, ...) then runs only the finalize. The mixes add the
// same exact products in another order than hc_pre_norm's own reduction (GpuMhc.PostMixEqualsPostThenPre: y / post /
// comb within 1e-5 of the CPU reference, X bitwise). Only where hc_post_mix_wanted(next, T). Sites whose f is the
// MoE's routed sum keep hc_post_routed: its gather inside this kernel measured slower than the two kernels (session
// 39, bench/NOTES.md).
Status hc_post_mix(const HcNormParams& next, int64_t T, const float* f, const float* post, const float* comb, float* X,
                   float* y, void* stream);
// The fused form's plan: V4's sites (n = 4, no carried pre, no bf16 rounding) at prefill sizes (T > kHcDeferMaxT,
// dim % 32 == 0), not in batch-invariant mode (its split would follow T). DSINFER_HC_POST_MIX = 1 (default) / 0, read
// once: a measurement switch.
bool hc_post_mix_wanted(const HcNormParams& next, int64_t T);

// hc_post with f = a MoE layer's output described by `f` (ops/routed_sum.h), summed in the kernel as moe_cuda's
// combine does (the same arithmetic, ops/routed_sum.cuh): the same bits as moe_combine_cuda into a buffer and hc_post
// on it, without f's write and read ([T, dim] fp32 each way). f.yp and f.shared 16-byte aligned, dim % 4 == 0.
Status hc_post_routed(int64_t T, int64_t n, int64_t dim, const RoutedSum& f, const float* post, const float* comb,
                      float* X, void* stream);

// y[r] = rmsnorm(hc_head(X[rows[r]]), norm_w) for r < R (rows: device int32 token indices into X).
// Same two kernels as hc_pre_norm over the listed rows (n mixes, no Sinkhorn); y must not alias X.
Status hc_head_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t R, float* y, void* stream);

// DeepSeek-V4.1's final collapse (no hc_head): y[r] = rmsnorm(sum_j pre[rows[r], j] * X[rows[r], j, :], norm_w)
// for r < R, with pre [T, n] the last site's coefficients. Double accumulation as hc_collapse_ref; one block per row.
// round_bf16 (V4.1 official numerics): the collapse and the result rounded to bf16.
Status hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                        const float* norm_w, float eps, float* y, void* stream, bool round_bf16 = false);

}  // namespace dsinfer::ops::cuda
