// cuBLASLt side of the GEMM engine (see gemm_lt_cuda.h): matmul plans (descriptor, layouts, heuristic algorithm),
// the matmul call itself, and the probe that checks how cuBLASLt reads the FP8 weight scales.
//
// Operands, column-major as cuBLASLt sees them (the "TN" product D[N, M] = op(A)[N, K] . B[K, M]):
//   A = W: [N, K] row-major = K x N column-major (ld K), transposed. FP8: e4m3, scales BLK128x128_32F, fp32
//          [ceil(N/128), L4] with the K blocks contiguous, L4 = ceil(K/128) rounded up to 4 (cuBLAS docs
//          3.1.4.5.1: "K-major, the stride between consecutive columns a multiple of 4"). BF16 / F32 as stored.
//   B = x: [M, K] row-major = K x M column-major (ld K). FP8: e4m3 codes, scales VEC128_32F, fp32, block b of
//          token m at b * M + m ("N-major", cuBLAS's n = our M, which must be a multiple of 4). BF16: x rounded.
//   D = y: fp32 [M, N] row-major = N x M column-major (ld ldy), or bf16 [M, N] (ld N) plus the epilogue kernel.
// This is the layout of PyTorch's torch._scaled_mm BlockWise1x128 x BlockWise128x128 (its cuBLASLt A is mat2,
// the weight, because the row-major output makes it run B^T A^T) and of NVIDIA's LtBlk128x128Fp8Matmul sample
// with the operands swapped (A/B scale modes VEC128/BLK and BLK/VEC are both supported pairings).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_lt_impl.h"
#include "ops/gemm/gemm_lt_launch.h"
#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::cuda {

namespace lt = dsinfer::ops::gemm_lt;

namespace gemm_lt_detail {

void Plan::release() {
  if (op) cublasLtMatmulDescDestroy(op);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (d) cublasLtMatrixLayoutDestroy(d);
  op = nullptr;
  a = b = d = nullptr;
}

namespace {

std::string lt_error(cublasStatus_t st) { return cublasLtGetStatusName(st); }

// Descriptor and layouts of one output type; returns the first failing cuBLASLt status.
cublasStatus_t describe(const PlanKey& k, const float* w_scale, const float* x_scale, bool bf16, Plan& p) {
  const bool fp8 = k.kind == PlanKind::kFp8Block, f32 = k.kind == PlanKind::kF32;
  // F32 weights: bf16 tensor-core products of fp32 operands, fp32 accumulation (the tiled kernel's numerics).
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, f32 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(p.op, attr, v, n);
  };
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (fp8) {  // scales exist only for narrow-precision operands (cuBLAS errors on scales of bf16 / fp32 ones)
    const int32_t am = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale);
  }
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const cudaDataType ab = fp8 ? CUDA_R_8F_E4M3 : f32 ? CUDA_R_32F : CUDA_R_16BF;
  st = cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(k.K), uint64_t(k.N), k.K);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(k.K), uint64_t(k.M), k.ldx > 0 ? k.ldx : k.K);
  if (st == CUBLAS_STATUS_SUCCESS)  // bf16 D: y itself for out_bf16 (ld ldy), else the [M, N] epilogue buffer
    st = cublasLtMatrixLayoutCreate(&p.d, bf16 ? CUDA_R_16BF : CUDA_R_32F, uint64_t(k.N), uint64_t(k.M),
                                    bf16 && !k.out_bf16 ? k.N : k.ldy);
  if (st != CUBLAS_STATUS_SUCCESS || k.batch <= 1) return st;
  // Strided batches (the grouped projection): one group per batch, the groups' W rows back to back.
  const int32_t count = int32_t(k.batch);
  const int64_t sa = k.N * k.K, sb = k.x_stride, sd = k.y_stride;
  auto batch = [&](cublasLtMatrixLayout_t l, int64_t stride) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
  };
  batch(p.a, sa);
  batch(p.b, sb);
  batch(p.d, sd);
  return st;
}

}  // namespace

std::unique_ptr<Plan> make_plan(cublasLtHandle_t h, const PlanKey& k, const float* w_scale, const float* x_scale) {
  auto p = std::make_unique<Plan>();
  p->N = k.N;
  std::string why;
  for (bool bf16 : {false, true}) {  // block-scaled FP8 may offer only bf16 output; out_bf16 asks for it
    if (k.out_bf16 != bf16 && (k.out_bf16 || k.kind != PlanKind::kFp8Block)) continue;
    p->release();
    p->bf16_out = bf16 && !k.out_bf16;
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
    const uint32_t al_a = k.align_w, al_b = k.align_x, al_d = p->bf16_out ? alignment(uint64_t(k.N) * 2) : k.align_y;
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
  static const char* const kinds[] = {"FP8 block-scaled", "bf16", "fp32 (fast bf16)"};
  p->status = Status::errorf("cuBLASLt has no {} algorithm for M={} N={} K={} ldy={} batch={}: {}", kinds[int(k.kind)],
                             k.M, k.N, k.K, k.ldy, k.batch, why);
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

Status GemmLtEngine::Impl::run(Plan& p, const void* wdata, const float* w_scale, const void* xq, const float* xs,
                               int64_t M, void* y, int64_t ldy, bool accumulate, void* stream) {
  DSI_RETURN_IF_ERROR(p.status);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (w_scale) st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
  if (st == CUBLAS_STATUS_SUCCESS && xs)
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
    detail::launch_lt_epilogue(reinterpret_cast<const uint16_t*>(t.data()), M, p.N, static_cast<float*>(y), ldy,
                               accumulate, stream);
    DSI_CUDA_LAUNCHED("gemm_lt_epilogue_kernel");
  }
  return Status::ok();
}

// A matmul whose result tells apart the two readings of the BLK128x128_32F weight scales when ceil(K / 128) % 4 != 0
// (rows of L4 = ceil(K/128) rounded up to 4, documented, or of ceil(K/128)) and checks the VEC128_32F activation
// layout (block b of token m at b * M + m). M = 64 (cuBLAS's n must be a multiple of 4: the 2026-11-30 probe used
// 66 and found no algorithm), N = 256, K = 256 (2 x 2 blocks), all codes 1.0, activation scale entry i = i + 1,
// weight scale entry j = 2^j: y[m, n] = 128 * sum_b (b * M + m + 1) * 2^((n / 128) * wld + b). The two readings
// differ by a factor >= 2 at n >= 128; a wrong activation reading by >= 1.5 % at the sampled outputs (bf16 output,
// where the library offers only that, rounds by <= 0.4 %).
Status GemmLtEngine::Impl::probe(void* stream) {
  constexpr int64_t M = 64, N = 256, K = 256, KB = K / 128, KB4 = lt::wscale_ld(KB);
  const std::vector<uint8_t> ones_x(size_t(M * K), 0x38), ones_w(size_t(N * K), 0x38);  // e4m3 1.0
  std::vector<float> xs(size_t(KB * M)), wsc(size_t(2 * KB4));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i + 1);
  for (size_t j = 0; j < wsc.size(); ++j) wsc[j] = float(1 << j);
  dsinfer::cuda::DeviceBuffer<uint8_t> dq, dw;
  dsinfer::cuda::DeviceBuffer<float> dxs, dws, dy;
  DSI_RETURN_IF_ERROR(dq.upload(ones_x.data(), ones_x.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dw.upload(ones_w.data(), ones_w.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dxs.upload(xs.data(), xs.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dws.upload(wsc.data(), wsc.size(), "cuBLASLt probe"));
  DSI_RETURN_IF_ERROR(dy.alloc(size_t(M * N), "cuBLASLt probe"));
  const PlanKey key{gemm_lt_detail::PlanKind::kFp8Block, M, N, K, N, false,
                    gemm_lt_detail::alignment(reinterpret_cast<uintptr_t>(dw.data()) | uint64_t(K)),
                    gemm_lt_detail::alignment(reinterpret_cast<uintptr_t>(dq.data()) | uint64_t(K)),
                    gemm_lt_detail::alignment(reinterpret_cast<uintptr_t>(dy.data()) | uint64_t(N * 4))};
  Plan& p = plan(key, dws.data(), dxs.data());
  DSI_RETURN_IF_ERROR(p.status.with_context("cuBLASLt scale-layout probe"));
  if (p.bf16_out) DSI_RETURN_IF_ERROR(grow(t, size_t(M * N * 2), "cuBLASLt bf16 output"));
  DSI_RETURN_IF_ERROR(run(p, dw.data(), dws.data(), dq.data(), dxs.data(), M, dy.data(), N, false, stream));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  std::vector<float> y(size_t(M * N));
  DSI_RETURN_IF_ERROR(dy.download(y.data(), y.size()));
  auto matches = [&](int64_t wld) {
    for (int64_t m : {int64_t(0), int64_t(1), M - 1})
      for (int64_t n : {int64_t(0), N - 1}) {
        double e = 0;
        for (int64_t b = 0; b < KB; ++b)
          e += 128.0 * double(lt::act_scale_index(m, b, M) + 1) * std::ldexp(1.0, int((n / 128) * wld + b));
        if (std::fabs(double(y[size_t(m * N + n)]) - e) > 0.005 * e) return false;
      }
    return true;
  };
  for (int64_t wld : {KB4, KB})
    if (matches(wld)) {
      wscale_layout = wld == KB ? 1 : 2;
      return Status::ok();
    }
  // None of the readings: the library reads the scales in some other layout, so no result could be trusted.
  wscale_layout = 3;
  return Status::errorf("cuBLASLt scale-layout probe matched no known scale layout (y[0, 0] = {}, y[0, 255] = {}): "
                        "FP8 GEMMs stay off", y[0], y[size_t(N - 1)]);
}

}  // namespace dsinfer::ops::cuda
