// Argument checks and launches of the CUDA mHC kernels (see mhc_cuda.h).
#include "ops/mhc/mhc_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
Status check_params(const HcNormParams& p, const char* op) {
  if (p.n < 1 || p.n > detail::kHcMaxN) return Status::errorf("{}: hc_mult {} outside [1, {}]", op, p.n, detail::kHcMaxN);
  if (p.dim <= 0 || p.dim % 4 != 0 || p.dim > 12288)
    return Status::errorf("{}: dim {} must be a positive multiple of 4 (<= 12288)", op, p.dim);
  if (!p.fn || !p.base || !p.scale || !p.norm_w) return Status::errorf("{}: null fn/base/scale/norm weight", op);
  if (p.sinkhorn_iters < 1) return Status::errorf("{}: sinkhorn_iters {} < 1", op, p.sinkhorn_iters);
  return Status::ok();
}
}  // namespace

Status hc_pre_norm(const HcNormParams& p, const float* X, int64_t T, float* y, float* post, float* comb, void* stream) {
  DSI_RETURN_IF_ERROR(check_params(p, "hc_pre_norm"));
  if (T < 0 || T > 0x7fffffff) return Status::errorf("hc_pre_norm: bad token count {}", T);
  if (T == 0) return Status::ok();
  if (!X || !y || !post || !comb) return Status::error("hc_pre_norm: null input or output");
  detail::launch_hc_pre_norm(p, X, T, y, post, comb, stream);
  DSI_CUDA_LAUNCHED("hc_pre_norm_kernel");
  return Status::ok();
}

Status hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
               void* stream) {
  if (n < 1 || n > detail::kHcMaxN || dim <= 0 || T < 0)
    return Status::errorf("hc_post: bad shape T={} n={} dim={}", T, n, dim);
  if (T == 0) return Status::ok();
  if (!f || !post || !comb || !X) return Status::error("hc_post: null input or output");
  if ((T * dim + 255) / 256 > 0x7fffffff) return Status::errorf("hc_post: T={} dim={} exceed the grid limit", T, dim);
  detail::launch_hc_post(T, n, dim, f, post, comb, X, stream);
  DSI_CUDA_LAUNCHED("hc_post_kernel");
  return Status::ok();
}

Status hc_head_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t R, float* y, void* stream) {
  DSI_RETURN_IF_ERROR(check_params(p, "hc_head_norm"));
  if (R < 0 || R > 0x7fffffff) return Status::errorf("hc_head_norm: bad row count {}", R);
  if (R == 0) return Status::ok();
  if (!X || !rows || !y) return Status::error("hc_head_norm: null input or output");
  detail::launch_hc_head_norm(p, X, rows, R, y, stream);
  DSI_CUDA_LAUNCHED("hc_head_norm_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
