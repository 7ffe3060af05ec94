// ops/csa2/torch_topk.h (libstdc++'s partial_sort / nth_element written out, which the GPU runs for the official
// indexer selection) against ops::torch_cpu_topk (the standard library itself): the same set of indices on inputs
// full of exact ties, as bf16 scores are, on both of torch's branches (k * 64 <= n: partial_sort; else nth_element)
// and on sorted, reversed and constant rows (the partition's edge cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/csa2/csa2.h"
#include "ops/csa2/torch_topk.h"

using namespace dsinfer;

namespace {

std::vector<int32_t> ported(const std::vector<float>& v, int64_t k) {
  std::vector<ops::torch_topk::Pair> q;
  for (size_t i = 0; i < v.size(); ++i) q.push_back({v[i], int32_t(i)});
  const int64_t m = ops::torch_topk::select(q.data(), int64_t(q.size()), k);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < m; ++i) out.push_back(q[size_t(i)].i);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> reference(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> out = ops::torch_cpu_topk(v, k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(TorchTopk, SameSetAsTheStandardLibraryOnTiedRows) {
  std::mt19937 rng(7);
  int64_t rows = 0, other_rule_differs = 0;
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 33, 64, 65, 127, 300, 1000, 4099}) {
    for (int levels : {1, 2, 3, 8, 50}) {
      std::uniform_int_distribution<int> pick(0, levels - 1);
      for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), n / 64, n / 8, n / 2, n - 1, n, n + 3}) {
        if (k < 0) continue;
        for (int rep = 0; rep < 3; ++rep) {
          std::vector<float> v(static_cast<size_t>(n));
          for (float& x : v) x = float(pick(rng)) * 0.25f;
          if (rep == 1 && n > 2) v[size_t(n / 2)] = -std::numeric_limits<float>::infinity();
          if (rep == 2 && levels % 2) std::sort(v.begin(), v.end());
          if (rep == 2 && levels % 2 == 0) std::sort(v.begin(), v.end(), std::greater<float>());
          const auto want = reference(v, k);
          ASSERT_EQ(ported(v, k), want) << "n " << n << " k " << k << " levels " << levels << " rep " << rep;
          ++rows;
          std::vector<int32_t> order(static_cast<size_t>(n));  // the other tie rule: lower index first
          for (int64_t i = 0; i < n; ++i) order[size_t(i)] = int32_t(i);
          std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
          order.resize(size_t(std::min(k, n)));
          std::sort(order.begin(), order.end());
          other_rule_differs += order != want;
        }
      }
    }
  }
  // The tie order decides the set often (this is what the lower-index rule of the hf selection would get wrong).
  EXPECT_GT(other_rule_differs, rows / 10) << rows << " rows";
}
