// CPU reference Engram hashing and gate (see engram.h), following transformers' EngramLayout,
// NgramHashState and DeepseekV41Engram (identical to the official engram.py / Engram).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "ops/engram/engram.h"

namespace dsinfer::ops {

namespace {
bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}
}  // namespace

EngramHashLayout make_engram_hash_layout(const std::vector<int64_t>& layer_ids, int64_t max_ngram, int64_t heads,
                                         int64_t vocab_size, int64_t compressed_vocab, int64_t pad_id) {
  EngramHashLayout L;
  L.max_ngram = max_ngram;
  L.heads = heads;
  L.pad_id = pad_id;
  std::set<int64_t> seen;
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab) / 2);
  for (int64_t layer : layer_ids) {
    std::vector<int64_t> primes, offsets;
    for (int64_t n = 2; n <= max_ngram; ++n) {
      int64_t cur = vocab_size - 1;
      for (int64_t h = 0; h < heads; ++h) {
        do ++cur;
        while (!is_prime(cur) || seen.count(cur));
        seen.insert(cur);
        primes.push_back(cur);
      }
    }
    int64_t total = 0;
    for (int64_t p : primes) {
      offsets.push_back(total);
      total += p;
    }
    std::vector<int64_t> mult = numpy_rng_integers(uint64_t(10007 * layer), bound, max_ngram);
    for (auto& m : mult) m = 2 * m + 1;
    L.primes.push_back(primes);
    L.offsets.push_back(offsets);
    L.multipliers.push_back(mult);
  }
  return L;
}

void engram_hash_ref(const EngramHashLayout& L, int64_t layer, const int64_t* tok, int64_t* out) {
  const auto& mult = L.multipliers[size_t(layer)];
  const auto& primes = L.primes[size_t(layer)];
  const auto& offsets = L.offsets[size_t(layer)];
  bool blocked = false;
  int64_t roll = 0;
  for (int64_t s = 0; s < L.max_ngram; ++s) {
    blocked = blocked || tok[s] < 0;
    const int64_t t = blocked ? L.pad_id : tok[s];
    const int64_t prod = t * mult[size_t(s)];  // < 2^63 by the multiplier bound
    roll = s == 0 ? prod : (roll ^ prod);
    if (s == 0) continue;
    for (int64_t h = 0; h < L.heads; ++h) {
      const int64_t col = (s - 1) * L.heads + h;
      out[col] = roll % primes[size_t(col)] + offsets[size_t(col)];
    }
  }
}

void engram_gate_ref(const EngramGateParams& p, float* x, const float* key, const float* value, bool live) {
  if (!live) return;
  const double inv_sqrt_dim = 1.0 / std::sqrt(double(p.dim));
  for (int64_t k = 0; k < p.n; ++k) {
    float* xk = x + k * p.dim;
    const float* kk = key + k * p.dim;
    const float* wk = p.weight + k * p.dim;
    double sx = 0, sk = 0, dot = 0;
    for (int64_t d = 0; d < p.dim; ++d) {
      sx += double(xk[d]) * double(xk[d]);
      sk += double(kk[d]) * double(kk[d]);
      dot += double(xk[d]) * double(wk[d]) * double(kk[d]);
    }
    const double rstd = 1.0 / std::sqrt(sx / double(p.dim) + double(p.eps)) / std::sqrt(sk / double(p.dim) + double(p.eps));
    const double g = dot * rstd * inv_sqrt_dim;
    const double sq = std::sqrt(std::max(std::fabs(g), 1e-6));
    const double gate = 1.0 / (1.0 + std::exp(-std::copysign(sq, g)));
    for (int64_t d = 0; d < p.dim; ++d) xk[d] = float(double(xk[d]) + gate * double(value[d]));
  }
}

}  // namespace dsinfer::ops
