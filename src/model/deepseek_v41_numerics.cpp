// DeepSeek-V4.1 numerics (see deepseek_v41_numerics.h).
#include "model/deepseek_v41_numerics.h"

#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "ops/linear/linear.h"
#include "ops/qat/qat.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"

namespace dsinfer::model::v41 {

void Num::round(float* x, int64_t n) const {
  if (!official) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

namespace {

// Official FP8 / FP4 GEMM of one row: x quantized to e4m3 per 32 with a UE8M0 scale (act_quant), products summed
// per 32-wide K block (exact here in fp64, then rounded to fp32 as the kernel's block partial), scaled and added
// to the fp32 accumulator in K order, result rounded to bf16. `w` holds the dequantized weight, whose per-block
// scale is a power of two, so scaling the partial by it is exact.
void quantized_row(const float* x, int64_t in, const float* w, int64_t rows, float* y) {
  const int64_t nb = (in + 31) / 32;
  std::vector<float> q(static_cast<size_t>(in)), sa(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * 32, i1 = std::min(in, i0 + 32);
    float amax = 0.0f;
    for (int64_t i = i0; i < i1; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = ops::pow2_ceil_scale(std::fmax(amax, 1e-4f) * (1.0f / 448.0f));
    sa[size_t(b)] = s;
    for (int64_t i = i0; i < i1; ++i) q[size_t(i)] = round_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f));
  }
  for (int64_t o = 0; o < rows; ++o) {
    const float* wr = w + o * in;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      double part = 0.0;
      for (int64_t i = b * 32; i < std::min(in, b * 32 + 32); ++i) part += double(q[size_t(i)]) * double(wr[i]);
      acc += float(part) * sa[size_t(b)];
    }
    y[o] = round_bf16(acc);
  }
}

}  // namespace

void Num::linear(Gemm g, const float* x, int64_t T, int64_t in, const float* w, int64_t rows, float* y) const {
  if (!official || g == Gemm::F32) return ops::linear_ref(x, T, in, w, rows, y);
  if (g == Gemm::BF16) {
    ops::linear_ref(x, T, in, w, rows, y);
    round(y, T * rows);
    return;
  }
  for (int64_t t = 0; t < T; ++t) quantized_row(x + t * in, in, w, rows, y + t * rows);
}

void Num::rmsnorm(float* x, int64_t rows, int64_t dim, const float* w, float eps) const {
  ops::rmsnorm_ref(x, rows, dim, w, eps, x);
  round(x, rows * dim);
}

void Num::rope(float* x, int64_t dim, int64_t rd, const std::vector<float>& inv_freq, int64_t pos, bool inverse) const {
  ops::rope_apply_ref(x, dim, rd, inv_freq, pos, inverse);
  round(x + dim - rd, rd);
}

std::vector<float> Num::inv_freq(const io::RopeParams& p, int64_t rd) const {
  if (!official) return ops::rope_inv_freq(p, rd);
  // precompute_freqs_cis: freqs = 1 / base^(2i/d); YaRN blends freqs / factor and freqs with a linear ramp.
  std::vector<float> f(static_cast<size_t>(rd / 2));
  for (int64_t i = 0; i < rd / 2; ++i) f[size_t(i)] = 1.0f / std::pow(float(p.theta), float(2 * i) / float(rd));
  if (!p.yarn) return f;
  auto corr = [&](double rot) {
    return double(rd) * std::log(double(p.original_max_position_embeddings) / (rot * 2 * M_PI)) / (2 * std::log(p.theta));
  };
  const double low = std::max(std::floor(corr(p.beta_fast)), 0.0), high = std::min(std::ceil(corr(p.beta_slow)), double(rd - 1));
  for (int64_t i = 0; i < rd / 2; ++i) {
    const float ramp = std::clamp((float(i) - float(low)) / float(std::max(high - low, 1e-3)), 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    f[size_t(i)] = f[size_t(i)] / float(p.factor) * (1.0f - smooth) + f[size_t(i)] * smooth;
  }
  return f;
}

void Num::fp8_qat(float* x, int64_t n) const {
  if (qat) ops::fp8_qat_ref(x, n, 32);
}

void Num::fp4_qat(float* x, int64_t n, int64_t block, bool e4m3_scale) const {
  if (qat) ops::fp4_qat_ref(x, n, block, e4m3_scale);
}

}  // namespace dsinfer::model::v41
