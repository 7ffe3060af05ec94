// GEMM entry points (see gemm_cuda.h): argument validation, the launch of the kernel plan_gemm_kernel chose
// (gemm_plan.h), and the launch check.
#include "ops/gemm/gemm_cuda.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_plan.h"
#include "ops/gemm/gemm_segments_launch.h"

namespace dsinfer::ops::cuda {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "F32";
    case WeightFormat::BF16: return "BF16";
    case WeightFormat::FP8_BLOCK: return "FP8_BLOCK";
    case WeightFormat::FP4_G32: return "FP4_G32";
  }
  return "unknown";
}

size_t weight_data_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  const size_t n = size_t(rows) * size_t(cols);
  switch (f) {
    case WeightFormat::F32: return n * 4;
    case WeightFormat::BF16: return n * 2;
    case WeightFormat::FP8_BLOCK: return n;
    case WeightFormat::FP4_G32: return size_t(rows) * size_t(cols / 2);
  }
  return 0;
}

size_t weight_scale_bytes(WeightFormat f, int64_t rows, int64_t cols, bool scale_e8m0, int64_t block_n,
                          int64_t block_k) {
  const size_t es = scale_e8m0 ? 1 : 4;
  if (f == WeightFormat::FP8_BLOCK && block_n > 0 && block_k > 0)
    return size_t((rows + block_n - 1) / block_n) * size_t((cols + block_k - 1) / block_k) * es;
  if (f == WeightFormat::FP4_G32) return size_t(rows) * size_t(cols / 32) * es;
  return 0;
}

Status validate_weight(const DeviceWeight& w, const char* what) {
  if (w.fmt != WeightFormat::F32 && w.fmt != WeightFormat::BF16 && w.fmt != WeightFormat::FP8_BLOCK &&
      w.fmt != WeightFormat::FP4_G32)
    return Status::errorf("{}: unknown weight format {}", what, int(w.fmt));
  if (w.rows <= 0 || w.cols <= 0)
    return Status::errorf("{}: bad shape [{}, {}] ({})", what, w.rows, w.cols, weight_format_name(w.fmt));
  if (!w.data) return Status::errorf("{}: null data pointer", what);
  if (w.fmt == WeightFormat::FP4_G32 && w.cols % 32 != 0)
    return Status::errorf("{}: FP4_G32 needs cols (K) divisible by 32, got [{}, {}]", what, w.rows, w.cols);
  if (w.fmt == WeightFormat::FP8_BLOCK && (w.block_n <= 0 || w.block_k <= 0))
    return Status::errorf("{}: FP8_BLOCK needs positive block sizes, got {}x{}", what, w.block_n, w.block_k);
  if ((w.fmt == WeightFormat::FP8_BLOCK || w.fmt == WeightFormat::FP4_G32) && !w.scale)
    return Status::errorf("{}: {} weight without scales", what, weight_format_name(w.fmt));
  return Status::ok();
}

namespace {

Status check_activations(const float* x, int64_t M, int64_t ldx, int64_t K, const float* y, int64_t ldy, int64_t N) {
  if (M < 0) return Status::errorf("gemm: negative row count {}", M);
  if (M > 0 && (!x || !y)) return Status::error("gemm: null x or y pointer");
  if (ldx < K) return Status::errorf("gemm: ldx {} is smaller than K {}", ldx, K);
  if (ldy < N) return Status::errorf("gemm: ldy {} is smaller than N {}", ldy, N);
  return Status::ok();
}

Status launch_stream(const detail::GemmArgs& a, const detail::StreamParams& sp, void* stream) {
  const int err = detail::launch_gemm_stream(a, sp, stream);
  if (err != 0) {
    cudaGetLastError();  // the error is returned here; leave no sticky launch error behind
    return Status::errorf("gemm_stream_kernel launch failed: {}", cudaGetErrorString(cudaError_t(err)));
  }
  DSI_CUDA_LAUNCHED("gemm_stream_kernel");
  return Status::ok();
}

Status launch_gemv(const detail::GemmArgs& a, WeightFormat f, const detail::GemvParams& gp, void* stream) {
  const int err = detail::launch_gemm_gemv(f, a, gp, stream);
  if (err != 0) {
    cudaGetLastError();  // as launch_stream
    return Status::errorf("gemm_gemv_kernel launch failed: {}", cudaGetErrorString(cudaError_t(err)));
  }
  DSI_CUDA_LAUNCHED("gemm_gemv_kernel");
  return Status::ok();
}

Status launch_tiled(detail::GemmArgs& a, WeightFormat f, void* stream) {
  const int64_t m_tiles = (a.M + gemm_detail::kBM - 1) / gemm_detail::kBM;
  if (m_tiles > 65535) return Status::errorf("gemm: M = {} exceeds the supported {} rows", a.M, 65535 * gemm_detail::kBM);
  a.m_tiles_z = int(m_tiles);
  detail::launch_gemm_tiled(f, a, stream);
  DSI_CUDA_LAUNCHED("gemm_tiled_kernel");
  return Status::ok();
}

Status launch_skinny(const detail::GemmArgs& a, WeightFormat f, void* stream) {
  detail::launch_gemm_skinny(f, a, stream);  // walks any M in chunks of kGemmSkinnyMaxM rows
  DSI_CUDA_LAUNCHED("gemm_skinny_kernel");
  return Status::ok();
}

// GemmPrecision::kBatchInvariant: the kernel and the streaming K partition come from the weight (gemm_invariant_plan);
// M only decides how many row chunks / token blocks run.
Status run_invariant(detail::GemmArgs& a, WeightFormat f, const GemmInvariantPlan& plan, void* stream) {
  if (plan.kernel == GemmKernel::kSkinny) return launch_skinny(a, f, stream);
  if (plan.kernel == GemmKernel::kTiled) return launch_tiled(a, f, stream);
  for (int64_t r = 0; r < a.M; r += kGemmStreamMaxM) {
    detail::GemmArgs c = a;
    c.x = a.x + r * a.ldx;
    c.y = a.y + r * a.ldy;
    c.M = std::min(kGemmStreamMaxM, a.M - r);
    detail::set_x_vec(c);
    detail::StreamParams sp;
    if (!gemm_invariant_stream_params(plan, c.M, a.block_k, sp))
      return Status::errorf("gemm: no streaming tile fits K = {} (block_k {})", a.K, a.block_k);
    if ((a.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows > 65535) return Status::error("gemm: N too large");
    DSI_RETURN_IF_ERROR(launch_stream(c, sp, stream));
  }
  return Status::ok();
}

Status run(detail::GemmArgs& a, WeightFormat f, GemmPrecision precision, void* stream) {
  const GemmKernelPlan p = plan_gemm_kernel(a, f, precision, dsinfer::cuda::current_sm_count());
  if (precision == GemmPrecision::kBatchInvariant) return run_invariant(a, f, p.invariant, stream);
  switch (p.kernel) {
    case GemmKernel::kGemv: return launch_gemv(a, f, p.gemv, stream);
    case GemmKernel::kStream: return launch_stream(a, p.stream, stream);
    case GemmKernel::kSkinny: return launch_skinny(a, f, stream);
    case GemmKernel::kTiled: break;
  }
  return launch_tiled(a, f, stream);
}

// The launch arguments of y = x . W^T for M rows over `groups` equal row groups of w (1 = a plain GEMM; the
// strides step x and y from one group to the next).
detail::GemmArgs gemm_args(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t M, const DeviceWeight& w,
                           int64_t groups, int64_t x_group_stride = 0, int64_t y_group_stride = 0) {
  detail::GemmArgs a{.x = x, .ldx = ldx, .x_gstride = x_group_stride, .y = y, .ldy = ldy, .y_gstride = y_group_stride,
                     .M = M, .groups = groups, .N = w.rows / groups, .K = w.cols};
  detail::set_weight_args(a, w);
  detail::set_x_vec(a);
  return a;
}

}  // namespace

Status gemm_cuda(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool accumulate,
                 void* stream, GemmPrecision precision) {
  DSI_RETURN_IF_ERROR(validate_weight(w, "gemm weight"));
  DSI_RETURN_IF_ERROR(check_activations(x, M, ldx, w.cols, y, ldy, w.rows));
  if (M == 0) return Status::ok();
  detail::GemmArgs a = gemm_args(x, ldx, y, ldy, M, w, 1);
  a.accumulate = accumulate;
  return run(a, w.fmt, precision, stream);
}

Status gemm_grouped_cuda(const float* x, int64_t M, int64_t ldx, int64_t x_group_stride, const DeviceWeight& w,
                         int64_t groups, float* y, int64_t ldy, int64_t y_group_stride, void* stream,
                         GemmPrecision precision) {
  DSI_RETURN_IF_ERROR(validate_weight(w, "grouped gemm weight"));
  if (groups <= 0 || groups > 65535 || w.rows % groups != 0)
    return Status::errorf("grouped gemm: {} groups do not divide the weight's {} rows (or exceed 65535)", groups, w.rows);
  const int64_t n_g = w.rows / groups;
  DSI_RETURN_IF_ERROR(check_activations(x, M, ldx, w.cols, y, ldy, n_g));
  if (x_group_stride < 0 || y_group_stride < 0) return Status::error("grouped gemm: negative group stride");
  if (M == 0) return Status::ok();
  detail::GemmArgs a = gemm_args(x, ldx, y, ldy, M, w, groups, x_group_stride, y_group_stride);
  return run(a, w.fmt, precision, stream);
}

Status gemm_segments_cuda(const float* x, int64_t M, int64_t ldx, const GemmSegment* segs, int count, void* stream,
                          GemmPrecision precision) {
  if (count < 1 || count > kGemmMaxSegments || !segs)
    return Status::errorf("gemm segments: {} segments (1..{})", count, kGemmMaxSegments);
  const DeviceWeight& w0 = segs[0].w;
  detail::GemmArgs args[kGemmMaxSegments];
  for (int i = 0; i < count; ++i) {
    const GemmSegment& s = segs[i];
    DSI_RETURN_IF_ERROR(validate_weight(s.w, "gemm segment weight"));
    if (s.w.fmt != w0.fmt || s.w.cols != w0.cols || s.w.block_n != w0.block_n || s.w.block_k != w0.block_k ||
        s.w.scale_e8m0 != w0.scale_e8m0)
      return Status::errorf("gemm segments: segment {} ({}, K {}) differs from segment 0 ({}, K {}) in format, K or "
                            "block sizes", i, weight_format_name(s.w.fmt), s.w.cols, weight_format_name(w0.fmt), w0.cols);
    DSI_RETURN_IF_ERROR(check_activations(x, M, ldx, s.w.cols, s.y, s.ldy, s.w.rows));
    args[i] = gemm_args(x, ldx, s.y, s.ldy, M, s.w, 1);
  }
  if (M == 0) return Status::ok();
  const GemmSegmentsKernelPlan kp =
      plan_gemm_segments_kernel(args, count, w0.fmt, precision, dsinfer::cuda::current_sm_count());
  if (!kp.ok)
    return Status::errorf("gemm segments: the {} segments' own calls at M = {} are not one skinny or one streaming "
                          "launch (K {}, {})", count, M, w0.cols, weight_format_name(w0.fmt));
  const int64_t rpb = kp.kernel == GemmKernel::kStream ? gemm_detail::kStRows : detail::gemm_skinny_rows_per_block();
  detail::GemmSegments sg;
  sg.count = count;
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    const GemmSegment& s = segs[i];
    if (blocks > INT32_MAX - (s.w.rows + rpb - 1) / rpb) return Status::error("gemm segments: too many weight rows");
    sg.seg[i] = {static_cast<const uint8_t*>(s.w.data), static_cast<const uint8_t*>(s.w.scale), s.w.rows, s.y, s.ldy,
                 int(blocks), s.out_scale != 1.0f, s.out_scale};
    blocks += (s.w.rows + rpb - 1) / rpb;
  }
  sg.blocks = int(blocks);
  detail::GemmArgs a = gemm_args(x, ldx, segs[0].y, segs[0].ldy, M, w0, 1);
  const bool stream_kernel = kp.kernel == GemmKernel::kStream;
  const int err = stream_kernel ? detail::launch_gemm_stream_segments(a, kp.stream, sg, stream)
                                : detail::launch_gemm_skinny_segments(w0.fmt, a, sg, stream);
  const char* name = stream_kernel ? "gemm_stream_segments_kernel" : "gemm_skinny_segments_kernel";
  if (err != 0) {
    cudaGetLastError();  // as launch_stream
    return Status::errorf("{} launch failed: {}", name, cudaGetErrorString(cudaError_t(err)));
  }
  DSI_CUDA_LAUNCHED(name);
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
