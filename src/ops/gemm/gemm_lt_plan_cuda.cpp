// cuBLASLt side of the GEMM engine (see gemm_lt_cuda.h): matmul plans (descriptor, layouts, heuristic algorithm),
// the matmul call itself, and the probe that finds the layout cuBLASLt reads the 1 x 128 activation scales in.
//
// Operands, column-major as cuBLASLt sees them (the "TN" product D[N, M] = op(A)[N, K] . B[K, M]):
//   A = W: e4m3 [N, K] row-major = K x N column-major (ld K), transposed; scales BLK128x128_32F, fp32
//          [ceil(N/128), ld] with the K blocks contiguous, ld = ceil(K/128) or that rounded up to 4 (the probe
//          finds which; both agree when ceil(K/128) % 4 == 0, as for every V4-Flash projection).
//   B = x: e4m3 codes [M, K] row-major = K x M column-major (ld K); scales VEC128_32F, fp32, block b of token m at
//          b * s_ld + m (the token dimension contiguous; s_ld = M or M rounded up to 4, found by the probe).
//   D = y: fp32 [M, N] row-major = N x M column-major (ld ldy), or bf16 [M, N] (ld N) plus the epilogue kernel.
// This is the layout of PyTorch's torch._scaled_mm BlockWise1x128 x BlockWise128x128 and of Transformer Engine's
// "GEMM_READY" block-scaling tensors, which both drive these cuBLASLt modes.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_lt_impl.h"
#include "ops/gemm/gemm_lt_launch.h"
#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::cuda {

namespace gemm_lt_detail {

void Plan::release() {
  if (op) cublasLtMatmulDescDestroy(op);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (d) cublasLtMatrixLayoutDestroy(d);
  op = nullptr, a = b = d = nullptr;
}

namespace {

std::string lt_error(cublasStatus_t st) { return cublasLtGetStatusName(st); }

// Descriptor and layouts of one output type; returns the first failing cuBLASLt status.
cublasStatus_t describe(const PlanKey& k, const float* w_scale, const float* x_scale, bool bf16, Plan& p) {
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(p.op, attr, v, n);
  };
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int32_t am = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, uint64_t(k.K), uint64_t(k.N), k.K);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, uint64_t(k.K), uint64_t(k.M), k.K);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.d, bf16 ? CUDA_R_16BF : CUDA_R_32F, uint64_t(k.N), uint64_t(k.M), bf16 ? k.N : k.ldy);
  return st;
}

}  // namespace

std::unique_ptr<Plan> make_plan(cublasLtHandle_t h, const PlanKey& k, const float* w_scale, const float* x_scale) {
  auto p = std::make_unique<Plan>();
  p->N = k.N;
  std::string why;
  for (bool bf16 : {false, true}) {  // block-scaled FP8 may offer only bf16 output
    p->release();
    p->bf16_out = bf16;
    const char* out = bf16 ? "bf16 out" : "fp32 out";
    cublasStatus_t st = describe(k, w_scale, x_scale, bf16, *p);
    if (st != CUBLAS_STATUS_SUCCESS) {
      why += fmt::format("{}: descriptor {}; ", out, lt_error(st));
      continue;
    }
    cublasLtMatmulPreference_t pref = nullptr;
    st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) {
      why += fmt::format("{}: preference {}; ", out, lt_error(st));
      continue;
    }
    const size_t ws = kWorkspaceBytes;
    const uint32_t al_a = k.align_w, al_b = alignment(uint64_t(k.K)), al_d = bf16 ? alignment(uint64_t(k.N) * 2) : k.align_y;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->d, p->d, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
      p->algo = res.algo;
      p->status = Status::ok();
      return p;
    }
    why += fmt::format("{}: heuristic {} ({} found); ", out, lt_error(st), found);
  }
  p->release();
  p->status = Status::errorf("cuBLASLt has no FP8 block-scaled algorithm for M={} N={} K={} ldy={}: {}", k.M, k.N, k.K,
                             k.ldy, why);
  return p;
}

}  // namespace gemm_lt_detail

using gemm_lt_detail::Plan;
using gemm_lt_detail::PlanKey;

Plan& GemmLtEngine::Impl::plan(const PlanKey& key, const float* w_scale, const float* x_scale) {
  auto it = plans.find(key);
  if (it == plans.end()) {
    if (plans.size() >= 4096) plans.clear();  // bound host memory under endlessly varying shapes
    it = plans.emplace(key, gemm_lt_detail::make_plan(handle, key, w_scale, x_scale)).first;
  }
  return *it->second;
}

Status GemmLtEngine::Impl::run(Plan& p, const void* wdata, const float* w_scale, const uint8_t* xq, const float* xs,
                               int64_t M, float* y, int64_t ldy, bool accumulate, void* stream) {
  DSI_RETURN_IF_ERROR(p.status);
  cublasStatus_t st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs);
  const float alpha = 1.0f, beta = accumulate && !p.bf16_out ? 1.0f : 0.0f;
  void* out = p.bf16_out ? static_cast<void*>(t.data()) : static_cast<void*>(y);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(handle, p.op, &alpha, wdata, p.a, xq, p.b, &beta, out, p.d, out, p.d, &p.algo, workspace.data(),
                        gemm_lt_detail::kWorkspaceBytes, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS) {
    p.status = Status::errorf("cublasLtMatmul failed: {}", gemm_lt_detail::lt_error(st));  // sticky for this plan
    return p.status;
  }
  if (p.bf16_out) {
    detail::launch_lt_epilogue(reinterpret_cast<const uint16_t*>(t.data()), M, p.N, y, ldy, accumulate, stream);
    DSI_CUDA_LAUNCHED("gemm_lt_epilogue_kernel");
  }
  return Status::ok();
}

// A matmul whose result tells apart the possible readings of the two scale tensors, for the shapes where they
// differ: the VEC128_32F activation scales when M % 4 != 0 (leading dimension M or M rounded up to 4) and the
// BLK128x128_32F weight scales when ceil(K / 128) % 4 != 0 (rows of ceil(K / 128) or of that rounded up to 4).
// M = 66, N = 256, K = 256 (2 x 2 blocks), all codes 1.0, activation scale entry i = i + 1, weight scale entry
// j = 2^j: y[m, n] = 128 * sum_b (b * xld + m + 1) * 2^((n / 128) * wld + b). Distinct readings differ by >= 3 %
// at the sampled outputs (bf16 output, where the library offers only that, rounds by <= 0.4 %).
Status GemmLtEngine::Impl::probe(void* stream) {
  constexpr int64_t M = 66, N = 256, K = 256, KB = K / 128, M4 = 68, KB4 = 4;
  const std::vector<uint8_t> ones_x(size_t(M * K), 0x38), ones_w(size_t(N * K), 0x38);  // e4m3 1.0
  std::vector<float> xs(size_t(KB * M4)), wsc(size_t(2 * KB4));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i + 1);
  for (size_t j = 0; j < wsc.size(); ++j) wsc[j] = float(1 << j);
  dsinfer::cuda::DeviceBuffer<uint8_t> dq, dw;
  dsinfer::cuda::DeviceBuffer<float> dxs, dws, dy;
  DSI_RETURN_IF_ERROR(dq.upload(ones_x.data(), ones_x.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dw.upload(ones_w.data(), ones_w.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dxs.upload(xs.data(), xs.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dws.upload(wsc.data(), wsc.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dy.alloc(size_t(M * N), "cuBLASLt probe"));
  const PlanKey key{M, N, K, N, false, gemm_lt_detail::alignment(reinterpret_cast<uintptr_t>(dw.data()) | uint64_t(K)),
                    gemm_lt_detail::alignment(reinterpret_cast<uintptr_t>(dy.data()) | uint64_t(N * 4))};
  Plan& p = plan(key, dws.data(), dxs.data());
  DSI_RETURN_IF_ERROR(p.status.with_context("cuBLASLt scale-layout probe"));
  if (p.bf16_out) DSI_RETURN_IF_ERROR(grow(t, size_t(M * N * 2), "cuBLASLt bf16 output"));
  DSI_RETURN_IF_ERROR(run(p, dw.data(), dws.data(), dq.data(), dxs.data(), M, dy.data(), N, false, stream));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  std::vector<float> y(size_t(M * N));
  DSI_RETURN_IF_ERROR(dy.download(y.data(), y.size()));
  auto matches = [&](int64_t xld, int64_t wld) {
    for (int64_t m : {int64_t(0), int64_t(1), M - 1})
      for (int64_t n : {int64_t(0), N - 1}) {
        double e = 0;
        for (int64_t b = 0; b < KB; ++b) e += 128.0 * double(b * xld + m + 1) * std::ldexp(1.0, int((n / 128) * wld + b));
        if (std::fabs(double(y[size_t(m * N + n)]) - e) > 0.005 * e) return false;
      }
    return true;
  };
  for (int64_t xld : {M, M4})
    for (int64_t wld : {KB, KB4})
      if (matches(xld, wld)) {
        scale_layout = xld == M ? 1 : 2;
        wscale_layout = wld == KB ? 1 : 2;
        return Status::ok();
      }
  // None of the readings: the library reads the scales in some other layout, so no result could be trusted.
  scale_layout = wscale_layout = 3;
  return Status::errorf("cuBLASLt scale-layout probe matched no known scale layout (y[0, 0] = {}, y[0, 255] = {}): "
                        "the engine stays off", y[0], y[size_t(N - 1)]);
}

}  // namespace dsinfer::ops::cuda
