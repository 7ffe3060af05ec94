// Argument checks, the split of the mixing reduction, and launches of the CUDA mHC kernels (see mhc_cuda.h).
#include "ops/mhc/mhc_cuda.h"

#include <algorithm>

#include "core/env_switch.h"
#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status check_params(const HcNormParams& p, int64_t mixes, const char* op) {
  if (p.n < 1 || p.n > detail::kHcMaxN) return Status::errorf("{}: hc_mult {} outside [1, {}]", op, p.n, detail::kHcMaxN);
  if (p.dim <= 0 || p.dim % 4 != 0 || p.dim > 12288)
    return Status::errorf("{}: dim {} must be a positive multiple of 4 (<= 12288)", op, p.dim);
  if (detail::hc_max_splits(p.dim, mixes) < 1)
    return Status::errorf("{}: dim {} is too small for hc_mult {} (the mixing partials use the output row: dim >= {})",
                          op, p.dim, p.n, 2 * (mixes + 1));
  if (!p.fn || !p.base || !p.scale || !p.norm_w) return Status::errorf("{}: null fn/base/scale/norm weight", op);
  if (!aligned16(p.fn)) return Status::errorf("{}: fn is not 16-byte aligned", op);
  if (p.sinkhorn_iters < 1) return Status::errorf("{}: sinkhorn_iters {} < 1", op, p.sinkhorn_iters);
  return Status::ok();
}

// hc_post_mix's mixes: n = 4 only, (2 + n) n.
constexpr int64_t kPostMixMixes = 24;

// About one wave of a mixing kernel (two blocks per SM at its ~89-105 KB of shared memory): the token tiles of s.tile
// times `splits` slices of the reduction's nchunks chunks (rounded down so that a second, mostly idle wave is not
// started), bounded by the chunk count and by the partials that fit in an output row of dim floats. Depends on T
// and the device only, so a call is deterministic; partial sums are added in a fixed order.
void one_wave(detail::HcSplit& s, int64_t T, int64_t nchunks, int64_t dim, int64_t mixes) {
  const int sms = dsinfer::cuda::current_sm_count();
  const int64_t tiles = (T + s.tile - 1) / s.tile;
  const int64_t splits = std::clamp<int64_t>(2 * sms / tiles, 1, std::min(nchunks, detail::hc_max_splits(dim, mixes)));
  s.chunks_per_split = int((nchunks + splits - 1) / splits);
  s.splits = int((nchunks + s.chunks_per_split - 1) / s.chunks_per_split);
}
}  // namespace

detail::HcSplit detail::hc_default_split(int64_t T, int64_t n, int64_t dim, int64_t mixes) {
  detail::HcSplit s;
  s.tile = detail::hc_tile(T, mixes);
  one_wave(s, T, (n * dim + detail::kHcChunk - 1) / detail::kHcChunk, dim, mixes);
  s.wide = T <= 512;  // few tokens: a whole block per token (more loads in flight); many: one warp per token
  return s;
}

detail::HcSplit detail::hc_post_mix_split(int64_t T, int64_t dim) {
  detail::HcSplit s;
  s.tile = kHcPostMixTile;
  one_wave(s, T, dim / kHcPostMixCols, dim, kPostMixMixes);
  s.wide = false;
  return s;
}

namespace {

Status launch(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, float* y, float* post, float* comb,
              void* stream, int64_t mixes, const char* op) {
  if (!aligned16(X) || !aligned16(y)) return Status::errorf("{}: X and y must be 16-byte aligned", op);
  if (reinterpret_cast<uintptr_t>(p.y_bf16) % 8 != 0) return Status::errorf("{}: y_bf16 must be 8-byte aligned", op);
  if (p.y_bf16_only && !p.y_bf16) return Status::errorf("{}: y_bf16_only without y_bf16", op);
  if ((T + 7) / 8 > 0x7fffffff) return Status::errorf("{}: {} tokens exceed the grid limit", op, T);
  if (p.premixed) {  // hc_post_mix wrote the partials
    if (rows || !hc_post_mix_wanted(p, T))
      return Status::errorf("{}: premixed parameters that hc_post_mix does not take (n {}, dim {}, T {})", op, p.n,
                            p.dim, T);
    detail::launch_hc_finalize(p, X, rows, T, detail::hc_post_mix_split(T, p.dim), y, post, comb, stream);
    return Status::ok();
  }
  const detail::HcSplit sp =
      p.batch_invariant ? detail::hc_invariant_split(T, p.n, p.dim, mixes) : detail::hc_default_split(T, p.n, p.dim, mixes);
  detail::launch_hc_norm(p, X, rows, T, sp, y, post, comb, stream);
  return Status::ok();
}
}  // namespace

Status hc_pre_norm(const HcNormParams& p, const float* X, int64_t T, float* y, float* post, float* comb, void* stream) {
  const int64_t mixes = (2 + p.n) * p.n;
  DSI_RETURN_IF_ERROR(check_params(p, mixes, "hc_pre_norm"));
  if (T < 0 || T > 0x7fffffff) return Status::errorf("hc_pre_norm: bad token count {}", T);
  if (T == 0) return Status::ok();
  if (!X || !y || !post || !comb) return Status::error("hc_pre_norm: null input or output");
  DSI_RETURN_IF_ERROR(launch(p, X, nullptr, T, y, post, comb, stream, mixes, "hc_pre_norm"));
  DSI_CUDA_LAUNCHED("hc_pre_norm kernels");
  return Status::ok();
}

bool hc_defer_comb(int64_t T) {
  static const bool on = env_switch("DSINFER_HC_DEFER", {"0", "1"}) != "0";
  return on && T <= kHcDeferMaxT;
}

Status hc_comb(const HcNormParams& p, int64_t T, float* post, float* comb, void* stream) {
  DSI_RETURN_IF_ERROR(check_params(p, (2 + p.n) * p.n, "hc_comb"));
  if (!p.defer_comb) return Status::error("hc_comb: the parameters do not defer the coefficients (defer_comb)");
  if (T < 0 || T > 0x7fffffff) return Status::errorf("hc_comb: bad token count {}", T);
  if (T == 0) return Status::ok();
  if (!post || !comb) return Status::error("hc_comb: null post or comb");
  detail::launch_hc_comb(p, T, post, comb, stream);
  DSI_CUDA_LAUNCHED("hc_comb_kernel");
  return Status::ok();
}

bool hc_post_mix_wanted(const HcNormParams& next, int64_t T) {
  static const bool on = env_switch("DSINFER_HC_POST_MIX", {"0", "1"}) != "0";
  return on && next.n == 4 && next.dim % detail::kHcPostMixCols == 0 &&
         detail::hc_max_splits(next.dim, kPostMixMixes) >= 1 &&
         T > kHcDeferMaxT && T <= 0x7fffffff && !next.batch_invariant && !next.pre_in && !next.pre_out &&
         !next.round_bf16 && !next.defer_comb;
}

Status hc_post_mix(const HcNormParams& next, int64_t T, const float* f, const float* post, const float* comb, float* X,
                   float* y, void* stream) {
  DSI_RETURN_IF_ERROR(check_params(next, kPostMixMixes, "hc_post_mix"));
  if (!hc_post_mix_wanted(next, T))
    return Status::errorf("hc_post_mix: not for these parameters (n {}, dim {}, T {}; see hc_post_mix_wanted)", next.n,
                          next.dim, T);
  if (!f || !post || !comb || !X || !y) return Status::error("hc_post_mix: null input or output");
  if (!aligned16(X) || !aligned16(y) || !aligned16(f))
    return Status::error("hc_post_mix: X, y and f must be 16-byte aligned");
  detail::launch_hc_post_mix(next, T, f, post, comb, X, detail::hc_post_mix_split(T, next.dim), y, stream);
  DSI_CUDA_LAUNCHED("hc_post_mix_kernel");
  return Status::ok();
}

Status hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
               void* stream, bool round_bf16) {
  if (n < 1 || n > detail::kHcMaxN || dim <= 0 || dim % 4 != 0 || T < 0)
    return Status::errorf("hc_post: bad shape T={} n={} dim={} (dim a multiple of 4)", T, n, dim);
  if (T == 0) return Status::ok();
  if (!f || !post || !comb || !X) return Status::error("hc_post: null input or output");
  if (!aligned16(f) || !aligned16(X)) return Status::error("hc_post: f and X must be 16-byte aligned");
  if ((dim / 4 + 255) / 256 > 0x7fffffff) return Status::errorf("hc_post: dim={} exceeds the grid limit", dim);
  detail::launch_hc_post(T, n, dim, f, nullptr, post, comb, X, round_bf16, stream);
  DSI_CUDA_LAUNCHED("hc_post_kernel");
  return Status::ok();
}

Status hc_post_routed(int64_t T, int64_t n, int64_t dim, const RoutedSum& f, const float* post, const float* comb,
                      float* X, void* stream) {
  if (n < 1 || n > detail::kHcMaxN || dim <= 0 || dim % 4 != 0 || T < 0 || f.topk < 0)
    return Status::errorf("hc_post_routed: bad shape T={} n={} dim={} topk={} (dim a multiple of 4)", T, n, dim,
                          f.topk);
  if (T == 0) return Status::ok();
  if (!f.yp || (f.topk > 0 && (!f.pos_of || !f.weight)) || !post || !comb || !X)
    return Status::error("hc_post_routed: null input or output");
  if (!aligned16(f.yp) || (f.shared && !aligned16(f.shared)) || !aligned16(X))
    return Status::error("hc_post_routed: yp, shared and X must be 16-byte aligned");
  if ((dim / 4 + 255) / 256 > 0x7fffffff) return Status::errorf("hc_post_routed: dim={} exceeds the grid limit", dim);
  detail::launch_hc_post(T, n, dim, nullptr, &f, post, comb, X, false, stream);
  DSI_CUDA_LAUNCHED("hc_post_kernel (routed)");
  return Status::ok();
}

Status hc_head_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t R, float* y, void* stream) {
  DSI_RETURN_IF_ERROR(check_params(p, p.n, "hc_head_norm"));
  if (R < 0 || R > 0x7fffffff) return Status::errorf("hc_head_norm: bad row count {}", R);
  if (R == 0) return Status::ok();
  if (!X || !rows || !y) return Status::error("hc_head_norm: null input or output");
  DSI_RETURN_IF_ERROR(launch(p, X, rows, R, y, nullptr, nullptr, stream, p.n, "hc_head_norm"));
  DSI_CUDA_LAUNCHED("hc_head_norm kernels");
  return Status::ok();
}

Status hc_collapse_norm(const float* X, const float* pre, const int32_t* rows, int64_t R, int64_t n, int64_t dim,
                        const float* norm_w, float eps, float* y, void* stream, bool round_bf16) {
  if (n < 1 || n > detail::kHcMaxN || dim <= 0 || R < 0 || R > 0x7fffffff)
    return Status::errorf("hc_collapse_norm: bad shape R={} n={} dim={}", R, n, dim);
  if (R == 0) return Status::ok();
  if (!X || !pre || !rows || !norm_w || !y) return Status::error("hc_collapse_norm: null input or output");
  detail::launch_hc_collapse_norm(X, pre, rows, R, n, dim, norm_w, eps, round_bf16, y, stream);
  DSI_CUDA_LAUNCHED("hc_collapse_norm_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
