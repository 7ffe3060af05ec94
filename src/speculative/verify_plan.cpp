// The confidence schedule against the step cost (see verify_plan.h).
#include "speculative/verify_plan.h"

#include <algorithm>
#include <vector>

namespace dsinfer::speculative {

VerifyChoice best_verify_length(std::span<const std::vector<float>> survival, int64_t num_seqs,
                                const StepCostModel& cost) {
  size_t longest = 0;
  for (const auto& a : survival) longest = std::max(longest, a.size());
  const int64_t n = std::max<int64_t>(num_seqs, int64_t(survival.size()));
  double tokens = double(n);  // every sequence's anchor token
  VerifyChoice best{0, tokens / cost.round_ms(n, 1, tokens)};
  for (size_t L = 1; L <= longest; ++L) {
    for (const auto& a : survival)
      if (L <= a.size()) tokens += double(a[L - 1]);
    const double rate = tokens / cost.round_ms(n, int32_t(1 + L), tokens);
    if (rate > best.tokens_per_ms) best = {int32_t(L), rate};
  }
  return best;
}

bool drafting_pays(std::span<const double> mean_survival, int64_t num_seqs, const StepCostModel& cost,
                   double margin) {
  const int64_t n = std::max<int64_t>(num_seqs, 1);
  const double off = (1.0 + margin) * double(n) / cost.plain_ms(n);  // the engine's plain step (device sampling)
  double tokens = double(n);
  for (size_t L = 1; L <= mean_survival.size(); ++L) {
    tokens += double(n) * mean_survival[L - 1];
    if (tokens / cost.round_ms(n, int32_t(1 + L), tokens) > off) return true;
  }
  return false;
}

double break_even_acceptance(size_t positions, int64_t num_seqs, const StepCostModel& cost, double margin) {
  auto pays_at = [&](double p) {
    std::vector<double> a(positions);
    double s = 1.0;
    for (double& x : a) x = s *= p;
    return drafting_pays(a, num_seqs, cost, margin);
  };
  if (positions == 0 || !pays_at(1.0)) return 1.0;
  double lo = 0.0, hi = 1.0;  // pays_at(hi) holds; the expected tokens grow with p, so the set where it pays is (p*, 1]
  while (hi - lo > 1e-4) {
    const double m = 0.5 * (lo + hi);
    (pays_at(m) ? hi : lo) = m;
  }
  return lo;
}

}  // namespace dsinfer::speculative
