// CPU reference of the FP8 grouped MoE path (see moe_fp8.h).
#include "ops/moe/moe_fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/dtypes.h"
#include "ops/moe/moe_fp8_common.h"

namespace dsinfer::ops {

namespace md = moe_detail;

void quantize_e4m3_ref(const float* x, int64_t n, int64_t block, uint8_t* q, float* s, uint8_t* lo) {
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
    s[b] = amax / 448.0f;
    for (int64_t i = 0; i < block; ++i) {
      const float v = xb[i] * inv;
      q[b * block + i] = f32_to_e4m3(v);
      if (lo) lo[b * block + i] = f32_to_e4m3(v - e4m3_to_f32(q[b * block + i]));
    }
  }
}

Fp8Weight expand_fp4_weight_ref(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                int64_t block) {
  Fp8Weight w;
  w.rows = rows;
  w.cols = cols;
  w.block = block;
  w.q.resize(size_t(rows * cols));
  w.s.resize(size_t(rows * (cols / block)));
  const int64_t groups = block / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / block; ++b) {
      const uint8_t* sc = scales + r * (cols / 32) + groups * b;
      const int m = *std::max_element(sc, sc + groups);
      const uint32_t bits = md::fp8_block_scale_bits(uint32_t(m));
      float f = 0.0f;
      std::memcpy(&f, &bits, 4);
      w.s[size_t(r * (cols / block) + b)] = f;
      for (int64_t i = 0; i < block; ++i) {
        const int64_t k = b * block + i;
        const uint32_t c = (codes[(r * cols + k) / 2] >> (4 * (k & 1))) & 15u;
        w.q[size_t(r * cols + k)] = uint8_t(md::fp4_code_e4m3(c, int(sc[i / 32]) - m));
      }
    }
  return w;
}

double fp8_dot_ref(const uint8_t* qa, const uint8_t* qa_lo, const float* sa, const uint8_t* qb, const float* sb,
                   int64_t n, int64_t block) {
  static const std::array<double, 256> lut = [] {
    std::array<double, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = double(e4m3_to_f32(uint8_t(c)));
    return t;
  }();
  double acc = 0.0;
  for (int64_t b = 0; b < n / block; ++b) {
    double blk = 0.0;
    for (int64_t i = b * block; i < (b + 1) * block; ++i)
      blk += (lut[qa[i]] + (qa_lo ? lut[qa_lo[i]] : 0.0)) * lut[qb[i]];
    acc += blk * double(sa[b] * sb[b]);
  }
  return acc;
}

void expert_fp8_accumulate_ref(const ExpertFp8Params& p, const float* x, float scale, double* out) {
  const int64_t D = p.w1->cols, I = p.w1->rows, bx = p.w1->block, bh = p.w2->block;
  const auto d = static_cast<size_t>(D), i = static_cast<size_t>(I);
  std::vector<uint8_t> xq(d), xl(d), hq(i), hl(i);
  std::vector<float> xs(static_cast<size_t>(D / bx)), hs(static_cast<size_t>(I / bh)), h(i);
  const uint8_t* xlo = p.x_terms > 1 ? xl.data() : nullptr;
  const uint8_t* hlo = p.h_terms > 1 ? hl.data() : nullptr;
  quantize_e4m3_ref(x, D, bx, xq.data(), xs.data(), xl.data());
  for (int64_t j = 0; j < I; ++j) {
    const float* s1 = p.w1->s.data() + j * (D / bx);
    const float* s3 = p.w3->s.data() + j * (D / bx);
    float g = float(fp8_dot_ref(xq.data(), xlo, xs.data(), p.w1->q.data() + j * D, s1, D, bx));
    float u = float(fp8_dot_ref(xq.data(), xlo, xs.data(), p.w3->q.data() + j * D, s3, D, bx));
    if (p.bf16_out) {
      g = round_bf16(g);
      u = round_bf16(u);
    }
    if (p.limit > 0.0f) {
      g = std::min(g, p.limit);
      u = std::min(std::max(u, -p.limit), p.limit);
    }
    h[size_t(j)] = g / (1.0f + std::exp(-g)) * u;
  }
  quantize_e4m3_ref(h.data(), I, bh, hq.data(), hs.data(), hl.data());
  for (int64_t d = 0; d < D; ++d) {
    const float* s2 = p.w2->s.data() + d * (I / bh);
    float y = float(fp8_dot_ref(hq.data(), hlo, hs.data(), p.w2->q.data() + d * I, s2, I, bh));
    if (p.bf16_out) y = round_bf16(y);
    out[d] += double(scale) * double(y);
  }
}

}  // namespace dsinfer::ops
