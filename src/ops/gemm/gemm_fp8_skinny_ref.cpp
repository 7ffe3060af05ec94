// Host references of the FP8 skinny wgmma GEMM (gemm_fp8_skinny_ref.h).
#include "ops/gemm/gemm_fp8_skinny_ref.h"

#include "core/small_float.h"
#include "ops/gemm/gemm_fp8_skinny_launch.h"
#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::gemm_fp8sk {

namespace {
namespace lt = dsinfer::ops::gemm_lt;
// One group's x columns quantized row-major by the cuBLASLt engine's reference: q [M, K], s [M, K / 128] per term.
struct Terms {
  std::vector<uint8_t> q, q2;
  std::vector<float> s, s2;
};
Terms quantize_group(const float* x, int64_t M, int64_t ldx, int64_t K, int terms) {
  Terms t;
  t.q.assign(size_t(M * K), 0);
  t.q2.assign(size_t(M * K), 0);
  t.s.assign(size_t(M * (K / 128)), 0.0f);
  t.s2.assign(size_t(M * (K / 128)), 0.0f);
  lt::quantize_ref(x, M, ldx, K, t.q.data(), t.s.data(), terms == 2 ? t.q2.data() : nullptr,
                   terms == 2 ? t.s2.data() : nullptr);
  return t;
}
double e4m3(uint8_t c) { return double(small_float::from_bits(small_float::e4m3_f32_bits(c))); }
}  // namespace

void quantize_ref(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, int64_t groups, int64_t K, int terms,
                  int tok, int units, std::vector<uint8_t>& q, std::vector<float>& s) {
  const int64_t rows = int64_t(units) * terms * tok, kt = groups * K, kbg = K / 128;
  q.assign(size_t(rows * kt), 0);
  s.assign(size_t(kt / 128 * rows), 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const Terms t = quantize_group(x + g * x_gstride, M, ldx, K, terms);
    for (int64_t m = 0; m < M; ++m)
      for (int term = 0; term < terms; ++term) {
        const int64_t r = ops::cuda::detail::fp8sk_row(m, term, terms, tok);
        const std::vector<uint8_t>& tq = term == 0 ? t.q : t.q2;
        const std::vector<float>& ts = term == 0 ? t.s : t.s2;
        for (int64_t k = 0; k < K; ++k) q[size_t(r * kt + g * K + k)] = tq[size_t(m * K + k)];
        for (int64_t b = 0; b < kbg; ++b) s[size_t((g * kbg + b) * rows + r)] = ts[size_t(m * kbg + b)];
      }
  }
}

std::vector<double> gemm_ref(const float* x, int64_t M, int64_t ldx, int64_t x_gstride, int64_t groups, int64_t N,
                             int64_t K, const uint8_t* w, const void* wscale, bool e8m0, int terms,
                             int64_t row_step) {
  const int64_t kbg = K / 128, nt = groups * N;
  std::vector<double> y(size_t(M * nt), 0.0), x1(size_t(M * K)), x2(size_t(M * K)), wv(static_cast<size_t>(K));
  for (int64_t g = 0; g < groups; ++g) {
    const Terms t = quantize_group(x + g * x_gstride, M, ldx, K, terms);
    for (size_t i = 0; i < x1.size(); ++i) {  // the codes' e4m3 values (the scales are applied per block below)
      x1[i] = e4m3(t.q[i]);
      x2[i] = e4m3(t.q2[i]);
    }
    for (int64_t n = 0; n < N; n += row_step) {
      const int64_t row = g * N + n;
      for (int64_t k = 0; k < K; ++k) wv[size_t(k)] = e4m3(w[row * K + k]);
      for (int64_t m = 0; m < M; ++m) {
        double acc = 0.0;
        for (int64_t b = 0; b < kbg; ++b) {
          const int64_t j = row / 128 * kbg + b;
          const double ws = e8m0 ? double(small_float::from_bits(
                                       small_float::e8m0_f32_bits(static_cast<const uint8_t*>(wscale)[j])))
                                 : double(static_cast<const float*>(wscale)[j]);
          double p1 = 0.0, p2 = 0.0;
          const double* a1 = x1.data() + m * K + b * 128;
          const double* a2 = x2.data() + m * K + b * 128;
          const double* wb = wv.data() + b * 128;
          for (int64_t k = 0; k < 128; ++k) {
            p1 += wb[k] * a1[k];
            p2 += wb[k] * a2[k];  // zero codes with one term
          }
          acc += ws * (p1 * double(t.s[size_t(m * kbg + b)]) + p2 * double(t.s2[size_t(m * kbg + b)]));
        }
        y[size_t(m * nt + row)] = acc;
      }
    }
  }
  return y;
}

}  // namespace dsinfer::ops::gemm_fp8sk
