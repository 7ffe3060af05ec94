// GEMM entry points (see gemm_cuda.h): argument validation, path choice (with kBf16: the GEMV kernel where
// gemm_gemv_preferred, else bf16 streaming tensor core when applicable; else skinny fp32 streaming vs tiled tensor
// core), launch and launch check.
#include "ops/gemm/gemm_cuda.h"

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_invariant.h"

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

namespace detail {

void set_weight_args(GemmArgs& a, const DeviceWeight& w) {
  a.wdata = static_cast<const uint8_t*>(w.data);
  a.wscale = static_cast<const uint8_t*>(w.scale);
  a.scale_e8m0 = w.scale_e8m0;
  a.block_n = w.block_n;
  a.block_k = w.block_k;
  a.scale_cols = w.fmt == WeightFormat::FP8_BLOCK ? (a.K + w.block_k - 1) / w.block_k
                 : w.fmt == WeightFormat::FP4_G32 ? a.K / 32
                                                  : 0;
  a.w_vec = a.K % vec_elems(w.fmt) == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
            (w.fmt != WeightFormat::FP8_BLOCK || w.block_k % 16 == 0);
}

void set_x_vec(GemmArgs& a) {
  a.x_vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0 && a.x_gstride % 4 == 0;
}

// Streaming-kernel launch shape: tokens per block = the power of two >= M (8..64); K split (cluster) doubled while
// the grid has fewer than 2 blocks per SM or the x tile exceeds kStXsMax; then tokens halved while it still does.
bool plan_gemm_stream(const GemmArgs& a, WeightFormat f, int sm_count, StreamParams& p) {
  constexpr int64_t kStXsMax = kGemmStreamXsMax;
  if (f != WeightFormat::FP8_BLOCK || a.M < 1 || a.M > kGemmStreamMaxM || !a.w_vec || a.K % 64 != 0 ||
      a.block_k % 64 != 0 || a.row_off || a.x_rows || a.wdata_arr)
    return false;
  const int64_t kblocks = (a.K + a.block_k - 1) / a.block_k, row_blocks = (a.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows;
  int64_t tokens = 8;
  while (tokens < 64 && tokens < a.M) tokens *= 2;
  auto per_split = [&](int64_t s) { return (kblocks + s - 1) / s; };
  auto xs_bytes = [&](int64_t s, int64_t t) { return t * (per_split(s) * a.block_k * 2 + 16); };
  auto blocks = [&](int64_t s, int64_t t) { return row_blocks * ((a.M + t - 1) / t) * a.groups * s; };
  int64_t s = 1;
  while (s < 8 && 2 * s <= kblocks && (blocks(s, tokens) < 2 * int64_t(sm_count) || xs_bytes(s, tokens) > kStXsMax)) s *= 2;
  while (tokens > 8 && xs_bytes(s, tokens) > kStXsMax) tokens /= 2;
  if (xs_bytes(s, tokens) > kStXsMax) return false;
  const int64_t per = per_split(s), token_chunks = (a.M + tokens - 1) / tokens;
  if (row_blocks > 65535 || token_chunks * a.groups > 65535) return false;
  p.kb_per_split = int(per);
  p.splits = int((kblocks + per - 1) / per);  // every split non-empty
  p.tokens = int(tokens);
  p.token_chunks = int(token_chunks);
  p.xs_ld = int(per * a.block_k + 8);  // +16 bytes: lane fragment reads hit distinct banks
  return true;
}

}  // namespace detail

namespace {

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;  // only shapes the launch; a real device error surfaces at the launch check
  return n;
}

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

// GemmPrecision::kBatchInvariant: the kernel and the streaming K partition come from the weight (gemm_invariant.h);
// M only decides how many row chunks / token blocks run.
Status run_invariant(detail::GemmArgs& a, WeightFormat f, void* stream) {
  GemmWeightShape ws;
  ws.fmt = f, ws.N = a.N, ws.K = a.K, ws.block_k = a.block_k, ws.groups = a.groups, ws.w_vec = a.w_vec;
  ws.gathered = a.row_off || a.x_rows || a.wdata_arr;
  const GemmInvariantPlan plan = gemm_invariant_plan(ws, sm_count());
  if (plan.kernel == GemmKernel::kSkinny) {
    detail::launch_gemm_skinny(f, a, stream);  // walks any M in chunks of kGemmSkinnyMaxM rows
    DSI_CUDA_LAUNCHED("gemm_skinny_kernel");
    return Status::ok();
  }
  if (plan.kernel == GemmKernel::kTiled) return launch_tiled(a, f, stream);
  for (int64_t r = 0; r < a.M; r += kGemmStreamMaxM) {
    detail::GemmArgs c = a;
    c.x = a.x + r * a.ldx, c.y = a.y + r * a.ldy, c.M = std::min(kGemmStreamMaxM, a.M - r);
    detail::set_x_vec(c);
    detail::StreamParams sp;
    sp.splits = plan.splits;
    sp.kb_per_split = plan.kb_per_split;
    sp.tokens = gemm_invariant_stream_tokens(c.M, plan.kb_per_split, a.block_k);
    if (sp.tokens == 0) return Status::errorf("gemm: no streaming tile fits K = {} (block_k {})", a.K, a.block_k);
    sp.token_chunks = int((c.M + sp.tokens - 1) / sp.tokens);
    sp.xs_ld = int(int64_t(plan.kb_per_split) * a.block_k + 8);  // as plan_gemm_stream
    if ((a.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows > 65535) return Status::error("gemm: N too large");
    DSI_RETURN_IF_ERROR(launch_stream(c, sp, stream));
  }
  return Status::ok();
}

Status run(detail::GemmArgs& a, WeightFormat f, GemmPrecision precision, void* stream) {
  if (precision == GemmPrecision::kBatchInvariant) return run_invariant(a, f, stream);
  detail::GemvParams gp;
  const bool bf16 = precision == GemmPrecision::kBf16 || precision == GemmPrecision::kGemv;
  const bool gemv = precision == GemmPrecision::kGemv || (bf16 && gemm_gemv_preferred(a.M, a.N, a.groups > 1));
  if (gemv && detail::plan_gemm_gemv(a, f, sm_count(), gp)) return launch_gemv(a, f, gp, stream);
  detail::StreamParams sp;
  if (bf16 && detail::plan_gemm_stream(a, f, sm_count(), sp)) return launch_stream(a, sp, stream);
  if (a.M <= kGemmSkinnyMaxM && a.w_vec) {
    detail::launch_gemm_skinny(f, a, stream);
    DSI_CUDA_LAUNCHED("gemm_skinny_kernel");
    return Status::ok();
  }
  return launch_tiled(a, f, stream);
}

}  // namespace

Status gemm_cuda(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool accumulate,
                 void* stream, GemmPrecision precision) {
  DSI_RETURN_IF_ERROR(validate_weight(w, "gemm weight"));
  DSI_RETURN_IF_ERROR(check_activations(x, M, ldx, w.cols, y, ldy, w.rows));
  if (M == 0) return Status::ok();
  detail::GemmArgs a;
  a.x = x, a.ldx = ldx, a.y = y, a.ldy = ldy, a.M = M, a.groups = 1, a.N = w.rows, a.K = w.cols;
  a.accumulate = accumulate;
  detail::set_weight_args(a, w);
  detail::set_x_vec(a);
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
  detail::GemmArgs a;
  a.x = x, a.ldx = ldx, a.x_gstride = x_group_stride, a.y = y, a.ldy = ldy, a.y_gstride = y_group_stride, a.M = M;
  a.groups = groups, a.N = n_g, a.K = w.cols;
  detail::set_weight_args(a, w);
  detail::set_x_vec(a);
  return run(a, w.fmt, precision, stream);
}

}  // namespace dsinfer::ops::cuda
