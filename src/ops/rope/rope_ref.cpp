// CPU reference RoPE (see rope.h). Frequencies and angles are rounded to fp32 exactly where transformers
// rounds them, so positions in the thousands still agree with the HF reference to ~1e-7.
#include "ops/rope/rope.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::ops {

std::vector<float> rope_inv_freq(const io::RopeParams& p, int64_t rope_dim) {
  const int64_t half = rope_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    float expo = float(2 * i) / float(rope_dim);
    float pos_freq = float(std::pow(double(float(p.theta)), double(expo)));
    inv[size_t(i)] = 1.0f / pos_freq;
  }
  if (!p.yarn) return inv;
  // YaRN: frequency i keeps its value below `low`, is divided by `factor` above `high`, linear blend between.
  auto corr_dim = [&](double rot) {
    return double(rope_dim) * std::log(double(p.original_max_position_embeddings) / (rot * 2 * M_PI)) /
           (2 * std::log(p.theta));
  };
  double low = std::max(std::floor(corr_dim(p.beta_fast)), 0.0);
  double high = std::min(std::ceil(corr_dim(p.beta_slow)), double(rope_dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    float ramp = std::clamp(float((float(i) - float(low)) / float(high - low)), 0.0f, 1.0f);
    float extrap_factor = 1.0f - ramp;
    float interp = 1.0f / (float(p.factor) * (1.0f / inv[size_t(i)]));
    inv[size_t(i)] = interp * (1.0f - extrap_factor) + inv[size_t(i)] * extrap_factor;
  }
  return inv;
}

void rope_apply_ref(float* x, int64_t dim, int64_t rope_dim, const std::vector<float>& inv_freq, int64_t pos,
                    bool inverse, float attention_factor) {
  float* r = x + (dim - rope_dim);
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    float angle = inv_freq[size_t(i)] * float(pos);  // fp32 product, as transformers computes it
    float c = float(std::cos(double(angle))) * attention_factor;
    float s = float(std::sin(double(angle))) * attention_factor;
    if (inverse) s = -s;
    float re = r[2 * i], im = r[2 * i + 1];
    r[2 * i] = re * c - im * s;
    r[2 * i + 1] = re * s + im * c;
  }
}

}  // namespace dsinfer::ops
