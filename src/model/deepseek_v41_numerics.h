// Arithmetic of the DeepSeek-V4.1 CPU reference under the two numerics it reproduces (research/dsv41-
// architecture.md §2.8): transformers (fp32 everywhere except the model's QAT quantizers; computed here with fp64
// accumulation over fp32 storage) and the official inference code (bf16 activations, FP8 1x32 activation
// quantization before every FP8/FP4 GEMM with fp32 partial sums per 32-wide K block added in K order, bf16
// GEMMs for bf16 weights, fp32 where the official code upcasts). `Num` is the one place that knows the rounding
// points; the forward calls it at every op boundary.
#pragma once
#include <cstdint>
#include <vector>

#include "io/config.h"
#include "model/numerics.h"
#include "model/weights.h"

namespace dsinfer::model::v41 {

// How the official code multiplies by a weight: FP8 / FP4 kernels (activation quantized per 1x32, bf16 out), a
// bf16 matmul (bf16 out) or an fp32 matmul (fp32 out).
enum class Gemm { FP8, FP4, BF16, F32 };

struct Num {
  bool qat = true;       // the model's QAT quantizers (window KV, compressed KV, indexer q/k)
  bool official = false; // official rounding points (bf16 activations, activation quantization)
  static Num from(const Numerics& n) { return {n.qat_sim, n.bf16_activations}; }

  // Rounds to bf16 where the official code stores a bf16 tensor (no-op for transformers numerics).
  void round(float* x, int64_t n) const;
  void round(std::vector<float>& x) const { round(x.data(), int64_t(x.size())); }
  // y [T, out] = x [T, in] . w^T with the semantics of `g`; y must not alias x.
  void linear(Gemm g, const float* x, int64_t T, int64_t in, const Mat& w, float* y) const {
    linear(g, x, T, in, w.p(), w.rows, y);
  }
  // The same with w [rows, in] anywhere (a block of a weight's rows: a rank's query heads).
  void linear(Gemm g, const float* x, int64_t T, int64_t in, const float* w, int64_t rows, float* y) const;
  void linear(Gemm g, const std::vector<float>& x, int64_t T, const Mat& w, std::vector<float>& y) const {
    y.resize(size_t(T * w.rows));
    linear(g, x.data(), T, w.cols, w, y.data());
  }
  // Weighted RMSNorm (official: fp32 math, bf16 result).
  void rmsnorm(float* x, int64_t rows, int64_t dim, const float* w, float eps) const;
  // RoPE on the trailing rd channels (official: fp32 complex product stored back to bf16).
  void rope(float* x, int64_t dim, int64_t rd, const std::vector<float>& inv_freq, int64_t pos, bool inverse) const;
  // Inverse frequencies as transformers (HF) or the official precompute_freqs_cis computes them.
  std::vector<float> inv_freq(const io::RopeParams& p, int64_t rd) const;
  // QAT quantizers (no-ops when qat is off).
  void fp8_qat(float* x, int64_t n) const;
  void fp4_qat(float* x, int64_t n, int64_t block, bool e4m3_scale) const;
};

}  // namespace dsinfer::model::v41
