// CPU reference compressor (see compressor.h), following the official state machine (model.py Compressor).
#include "ops/compressor/compressor.h"

#include <cmath>
#include <limits>

namespace dsinfer::ops {

void CompressorState::reset(const CompressorParams& p) {
  const size_t n = size_t(p.c() * p.m * p.c() * p.d);
  kv.assign(n, 0.0f);
  score.assign(n, -std::numeric_limits<float>::infinity());
}

bool compressor_step_ref(const CompressorParams& p, CompressorState& s, const float* kv_t, const float* gate_t,
                         int64_t pos, float* out) {
  const int64_t c = p.c(), w = c * p.d, slot = pos % p.m;
  const int64_t row = (p.overlap ? p.m : 0) + slot;
  for (int64_t i = 0; i < w; ++i) {
    s.kv[size_t(row * w + i)] = kv_t[i];
    s.score[size_t(row * w + i)] = gate_t[i] + p.ape[slot * w + i];
  }
  if ((pos + 1) % p.m != 0) return false;
  const int64_t slots = c * p.m;
  for (int64_t ch = 0; ch < p.d; ++ch) {
    // Slot r < m of a CSA window reads the first half [0,d) of the previous window's rows; the rest read
    // the second half [d,2d) (or the only half for HCA).
    auto col = [&](int64_t r) { return r * w + ((p.overlap && r >= p.m) ? p.d : 0) + ch; };
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < slots; ++r) mx = std::fmax(mx, s.score[size_t(col(r))]);
    double den = 0.0, num = 0.0;
    for (int64_t r = 0; r < slots; ++r) {
      float sc = s.score[size_t(col(r))];
      if (sc == -std::numeric_limits<float>::infinity()) continue;
      double e = std::exp(double(sc) - double(mx));
      den += e;
      num += e * double(s.kv[size_t(col(r))]);
    }
    out[ch] = float(num / den);
  }
  if (p.overlap)  // the current window becomes the next entry's previous window
    for (int64_t i = 0; i < p.m * w; ++i) {
      s.kv[size_t(i)] = s.kv[size_t(p.m * w + i)];
      s.score[size_t(i)] = s.score[size_t(p.m * w + i)];
    }
  return true;
}

}  // namespace dsinfer::ops
