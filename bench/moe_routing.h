// Random top-k routing for the MoE benches (moe_bench, moe_cutlass_bench): k distinct experts of E per token,
// drawn by a xorshift64 generator the caller seeds, so a bench's runs route the same tokens the same way.
#pragma once
#include <cstdint>
#include <set>
#include <vector>

namespace dsinfer::bench {

// [T * k] expert ids, token-major; the distinct experts also go into *distinct when it is given.
inline std::vector<int32_t> random_routing(int64_t T, int64_t k, int64_t E, uint64_t& rng,
                                           std::set<int32_t>* distinct = nullptr) {
  std::vector<int32_t> idx(size_t(T * k));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int32_t e;
      bool dup;
      do {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        e = int32_t(rng % uint64_t(E));
        dup = false;
        for (int64_t q = 0; q < j; ++q) dup |= idx[size_t(t * k + q)] == e;
      } while (dup);
      idx[size_t(t * k + j)] = e;
      if (distinct) distinct->insert(e);
    }
  }
  return idx;
}

}  // namespace dsinfer::bench
