// Argument checks and the launch of the official-numerics GEMM (see gemm_official_cuda.h).
#include "ops/gemm/gemm_official_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_cuda.h"

namespace dsinfer::ops::cuda {

Status gemm_official_cuda(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy,
                          OfficialGemm mode, void* stream, int64_t groups) {
  DSI_RETURN_IF_ERROR(validate_weight(w, "official gemm"));
  if (groups < 1 || w.rows % groups != 0 || groups > 65535)
    return Status::errorf("gemm_official_cuda: {} groups do not split the weight's {} rows", groups, w.rows);
  const int64_t N = w.rows / groups, K = w.cols;
  if (M < 0 || ldx < groups * K || ldy < groups * N)
    return Status::errorf("gemm_official_cuda: bad shape M={} ldx={} ldy={} for [{}, {}] x {} groups", M, ldx, ldy, N,
                          K, groups);
  if (M == 0) return Status::ok();
  if (!x || !y) return Status::error("gemm_official_cuda: null x or y");
  detail::GemmArgs a{.x = x, .ldx = ldx, .x_gstride = K, .y = y, .ldy = ldy, .y_gstride = N, .M = M, .groups = groups,
                     .N = N, .K = K};
  detail::set_weight_args(a, w);
  detail::launch_gemm_official(w.fmt, a, mode, stream);
  DSI_CUDA_LAUNCHED("gemm_official_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
