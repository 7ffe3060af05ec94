// measure_ceilings (perf/ceilings.h): copy bandwidth and cuBLASLt BF16 / FP8 GEMM rates on the device in hand.
#include <cublasLt.h>

#include <algorithm>
#include <vector>

#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "cuda/cuda_common.h"
#include "perf/ceilings.h"

namespace dsinfer::perf {

namespace {

constexpr int kWarm = 3, kRuns = 10;
constexpr int64_t kGemm = 8192;

// Owned device allocations of one measurement.
struct Buffers {
  std::vector<void*> ptrs;
  ~Buffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  Result<void*> alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::errorf("ceilings: cudaMalloc of {} MiB for the {} failed: {}", bytes >> 20, what,
                            cudaGetErrorString(e));
    }
    ptrs.push_back(p);
    return p;
  }
};

// Median time in seconds of `run` (kRuns after kWarm), timed one by one with events on the default stream.
template <typename F>
Result<double> median_s(F&& run) {
  cudaEvent_t a = nullptr, b = nullptr;
  DSI_CUDA_TRY(cudaEventCreate(&a));
  DSI_CUDA_TRY(cudaEventCreate(&b));
  std::vector<float> ms;
  Status st;
  for (int i = 0; i < kWarm + kRuns && st.is_ok(); ++i) {
    cudaEventRecord(a);
    st = run();
    cudaEventRecord(b);
    if (st.is_ok()) st = cuda::cuda_status(cudaEventSynchronize(b), "ceilings: event", __FILE__, __LINE__);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    if (i >= kWarm) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  DSI_RETURN_IF_ERROR(st);
  std::sort(ms.begin(), ms.end());
  return double(ms[ms.size() / 2]) * 1e-3;
}

// One cuBLASLt GEMM D[n, n] = A^T B ("TN", the layout FP8 needs), bf16 out, fp32 accumulation.
Result<double> gemm_flops(cublasLtHandle_t h, bool fp8, Buffers& buf) {
  const int64_t n = kGemm;
  const size_t elems = size_t(n * n), in_bytes = elems * (fp8 ? 1 : 2), ws_bytes = size_t(64) << 20;
  DSI_ASSIGN_OR_RETURN(void* A, buf.alloc(in_bytes, "GEMM A"));
  DSI_ASSIGN_OR_RETURN(void* B, buf.alloc(in_bytes, "GEMM B"));
  DSI_ASSIGN_OR_RETURN(void* D, buf.alloc(elems * 2, "GEMM D"));
  DSI_ASSIGN_OR_RETURN(void* ws, buf.alloc(ws_bytes, "cuBLASLt workspace"));
  DSI_ASSIGN_OR_RETURN(void* scale, buf.alloc(sizeof(float), "FP8 scale"));
  const float one = 1.0f;
  DSI_CUDA_TRY(cudaMemcpy(scale, &one, sizeof one, cudaMemcpyHostToDevice));
  // Random operands, never zeros (a GEMM on zeros runs faster than on data): bf16 uniform in [-1, 1], e4m3 codes
  // with |value| <= 1.875.
  ops::cuda::DummySpec spec;
  spec.fill = fp8 ? ops::cuda::DummyFill::Fp8Codes : ops::cuda::DummyFill::Uniform;
  spec.bf16 = true;
  spec.spread = 1.0f;
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(A, elems, spec, 11, nullptr));
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(B, elems, spec, 12, nullptr));
  const cudaDataType ab = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto release = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
  };
  const char* kind = fp8 ? "FP8" : "BF16";
  if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
    release();
    return Status::errorf("ceilings: cuBLASLt {} matmul descriptor failed", kind);
  }
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (fp8) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale);
  }
  cublasLtMatrixLayoutCreate(&la, ab, uint64_t(n), uint64_t(n), n);
  cublasLtMatrixLayoutCreate(&lb, ab, uint64_t(n), uint64_t(n), n);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, uint64_t(n), uint64_t(n), n);
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    release();
    return Status::errorf("ceilings: no cuBLASLt {} algorithm for {}^3 (status {})", kind, n, int(hs));
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto t = median_s([&]() -> Status {
    if (cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws, ws_bytes, nullptr) !=
        CUBLAS_STATUS_SUCCESS)
      return Status::errorf("ceilings: cuBLASLt {} matmul failed", kind);
    return Status::ok();
  });
  release();
  DSI_RETURN_IF_ERROR(t.status());
  return 2.0 * double(n) * double(n) * double(n) / *t;
}

}  // namespace

Result<Ceilings> measure_ceilings() {
  Ceilings c;
  c.source = "measured";
  {
    Buffers buf;
    const size_t bytes = size_t(1) << 30;
    DSI_ASSIGN_OR_RETURN(void* src, buf.alloc(bytes, "copy source"));
    DSI_ASSIGN_OR_RETURN(void* dst, buf.alloc(bytes, "copy destination"));
    ops::cuda::DummySpec spec;
    DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(src, bytes / 4, spec, 7, nullptr));
    DSI_ASSIGN_OR_RETURN(const double t, median_s([&] {
                           return cuda::cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice),
                                                    "ceilings: device copy", __FILE__, __LINE__);
                         }));
    c.hbm_bytes_per_s = 2.0 * double(bytes) / t;
  }
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return Status::error("ceilings: cublasLtCreate failed");
  // Each GEMM frees its buffers before the next allocates.
  auto rate = [&](bool fp8) {
    Buffers buf;
    return gemm_flops(h, fp8, buf);
  };
  Result<double> bf16 = rate(false);
  Result<double> fp8 = bf16.is_ok() ? rate(true) : Result<double>(bf16.status());
  cublasLtDestroy(h);
  DSI_RETURN_IF_ERROR(bf16.status());
  DSI_RETURN_IF_ERROR(fp8.status());
  c.bf16_flops = *bf16;
  c.fp8_flops = *fp8;
  return c;
}

}  // namespace dsinfer::perf
