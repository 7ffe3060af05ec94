// cuBLASLt side-by-side for bench/gemm_bench.cpp: y[M, N] = x[M, K] . W[N, K]^T as the column-major "TN" product
// D[N, M] = op(A)[N, K] . B[K, M] with A = W (transposed), B = x^T, D = y (fp32 or bf16 out).
//   Bf16:      W, x bf16.
//   Fp8Tensor: W, x e4m3 with one fp32 scale each (per-tensor scaling).
//   Fp8Block:  W e4m3 with 128x128 fp32 block scales (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F), x e4m3 with
//              1x128 fp32 scales (VEC128_32F): the DeepSeek recipe; cuBLAS >= 12.9 documents it for Hopper.
// init() returns false with the reason when cuBLASLt has no algorithm for the kind and shape (e.g. FP8 at M = 1);
// the bench then prints n/a. Times depend only on shapes, so the data and scale values are arbitrary.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace bench_lt {

enum class Kind { Bf16, Fp8Tensor, Fp8Block };

class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() { release(); }

  bool init(cublasLtHandle_t h, Kind kind, int64_t M, int64_t N, int64_t K, const void* w, const void* x, void* y,
            const float* w_scale, const float* x_scale, void* ws, size_t ws_bytes, std::string* why) {
    h_ = h;
    w_ = w;
    x_ = x;
    y_ = y;
    ws_ = ws;
    ws_bytes_ = ws_bytes;
    const bool fp8 = kind != Kind::Bf16;
    const cudaDataType ab = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    for (cudaDataType out : {CUDA_R_32F, CUDA_R_16BF}) {  // block-scaled FP8 may only offer bf16 output
      release();
      if (!ok(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc", why)) return false;
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
      cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
      if (fp8) {
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale);
      }
      if (kind == Kind::Fp8Block) {
        const cublasLtMatmulMatrixScale_t am = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                          bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        if (!ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am), "A scale mode", why) ||
            !ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm), "B scale mode", why))
          return false;
      }
      cublasLtMatrixLayoutCreate(&a_, ab, uint64_t(K), uint64_t(N), K);  // W row-major [N, K] = col-major K x N
      cublasLtMatrixLayoutCreate(&b_, ab, uint64_t(K), uint64_t(M), K);  // x row-major [M, K] = col-major K x M
      cublasLtMatrixLayoutCreate(&d_, out, uint64_t(N), uint64_t(M), N);  // y row-major [M, N] = col-major N x M
      cublasLtMatmulPreference_t pref = nullptr;
      cublasLtMatmulPreferenceCreate(&pref);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_, sizeof ws_bytes_);
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h_, op_, a_, b_, d_, d_, pref, 1, &res, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        algo_ = res.algo;
        ready_ = true;
        if (run(nullptr) && cudaDeviceSynchronize() == cudaSuccess) return true;  // a trial call: timing must not fail
        cudaGetLastError();
        if (why) *why = "cuBLASLt matmul failed on a trial call";
        continue;
      }
      if (why) *why = "no cuBLASLt algorithm (status " + std::to_string(int(st)) + ")";
    }
    release();
    return false;
  }

  bool run(cudaStream_t s) {
    const float alpha = 1.0f, beta = 0.0f;
    return ready_ && cublasLtMatmul(h_, op_, &alpha, w_, a_, x_, b_, &beta, y_, d_, y_, d_, &algo_, ws_, ws_bytes_, s) ==
                         CUBLAS_STATUS_SUCCESS;
  }

 private:
  static bool ok(cublasStatus_t st, const char* what, std::string* why) {
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    if (why) *why = std::string(what) + ": cuBLASLt status " + std::to_string(int(st));
    return false;
  }
  void release() {
    if (op_) cublasLtMatmulDescDestroy(op_);
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    op_ = nullptr;
    a_ = b_ = d_ = nullptr;
    ready_ = false;
  }

  cublasLtHandle_t h_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  const void *w_ = nullptr, *x_ = nullptr;
  void *y_ = nullptr, *ws_ = nullptr;
  size_t ws_bytes_ = 0;
  bool ready_ = false;
};

}  // namespace bench_lt
