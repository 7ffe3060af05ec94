// CPU reference compressor (see compressor.h), following the official pooling (model.py Compressor) over
// position-indexed frontier rows.
#include "ops/compressor/compressor.h"

#include <cmath>
#include <limits>
#include <vector>

namespace dsinfer::ops {

bool compressor_step_ref(const CompressorParams& p, float* frontier, const float* kv_t, const float* gate_t,
                         int64_t pos, float* out) {
  const int64_t cd = p.c() * p.d, slot = pos % p.m;
  float* row = frontier + (pos % p.frontier_rows) * p.row_width();
  for (int64_t i = 0; i < cd; ++i) {
    row[i] = kv_t[i];
    row[cd + i] = gate_t[i] + p.ape[slot * cd + i];
  }
  if ((pos + 1) % p.m != 0) return false;
  const int64_t w = pos / p.m;
  // Slots: (previous window's rows, first half) for CSA windows w >= 1, then the current window's rows
  // (second half for CSA, the only half for HCA).
  struct Slot {
    const float* row;
    int64_t half;
  };
  std::vector<Slot> slots;
  if (p.overlap && w > 0)
    for (int64_t i = 0; i < p.m; ++i) slots.push_back({frontier + (((w - 1) * p.m + i) % p.frontier_rows) * p.row_width(), 0});
  for (int64_t i = 0; i < p.m; ++i)
    slots.push_back({frontier + ((w * p.m + i) % p.frontier_rows) * p.row_width(), p.overlap ? p.d : 0});
  for (int64_t ch = 0; ch < p.d; ++ch) {
    float mx = -std::numeric_limits<float>::infinity();
    for (const Slot& s : slots) mx = std::fmax(mx, s.row[cd + s.half + ch]);
    double den = 0.0, num = 0.0;
    for (const Slot& s : slots) {
      const double e = std::exp(double(s.row[cd + s.half + ch]) - double(mx));
      den += e;
      num += e * double(s.row[s.half + ch]);
    }
    out[ch] = float(num / den);
  }
  return true;
}

}  // namespace dsinfer::ops
