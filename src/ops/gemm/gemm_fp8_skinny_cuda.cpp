// The FP8 skinny wgmma GEMM's entry point (gemm_fp8_skinny_cuda.h): checks, the plan, the two launches.
#include "ops/gemm/gemm_fp8_skinny_cuda.h"

#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_plan.h"

namespace dsinfer::ops::cuda {

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
// The codes' bytes for `rows` token rows; the scales follow them.
size_t codes_bytes(int64_t rows, int64_t k_total) { return align_up(size_t(rows) * size_t(k_total)); }
// The most token rows any plan uses: two units of 128 tokens, `terms` rows per token.
int64_t max_rows(int terms) { return 2 * 128 * int64_t(terms); }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

size_t gemm_fp8_skinny_workspace_bytes(int64_t k_total, int terms) {
  const int64_t rows = max_rows(terms);
  return codes_bytes(rows, k_total) + align_up(size_t(k_total / 128) * size_t(rows) * 4);
}

detail::Fp8SkinnyArgs gemm_fp8_skinny_args(const float* x, int64_t M, int64_t ldx, int64_t x_gstride,
                                           const DeviceWeight& w, int64_t groups, float* y, int64_t ldy,
                                           int64_t y_gstride, bool accumulate, void* workspace,
                                           const detail::Fp8SkinnyParams& p) {
  const int64_t N = w.rows / groups, K = w.cols;
  detail::Fp8SkinnyArgs a;
  a.x = x;
  a.ldx = ldx;
  a.x_gstride = groups > 1 ? x_gstride : 0;
  a.M = M;
  a.groups = groups;
  a.N = N;
  a.K = K;
  a.wdata = static_cast<const uint8_t*>(w.data);
  a.wscale = w.scale;
  a.scale_e8m0 = w.scale_e8m0;
  a.y = y;
  a.ldy = ldy;
  a.y_gstride = groups > 1 ? y_gstride : 0;
  a.accumulate = accumulate;
  a.q = static_cast<uint8_t*>(workspace);
  a.s = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + codes_bytes(detail::fp8sk_rows(p), groups * K));
  a.x_vec = aligned16(x) && ldx % 4 == 0 && a.x_gstride % 4 == 0;
  return a;
}

Status gemm_fp8_skinny_cuda(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, const DeviceWeight& w,
                            int64_t groups, float* y, int64_t ldy, int64_t y_gstride, bool accumulate, int terms,
                            void* workspace, size_t workspace_bytes, int sm_count, void* stream) {
  if (M == 0) return Status::ok();
  if (!gemm_fp8_skinny_supports(w, groups))
    return Status::errorf("gemm_fp8_skinny: weight [{}, {}] x {} groups not supported (FP8_BLOCK 128x128, K % 128)",
                          w.rows, w.cols, groups);
  const int64_t N = w.rows / groups, K = w.cols;
  if (!x || !y || M < 0 || ldx < K || ldy < N || (groups > 1 && (x_gstride < K || y_gstride < N)))
    return Status::errorf("gemm_fp8_skinny: bad x / y (M {}, ldx {}, ldy {}, strides {} / {})", M, ldx, ldy, x_gstride,
                          y_gstride);
  if (!aligned16(w.data) || !aligned16(workspace))
    return Status::error("gemm_fp8_skinny: weight data and workspace must be 16-byte aligned");
  detail::Fp8SkinnyParams p;
  if (!plan_gemm_fp8_skinny(M, N, K, groups, terms, sm_count, p))
    return Status::errorf("gemm_fp8_skinny: no launch shape for M {} N {} K {} groups {} terms {}", M, N, K, groups,
                          terms);
  const int64_t k_total = groups * K;
  if (!workspace || workspace_bytes < gemm_fp8_skinny_workspace_bytes(k_total, terms))
    return Status::errorf("gemm_fp8_skinny: workspace of {} bytes, needs {}", workspace_bytes,
                          gemm_fp8_skinny_workspace_bytes(k_total, terms));
  const detail::Fp8SkinnyArgs a =
      gemm_fp8_skinny_args(x, M, ldx, x_gstride, w, groups, y, ldy, y_gstride, accumulate, workspace, p);
  const int eq = detail::launch_fp8sk_quant(a, p, stream);
  DSI_CUDA_LAUNCHED("gemm_fp8sk_quant_kernel");
  if (eq != 0) return Status::errorf("gemm_fp8_skinny: gemm_fp8sk_quant_kernel not launched (CUDA error {})", eq);
  const int e = detail::launch_fp8sk_gemm(a, p, stream);
  DSI_CUDA_LAUNCHED("gemm_fp8sk_kernel");
  if (e != 0) return Status::errorf("gemm_fp8_skinny: gemm_fp8sk_kernel not launched (CUDA error {})", e);
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
