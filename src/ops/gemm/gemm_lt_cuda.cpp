// cuBLASLt GEMM engine (see gemm_lt_cuda.h; when it runs: gemm_plan.h): weight preparation (FP8 block scales to
// fp32 in cuBLASLt's layout), activation buffers, and the call sequences quantize -> cublasLtMatmul (-> epilogue)
// (+ the M % 4 tail rows on gemm_cuda) and bf16 x -> cublasLtMatmul. The cuBLASLt plans, the matmul call and the
// layout probe are gemm_lt_plan_cuda.cpp.
#include <algorithm>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_lt_impl.h"
#include "ops/gemm/gemm_lt_launch.h"
#include "ops/gemm/gemm_lt_quant.h"
#include "ops/gemm/gemm_widen_cuda.h"

namespace dsinfer::ops::cuda {

using gemm_lt_detail::alignment;
using gemm_lt_detail::Plan;
using gemm_lt_detail::PlanKey;
using gemm_lt_detail::WeightScales;
namespace lt = dsinfer::ops::gemm_lt;

namespace {

// Offset (floats) of the second term's scale matrix: after the first, 256-byte aligned.
int64_t scale_offset(int64_t first) { return (first + 63) / 64 * 64; }
int64_t round4(int64_t m) { return (m + 3) / 4 * 4; }

template <typename T>
Status grow_buffer(dsinfer::cuda::DeviceBuffer<T>& b, size_t n, std::vector<dsinfer::cuda::DeviceBuffer<T>>& retired,
                   const char* what) {
  if (b.size() >= n) return Status::ok();
  const size_t want = std::max(n, b.size() + b.size() / 2);
  if (b.size()) retired.push_back(std::move(b));  // a captured graph may still read it
  return b.alloc(want, what);
}

}  // namespace

GemmLtEngine::Impl::~Impl() {
  plans.clear();
  if (handle) cublasLtDestroy(handle);
}

Status GemmLtEngine::Impl::grow(dsinfer::cuda::DeviceBuffer<uint8_t>& b, size_t n, const char* what) {
  return grow_buffer(b, n, retired, what);
}
Status GemmLtEngine::Impl::grow(dsinfer::cuda::DeviceBuffer<float>& b, size_t n, const char* what) {
  return grow_buffer(b, n, retired_f, what);
}

Status GemmLtEngine::Impl::init() {
  if (initialized) return init_status;
  initialized = true;
  init_status = [&]() -> Status {
    if (cublasLtGetVersion() < 120900)
      return Status::errorf("cuBLASLt {} predates block-scaled FP8 matmuls (needs 12.9)", cublasLtGetVersion());
    const cublasStatus_t st = cublasLtCreate(&handle);
    if (st != CUBLAS_STATUS_SUCCESS) return Status::errorf("cublasLtCreate failed: {}", cublasLtGetStatusName(st));
    return workspace.alloc(gemm_lt_detail::kWorkspaceBytes, "cuBLASLt workspace");
  }();
  return init_status;
}

GemmLtEngine::GemmLtEngine(GemmLtActivations act, GemmLtStack stack) : impl_(std::make_unique<Impl>()) {
  impl_->act = act;
  impl_->stack = stack;
}
GemmLtEngine::~GemmLtEngine() = default;

bool GemmLtEngine::capturing(void* stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &cs) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unknown: behave as if capturing (no allocation, no synchronisation)
  }
  return cs != cudaStreamCaptureStatusNone;
}

Status GemmLtEngine::prepare(const DeviceWeight& w, int64_t max_rows, void* stream) {
  if (capturing(stream)) return Status::ok();
  Impl& I = *impl_;
  DSI_RETURN_IF_ERROR(I.init());
  if (!supports(w))
    return Status::errorf("cuBLASLt GEMM: unsupported weight {} [{}, {}] with {}x{} blocks (needs FP8_BLOCK with 128x128 "
                          "blocks, K % 128 == 0, N % 16 == 0, or BF16 / F32 with K % 8 == 0, N % 4 == 0)",
                          weight_format_name(w.fmt), w.rows, w.cols, w.block_n, w.block_k);
  if (w.fmt != WeightFormat::FP8_BLOCK) {
    if (max_rows > 0 && w.fmt == WeightFormat::BF16)
      DSI_RETURN_IF_ERROR(I.grow(I.q, size_t(max_rows * w.cols * 2), "cuBLASLt bf16 activations"));
    return Status::ok();
  }
  DSI_RETURN_IF_ERROR(I.ensure_probe(stream));
  const int64_t nb = (w.rows + lt::kWBlock - 1) / lt::kWBlock, kb = w.cols / lt::kWBlock;
  const int64_t ld = I.wscale_layout == 1 ? kb : lt::wscale_ld(kb);
  auto [it, fresh] = I.weights.try_emplace(w.data);
  WeightScales& ws = it->second;
  if (fresh) {
    ws.rows = w.rows;
    ws.cols = w.cols;
    ws.status = ws.scale.alloc(size_t(nb * ld), "cuBLASLt weight scales");
    if (ws.status.is_ok()) {
      detail::launch_lt_weight_scales(w.scale, w.scale_e8m0, nb, kb, ws.scale.data(), ld, stream);
      ws.status = dsinfer::cuda::check_launch("gemm_lt_wscale_kernel", __FILE__, __LINE__);
    }
  } else if (ws.rows != w.rows || ws.cols != w.cols) {
    return Status::errorf("cuBLASLt GEMM: the weight at {} was prepared as [{}, {}], now [{}, {}] (forget it first)",
                          w.data, ws.rows, ws.cols, w.rows, w.cols);
  }
  DSI_RETURN_IF_ERROR(ws.status);
  // Buffers for every call of up to max_rows rows: the widened route's for max_rows when it takes it, and the FP8
  // route's for the largest call it keeps (a prefill-sized prepare still serves the decode steps captured later).
  if (max_rows > 0 && gemm_lt_fp8_route(w, max_rows, I.act) == GemmLtActivations::kBf16) {
    DSI_RETURN_IF_ERROR(I.grow(I.q, size_t(max_rows * w.cols * 2), "cuBLASLt bf16 activations"));
    DSI_RETURN_IF_ERROR(I.grow(I.wide, size_t(w.rows * w.cols * 2), "cuBLASLt widened bf16 weight"));
  }
  if (const int64_t fp8_rows = gemm_lt_fp8_max_rows(w, max_rows, I.act); fp8_rows > 0) {
    const bool two = gemm_lt_fp8_route(w, fp8_rows, I.act) == GemmLtActivations::kFp8x2;
    const int64_t m4 = round4(fp8_rows), sk = m4 * kb;
    DSI_RETURN_IF_ERROR(I.grow(I.q, size_t((two ? 2 : 1) * m4 * w.cols), "cuBLASLt activation codes"));
    DSI_RETURN_IF_ERROR(I.grow(I.s, size_t(two ? scale_offset(sk) + sk : sk), "cuBLASLt activation scales"));
    // The stacked product of the largest two-term call it stacks (monotone: the limit rows or fp8_rows).
    const int64_t stack_rows = std::min(fp8_rows, kGemmLtStackMaxM);
    if (gemm_lt_fp8_route(w, stack_rows, I.act) == GemmLtActivations::kFp8x2 &&
        gemm_lt_fp8x2_stacked(stack_rows, w.rows, I.stack))
      DSI_RETURN_IF_ERROR(I.grow(I.d2, size_t(2 * round4(stack_rows) * w.rows), "cuBLASLt stacked two-term product"));
  }
  return Status::ok();
}

void GemmLtEngine::forget(const DeviceWeight& w) { impl_->weights.erase(w.data); }

namespace {
// The argument checks of a single-weight call (M == 0 returns before them), then its weight prepared (outside a
// capture) and the engine's state: what every such call does before choosing a route. cap: the stream is capturing.
Status begin_call(GemmLtEngine& e, const GemmLtEngine::Impl& I, const char* op, const void* x, const void* y, int64_t M,
                  int64_t ldx, const DeviceWeight& w, int64_t ldy, void* stream, bool& cap) {
  if (M < 0 || M > (int64_t(1) << 24)) return Status::errorf("{}: row count {} out of range", op, M);
  if (!x || !y) return Status::errorf("{}: null x or y", op);
  if (ldx < w.cols || ldy < w.rows)
    return Status::errorf("{}: ldx {} / ldy {} smaller than K {} / N {}", op, ldx, ldy, w.cols, w.rows);
  cap = GemmLtEngine::capturing(stream);
  if (!cap) DSI_RETURN_IF_ERROR(e.prepare(w, M, stream));
  if (!I.initialized) return Status::error("cuBLASLt GEMM: first use inside a graph capture (prepare it before)");
  return I.init_status;
}
}  // namespace

Status GemmLtEngine::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy,
                          bool accumulate, void* stream) {
  if (M == 0) return Status::ok();
  Impl& I = *impl_;
  bool cap = false;
  DSI_RETURN_IF_ERROR(begin_call(*this, I, "cuBLASLt GEMM", x, y, M, ldx, w, ldy, stream, cap));
  if (!supports(w)) return Status::error("cuBLASLt GEMM: unsupported weight");
  const Impl::DenseIo io{x, nullptr, ldx, y, nullptr, ldy, accumulate};
  if (w.fmt == WeightFormat::FP8_BLOCK && gemm_lt_fp8_route(w, M, I.act) == GemmLtActivations::kBf16)
    return I.gemm_widened(io, M, w, cap, stream);
  if (w.fmt == WeightFormat::FP8_BLOCK) return I.gemm_fp8(x, M, ldx, w, y, ldy, accumulate, cap, stream);
  return I.gemm_dense(io, M, w, cap, stream);
}

Status GemmLtEngine::gemm_bf16_out(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, uint16_t* y16,
                                   int64_t ldy, void* stream) {
  if (M == 0) return Status::ok();
  Impl& I = *impl_;
  bool cap = false;
  DSI_RETURN_IF_ERROR(begin_call(*this, I, "cuBLASLt GEMM (bf16 out)", x, y16, M, ldx, w, ldy, stream, cap));
  return I.gemm_bf16_route({x, nullptr, ldx, nullptr, y16, ldy, false}, M, w, cap, stream, "cuBLASLt GEMM (bf16 out)");
}

Status GemmLtEngine::gemm_bf16_in(const uint16_t* x16, int64_t M, int64_t ldx, const DeviceWeight& w, float* y,
                                  int64_t ldy, bool accumulate, void* stream) {
  if (M == 0) return Status::ok();
  Impl& I = *impl_;
  bool cap = false;
  DSI_RETURN_IF_ERROR(begin_call(*this, I, "cuBLASLt GEMM (bf16 in)", x16, y, M, ldx, w, ldy, stream, cap));
  if (reinterpret_cast<uintptr_t>(x16) % 16 != 0 || ldx % 8 != 0)
    return Status::errorf("cuBLASLt GEMM (bf16 in): x needs 16-byte alignment and ldx % 8 == 0 (ldx {})", ldx);
  return I.gemm_bf16_route({nullptr, x16, ldx, y, nullptr, ldy, accumulate}, M, w, cap, stream, "cuBLASLt GEMM (bf16 in)");
}

Status GemmLtEngine::Impl::gemm_bf16_route(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream,
                                           const char* op) {
  if (w.fmt == WeightFormat::FP8_BLOCK && supports(w) && gemm_lt_fp8_route(w, M, act) == GemmLtActivations::kBf16)
    return gemm_widened(io, M, w, cap, stream);
  if (w.fmt == WeightFormat::BF16 && supports(w)) return gemm_dense(io, M, w, cap, stream);
  return Status::errorf("{}: {} [{}, {}] at M = {} is not on a bf16 route", op, weight_format_name(w.fmt), w.rows, w.cols,
                        M);
}

Status GemmLtEngine::gemm_same_x(const float* x, int64_t M, int64_t ldx, const DeviceWeight* const* ws,
                                 float* const* ys, const int64_t* ldys, int count, void* stream) {
  if (M < 0 || M > (int64_t(1) << 24)) return Status::errorf("cuBLASLt GEMM (same x): row count {} out of range", M);
  if (M == 0 || count == 0) return Status::ok();
  if (!x || count < 0) return Status::error("cuBLASLt GEMM (same x): null x or a negative count");
  Impl& I = *impl_;
  const bool cap = capturing(stream);
  for (int i = 0; i < count; ++i) {
    const DeviceWeight& w = *ws[i];
    const bool widened = w.fmt == WeightFormat::FP8_BLOCK && gemm_lt_fp8_route(w, M, I.act) == GemmLtActivations::kBf16;
    if (!supports(w) || !(widened || w.fmt == WeightFormat::BF16) || w.cols != ws[0]->cols)
      return Status::errorf("cuBLASLt GEMM (same x): weight {} ({} [{}, {}]) is not on a bf16 route at M = {} with K = {}",
                            i, weight_format_name(w.fmt), w.rows, w.cols, M, ws[0]->cols);
    if (!ys[i] || ldx < w.cols || ldys[i] < w.rows)
      return Status::errorf("cuBLASLt GEMM (same x): weight {}: null y, or ldx {} / ldy {} below K {} / N {}", i, ldx,
                            ldys[i], w.cols, w.rows);
    if (!cap) DSI_RETURN_IF_ERROR(prepare(w, M, stream));
  }
  if (!I.initialized) return Status::error("cuBLASLt GEMM: first use inside a graph capture (prepare it before)");
  DSI_RETURN_IF_ERROR(I.init_status);
  for (int i = 0; i < count; ++i) {
    // The first call rounds x into q (grown for M x K then, never after: every K is the same); the others read it.
    const uint16_t* x16 = i > 0 ? reinterpret_cast<const uint16_t*>(I.q.data()) : nullptr;
    const Impl::DenseIo io{x, x16, i > 0 ? ws[0]->cols : ldx, ys[i], nullptr, ldys[i], false};
    DSI_RETURN_IF_ERROR(I.gemm_bf16_route(io, M, *ws[i], cap, stream, "cuBLASLt GEMM (same x)"));
  }
  return Status::ok();
}

// Block scaling needs M % 4 == 0: rows [0, Mm) run on cuBLASLt, the last M % 4 on gemm_cuda's fp32 streaming kernel
// (one more read of the weight: ~10 us for wq_b's 32 MB; the runner sends M >= 64).
Status GemmLtEngine::Impl::gemm_fp8(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y,
                                    int64_t ldy, bool acc, bool cap, void* stream) {
  if (!probed) return Status::error("cuBLASLt GEMM: first FP8 use inside a graph capture (prepare it before)");
  DSI_RETURN_IF_ERROR(probe_status);
  const auto it = weights.find(w.data);
  if (it == weights.end()) return Status::error("cuBLASLt GEMM: weight not prepared before the graph capture");
  const WeightScales& ws = it->second;
  DSI_RETURN_IF_ERROR(ws.status);
  if (ws.rows != w.rows || ws.cols != w.cols) return Status::error("cuBLASLt GEMM: weight shape changed");
  const int64_t tail = M % 4, Mm = M - tail, K = w.cols, N = w.rows, kb = K / lt::kActBlock;
  if (Mm == 0) return Status::errorf("cuBLASLt GEMM: M = {} < 4 has no block-scaled FP8 algorithm", M);
  const bool two = gemm_lt_fp8_route(w, M, act) == GemmLtActivations::kFp8x2;
  const int64_t sk = Mm * kb, s2_at = scale_offset(sk);
  if (q.size() < size_t((two ? 2 : 1) * Mm * K) || s.size() < size_t(two ? s2_at + sk : sk))
    return Status::errorf("cuBLASLt GEMM: activation buffers too small for M = {} inside a graph capture", M);
  if (two && gemm_lt_fp8x2_stacked(M, N, stack)) {
    bool ran = false;
    const Status st = gemm_fp8_stacked(x, M, ldx, w, ws.scale.data(), y, ldy, acc, cap, stream, ran);
    if (ran || !st.is_ok()) return st;
  }
  const PlanKey key{gemm_lt_detail::PlanKind::kFp8Block, Mm, N, K, ldy, acc,
                    alignment(reinterpret_cast<uintptr_t>(w.data) | uint64_t(K)),
                    alignment(reinterpret_cast<uintptr_t>(q.data()) | uint64_t(K)),
                    alignment(reinterpret_cast<uintptr_t>(y) | uint64_t(ldy * 4))};
  Plan& p = plan(key, ws.scale.data(), s.data());
  DSI_RETURN_IF_ERROR(p.status);
  if (p.bf16_out && t.size() < size_t(Mm * N * 2)) {
    if (cap) return Status::error("cuBLASLt GEMM: bf16 output buffer too small inside a graph capture");
    DSI_RETURN_IF_ERROR(grow(t, size_t(Mm * N * 2), "cuBLASLt bf16 output"));
  }
  uint8_t* q2 = two ? q.data() + Mm * K : nullptr;  // Mm * K is a multiple of 512: aligned like the first term
  float* s2 = two ? s.data() + s2_at : nullptr;
  detail::launch_lt_quant(x, Mm, ldx, K, q.data(), s.data(), Mm, q2, s2, stream);
  DSI_CUDA_LAUNCHED("gemm_lt_quant_kernel");
  DSI_RETURN_IF_ERROR(run(p, w.data, ws.scale.data(), q.data(), s.data(), Mm, y, ldy, acc, stream));
  if (two)  // y += the second term's product (same plan; beta = 1)
    DSI_RETURN_IF_ERROR(run(p, w.data, ws.scale.data(), q2, s2, Mm, y, ldy, true, stream));
  if (tail == 0) return Status::ok();
  return gemm_cuda(x + Mm * ldx, tail, ldx, w, y + Mm * ldy, ldy, acc, stream, GemmPrecision::kFp32SmallM);
}

// The two-term route as one matmul: q holds the terms back to back ([2 Mm, K], q2 = q + Mm K), s their scales as
// one [K / 128, 2 Mm] matrix (the second term's at column Mm), the product goes to d2 [2 Mm, N] and launch_lt_sum2
// adds its halves into y in the order of the two accumulating matmuls. ran = false (ok, nothing launched) when there
// is no fp32-output plan for 2 Mm rows or d2 cannot hold the product inside a capture: the caller then runs the two
// matmuls.
Status GemmLtEngine::Impl::gemm_fp8_stacked(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w,
                                            const float* wscale, float* y, int64_t ldy, bool acc, bool cap,
                                            void* stream, bool& ran) {
  ran = false;
  const int64_t tail = M % 4, Mm = M - tail, K = w.cols, N = w.rows, M2 = 2 * Mm;
  if (d2.size() < size_t(M2 * N)) {
    if (cap) return Status::ok();
    DSI_RETURN_IF_ERROR(grow(d2, size_t(M2 * N), "cuBLASLt stacked two-term product"));
  }
  if (s.size() < size_t(M2 * (K / lt::kActBlock))) return Status::ok();
  const PlanKey key{gemm_lt_detail::PlanKind::kFp8Block, M2, N, K, N, false,
                    alignment(reinterpret_cast<uintptr_t>(w.data) | uint64_t(K)),
                    alignment(reinterpret_cast<uintptr_t>(q.data()) | uint64_t(K)),
                    alignment(reinterpret_cast<uintptr_t>(d2.data()) | uint64_t(N * 4))};
  Plan& p = plan(key, wscale, s.data());
  if (!p.status.is_ok() || p.bf16_out) return Status::ok();
  ran = true;
  detail::launch_lt_quant(x, Mm, ldx, K, q.data(), s.data(), Mm, q.data() + Mm * K, s.data() + Mm, stream, M2);
  DSI_CUDA_LAUNCHED("gemm_lt_quant_kernel");
  DSI_RETURN_IF_ERROR(run(p, w.data, wscale, q.data(), s.data(), M2, d2.data(), N, false, stream));
  detail::launch_lt_sum2(d2.data(), Mm, N, y, ldy, acc, stream);
  DSI_CUDA_LAUNCHED("gemm_lt_sum2_kernel");
  if (tail == 0) return Status::ok();
  return gemm_cuda(x + Mm * ldx, tail, ldx, w, y + Mm * ldy, ldy, acc, stream, GemmPrecision::kFp32SmallM);
}

// GemmLtActivations::kBf16: the FP8 weight widened into `wide` (after the plan resolved, so a refusal leaves y
// untouched), then the BF16 path on the copy. Any M (no block-scaling rule on the rows).
Status GemmLtEngine::Impl::gemm_widened(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream) {
  const size_t wb = size_t(w.rows * w.cols) * 2;
  if (wide.size() < wb) {
    if (cap)
      return Status::errorf("cuBLASLt GEMM: widened-weight buffer too small for [{}, {}] inside a graph capture",
                            w.rows, w.cols);
    DSI_RETURN_IF_ERROR(grow(wide, wb, "cuBLASLt widened bf16 weight"));
  }
  DeviceWeight v;
  v.fmt = WeightFormat::BF16;
  v.rows = w.rows;
  v.cols = w.cols;
  v.data = wide.data();
  return gemm_dense(io, M, v, cap, stream, &w);
}

// BF16 W: x rounded to bf16 into q (or io.x16 read as it is), then the bf16 matmul. F32 W: x read in place (ld K only:
// cuBLASLt's B layout is given ld = K), bf16 products (CUBLAS_COMPUTE_32F_FAST_16BF). widen_from: the FP8 weight that
// w (in `wide`) is the bf16 copy of, widened once the plan is resolved.
Status GemmLtEngine::Impl::gemm_dense(const DenseIo& io, int64_t M, const DeviceWeight& w, bool cap, void* stream,
                                      const DeviceWeight* widen_from) {
  const bool bf = w.fmt == WeightFormat::BF16;
  const int64_t K = w.cols, N = w.rows;
  if (!bf && (io.ldx != K || io.x16 || io.y16))
    return Status::errorf("cuBLASLt GEMM: F32 weights need fp32 x and y, ldx == K ({} != {})", io.ldx, K);
  if (bf && !io.x16 && q.size() < size_t(M * K * 2)) {
    if (cap) return Status::errorf("cuBLASLt GEMM: bf16 activation buffer too small for M = {} inside a capture", M);
    DSI_RETURN_IF_ERROR(grow(q, size_t(M * K * 2), "cuBLASLt bf16 activations"));
  }
  const void* xb = io.x16 ? static_cast<const void*>(io.x16)
                   : bf   ? static_cast<const void*>(q.data())
                          : static_cast<const void*>(io.x);
  const int64_t ldb = io.x16 ? io.ldx : K;  // B's row stride: the caller's bf16 x, or q / the fp32 x (K)
  const uint64_t eb = bf ? 2 : 4;
  PlanKey key{bf ? gemm_lt_detail::PlanKind::kBf16 : gemm_lt_detail::PlanKind::kF32, M, N, K, io.ldy, io.acc && !io.y16,
              alignment(reinterpret_cast<uintptr_t>(w.data) | uint64_t(K) * eb),
              alignment(reinterpret_cast<uintptr_t>(xb) | uint64_t(ldb) * eb),
              io.y16 ? alignment(reinterpret_cast<uintptr_t>(io.y16) | uint64_t(io.ldy * 2))
                     : alignment(reinterpret_cast<uintptr_t>(io.y) | uint64_t(io.ldy * 4))};
  key.ldx = ldb == K ? 0 : ldb;  // 0: K (the key of every contiguous x, so q read by a later call keeps its plan)
  key.out_bf16 = io.y16 != nullptr;
  Plan& p = plan(key, nullptr, nullptr);
  DSI_RETURN_IF_ERROR(p.status);
  if (widen_from)
    DSI_RETURN_IF_ERROR(
        widen_fp8_bf16(*widen_from, reinterpret_cast<uint16_t*>(wide.data()), int64_t(wide.size() / 2), stream).status());
  if (bf && !io.x16) {
    detail::launch_lt_bf16(io.x, M, io.ldx, K, reinterpret_cast<uint16_t*>(q.data()), stream);
    DSI_CUDA_LAUNCHED("gemm_lt_bf16_kernel");
  }
  return io.y16 ? run(p, w.data, nullptr, xb, nullptr, M, io.y16, io.ldy, false, stream)
                : run(p, w.data, nullptr, xb, nullptr, M, io.y, io.ldy, io.acc, stream);
}

Status GemmLtEngine::Impl::grouped_buffers(const DeviceWeight& w, int64_t max_rows, int64_t span, bool cap) {
  const size_t xb = size_t(max_rows) * size_t(span) * 2, wb = w.fmt == WeightFormat::BF16 ? 0 : size_t(w.rows * w.cols) * 2;
  if (cap && (q.size() < xb || wide.size() < wb))
    return Status::errorf("cuBLASLt grouped GEMM: buffers too small for M = {} inside a graph capture", max_rows);
  DSI_RETURN_IF_ERROR(grow(q, xb, "cuBLASLt grouped bf16 activations"));
  return wb > 0 ? grow(wide, wb, "cuBLASLt grouped bf16 weight") : Status::ok();
}

namespace {

Status grouped_unsupported(const DeviceWeight& w, int64_t groups) {
  return Status::errorf("cuBLASLt grouped GEMM: unsupported weight {} [{}, {}] in {} groups (needs FP8_BLOCK with E8M0 "
                        "scales or BF16, whole groups of rows % 4 == 0, K % 8 == 0)",
                        weight_format_name(w.fmt), w.rows, w.cols, groups);
}

}  // namespace

Status GemmLtEngine::prepare_grouped(const DeviceWeight& w, int64_t groups, int64_t max_rows, void* stream) {
  if (capturing(stream)) return Status::ok();
  DSI_RETURN_IF_ERROR(impl_->init());
  if (!gemm_lt_grouped_supports(w, groups)) return grouped_unsupported(w, groups);
  return max_rows > 0 ? impl_->grouped_buffers(w, max_rows, groups * w.cols, false) : Status::ok();
}

Status GemmLtEngine::gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                  int64_t groups, float* y, int64_t ldy, int64_t yg, void* stream) {
  return impl_->grouped(x, nullptr, M, ldx, xg, w, groups, y, ldy, yg, stream);
}

Status GemmLtEngine::gemm_grouped_bf16(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                       int64_t groups, float* y, int64_t ldy, int64_t yg, void* stream) {
  return impl_->grouped(nullptr, x, M, ldx, xg, w, groups, y, ldy, yg, stream);
}

Status GemmLtEngine::gemm_grouped_bf16_out(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                           int64_t groups, uint16_t* y16, int64_t ldy, int64_t yg, void* stream) {
  if (!y16 || reinterpret_cast<uintptr_t>(y16) % 16 != 0 || ldy % 8 != 0 || yg % 8 != 0)
    return Status::errorf("cuBLASLt grouped GEMM (bf16 out): y needs 16-byte alignment, ldy and yg % 8 == 0 ({}, {})",
                          ldy, yg);
  return impl_->grouped(nullptr, x, M, ldx, xg, w, groups, nullptr, ldy, yg, stream, y16);
}

// gemm_grouped (x fp32: rounded into q over the groups' span) or gemm_grouped_bf16 (x16: read in place, row stride
// ldx). One of x / x16 is set.
Status GemmLtEngine::Impl::grouped(const float* x, const uint16_t* x16, int64_t M, int64_t ldx, int64_t xg,
                                   const DeviceWeight& w, int64_t groups, float* y, int64_t ldy, int64_t yg,
                                   void* stream, uint16_t* y16) {
  if (M < 0 || M > (int64_t(1) << 24)) return Status::errorf("cuBLASLt grouped GEMM: row count {} out of range", M);
  if (M == 0) return Status::ok();
  if ((!x && !x16) || (!y && !y16)) return Status::error("cuBLASLt grouped GEMM: null x or y");
  if (!gemm_lt_grouped_supports(w, groups)) return grouped_unsupported(w, groups);
  const int64_t K = w.cols, Ng = w.rows / groups, span = (groups - 1) * xg + K;
  if (xg < K || yg < Ng || span > ldx || (groups - 1) * yg + Ng > ldy)
    return Status::errorf("cuBLASLt grouped GEMM: groups of [{}, {}] do not fit strides xg {} / ldx {}, yg {} / ldy {}", Ng,
                          K, xg, ldx, yg, ldy);
  if (span > (int64_t(1) << 30) || M * span > (int64_t(1) << 40))
    return Status::errorf("cuBLASLt grouped GEMM: x span {} x {} rows too large", span, M);
  if (x16 && (reinterpret_cast<uintptr_t>(x16) % 16 != 0 || ldx % 8 != 0 || ldx > (int64_t(1) << 30)))
    return Status::errorf("cuBLASLt grouped GEMM: bf16 x needs 16-byte alignment and ldx % 8 == 0 (ldx {})", ldx);
  const bool cap = GemmLtEngine::capturing(stream);
  if (!cap) DSI_RETURN_IF_ERROR(init());
  if (!initialized) return Status::error("cuBLASLt grouped GEMM: first use inside a graph capture (prepare it before)");
  DSI_RETURN_IF_ERROR(init_status);
  // The bf16 x needs no activation buffer (0 rows), only the widened weight.
  DSI_RETURN_IF_ERROR(grouped_buffers(w, x16 ? 0 : M, span, cap));
  const bool fp8 = w.fmt == WeightFormat::FP8_BLOCK;
  const void* wd = fp8 ? static_cast<const void*>(wide.data()) : w.data;
  const uint16_t* xb = x16 ? x16 : reinterpret_cast<const uint16_t*>(q.data());
  const int64_t ldb = x16 ? ldx : span;  // B's row stride: the caller's, or the buffer's (the span)
  const PlanKey key{gemm_lt_detail::PlanKind::kBf16,
                    M,
                    Ng,
                    K,
                    ldy,
                    false,
                    alignment(reinterpret_cast<uintptr_t>(wd) | uint64_t(K) * 2),
                    alignment(reinterpret_cast<uintptr_t>(xb) | uint64_t(ldb) * 2 | uint64_t(xg) * 2),
                    y16 ? alignment(reinterpret_cast<uintptr_t>(y16) | uint64_t(ldy * 2) | uint64_t(yg * 2))
                        : alignment(reinterpret_cast<uintptr_t>(y) | uint64_t(ldy * 4) | uint64_t(yg * 4)),
                    groups,
                    ldb,
                    xg,
                    yg,
                    y16 != nullptr};
  Plan& p = plan(key, nullptr, nullptr);
  DSI_RETURN_IF_ERROR(p.status);
  if (fp8) {
    const int64_t room = int64_t(wide.size() / 2);
    DSI_RETURN_IF_ERROR(widen_fp8_bf16(w, reinterpret_cast<uint16_t*>(wide.data()), room, stream).status());
  }
  if (!x16) {
    detail::launch_lt_bf16(x, M, ldx, span, reinterpret_cast<uint16_t*>(q.data()), stream);
    DSI_CUDA_LAUNCHED("gemm_lt_bf16_kernel");
  }
  return y16 ? run(p, wd, nullptr, xb, nullptr, M, y16, ldy, false, stream)
             : run(p, wd, nullptr, xb, nullptr, M, y, ldy, false, stream);
}

size_t GemmLtEngine::device_bytes() const {
  const Impl& I = *impl_;
  size_t n = I.workspace.bytes() + I.q.bytes() + I.t.bytes() + I.s.bytes() + I.wide.bytes() + I.d2.bytes();
  for (const auto& b : I.retired) n += b.bytes();
  for (const auto& b : I.retired_f) n += b.bytes();
  for (const auto& [p, ws] : I.weights) n += ws.scale.bytes();
  return n;
}

int GemmLtEngine::weight_scale_layout() const { return impl_->wscale_layout; }
GemmLtActivations GemmLtEngine::activations() const { return impl_->act; }

}  // namespace dsinfer::ops::cuda
