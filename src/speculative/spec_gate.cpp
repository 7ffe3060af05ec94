// SpecGate (see spec_gate.h).
#include "speculative/spec_gate.h"

#include <algorithm>

#include "speculative/verify_plan.h"

namespace dsinfer::speculative {

SpecGate::SpecGate(size_t positions, int64_t resume_steps)
    : reached_(positions, 0.0), accepted_(positions, 0.0), resume_steps_(std::max<int64_t>(resume_steps, 0)) {}

void SpecGate::observe(int32_t verified, int32_t accepted) {
  const size_t n = std::min(reached_.size(), size_t(std::max(verified, 0)));
  for (size_t k = 0; k < n && int32_t(k) <= accepted; ++k) {
    reached_[k] += 1.0;
    if (int32_t(k) < accepted) accepted_[k] += 1.0;
  }
  if (n > 0 && probe_rounds_ > 0) --probe_rounds_;
  if (n > 0 && probe_rounds_ == 0) probe_left_ = 0;  // a probe ends with its kProbeRounds-th observed round
}

void SpecGate::observe_expected(std::span<const float> a, size_t from) {
  const size_t n = std::min(reached_.size(), a.size());
  for (size_t k = from; k < n; ++k) {
    reached_[k] += k == 0 ? 1.0 : double(a[k - 1]);
    accepted_[k] += double(a[k]);
  }
  if (from < n) {  // the probe's round is the head's estimate
    probe_left_ = 0;
    probe_rounds_ = 0;
  }
}

std::vector<double> SpecGate::survival(double prior) const {
  std::vector<double> a;
  double s = 1.0;
  for (size_t k = 0; k < reached_.size(); ++k) {
    s *= (accepted_[k] + kPriorRounds * prior) / (reached_[k] + kPriorRounds);
    a.push_back(s);
  }
  return a;
}

double SpecGate::prior(int64_t n, const StepCostModel& cost) const {
  if (cost.empty()) return kPriorAcceptance;
  n = std::max<int64_t>(n, 1);
  return std::min(kPriorAcceptance, break_even_acceptance(reached_.size(), n, cost, cost.draft_ms(n), kMargin));
}

bool SpecGate::pays(int64_t n, const StepCostModel& cost) const {
  return drafting_pays(survival(prior(n, cost)), n, cost, cost.draft_ms(n), kMargin);
}

double SpecGate::probe_price(int64_t n, const StepCostModel& cost) const {
  if (cost.empty() || reached_.empty()) return 0.0;
  n = std::max<int64_t>(n, 1);
  if (!drafting_pays(std::vector<double>(reached_.size(), 1.0), n, cost, cost.draft_ms(n), kMargin)) return 0.0;
  const double plain = cost.plain_ms(n);
  const double h = cost.host_row_ms() * double(n);
  const double catch_up = std::max(0.0, cost.step_ms(n, 1) + h + cost.draft_ms(n) - plain);
  const int32_t rows = 1 + int32_t(reached_.size());
  const double round = std::max(0.0, cost.draft_ms(n) + cost.step_ms(n, rows) + h - plain);
  return double(resume_steps_) * catch_up + 2.0 * round;
}

void SpecGate::add_credit(double ms, int64_t n, const StepCostModel& cost) {
  credit_ = std::min(credit_ + ms, probe_price(n, cost));
}

void SpecGate::rest_step(int64_t n, const StepCostModel& cost) {
  ++rest_steps_;
  if (!cost.empty() && n > 0) add_credit(kExploreShare * cost.plain_ms(n), n, cost);
}

void SpecGate::spent(int64_t n, int32_t rows, int64_t tokens, const StepCostModel& cost) {
  if (cost.empty() || n <= 0) return;
  const double round = cost.step_ms(n, std::max(rows, 1)) + cost.host_row_ms() * double(tokens) + cost.draft_ms(n);
  add_credit(double(tokens) * cost.plain_ms(n) / double(n) - round, n, cost);
}

void SpecGate::begin_speculative_step(int64_t n, const StepCostModel& cost) {
  if ((rest_steps_ > 0 || !explored_) && !cost.empty() && !pays(n, cost)) {
    // A probe (the first speculative step, or the credit let the engine leave rest): the old rounds keep
    // kProbeMemory rounds' weight at most.
    for (size_t k = 0; k < reached_.size(); ++k) {
      const double f = reached_[k] > kProbeMemory ? kProbeMemory / reached_[k] : 1.0;
      reached_[k] *= f;
      accepted_[k] *= f;
    }
    ++probes_;
    probe_left_ = resume_steps_ + 1 + int64_t(kProbeRounds);
    probe_rounds_ = int64_t(kProbeRounds);
  }
  if (probe_left_ > 0) --probe_left_;
  rest_steps_ = 0;
  explored_ = true;
  for (size_t k = 0; k < reached_.size(); ++k) {
    reached_[k] *= kMemoryFade;
    accepted_[k] *= kMemoryFade;
  }
}

bool SpecGate::should_draft(int64_t n, const StepCostModel& cost) const {
  if (cost.empty() || probe_left_ > 0 || pays(n, cost)) return true;
  const double price = probe_price(n, cost);
  if (price <= 0.0) return false;
  // A fresh gate's first probe is free only where the prior's ceiling would pay (the old gate drafted there from the
  // start): at batch 64 on the H200 a first-step probe of 64 sequences staggered the batch (0.81x off, session 17).
  if (!explored_ && drafting_pays(survival(kPriorAcceptance), n, cost, cost.draft_ms(n), kMargin)) return true;
  return credit_ >= price;
}

}  // namespace dsinfer::speculative
