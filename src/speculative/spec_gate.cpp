// SpecGate (see spec_gate.h).
#include "speculative/spec_gate.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "speculative/verify_plan.h"

namespace dsinfer::speculative {

namespace {

bool gate_log() {
  static const bool on = [] {
    const char* e = std::getenv("DSINFER_SPEC_GATE_LOG");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

}  // namespace

std::string SpecGate::explain(int64_t n, const StepCostModel& cost) const {
  if (cost.empty()) return "gate: no cost model (every draft verified)";
  n = std::max<int64_t>(n, 1);
  const double pr = prior(n, cost);
  const std::vector<double> a = survival(pr);
  std::string rounds, est;
  double tokens = double(n), best = double(n) / cost.round_ms(n, 1, tokens);
  int32_t best_l = 0;
  for (size_t L = 0; L <= a.size(); ++L) {
    if (L > 0) tokens += double(n) * a[L - 1];
    const double ms = cost.round_ms(n, int32_t(1 + L), tokens);
    rounds += fmt::format("{}{:.3f}", L ? " " : "", ms);
    if (L > 0) est += fmt::format("{}{:.3f}", L > 1 ? " " : "", a[L - 1]);
    if (tokens / ms > best) {
      best = tokens / ms;
      best_l = int32_t(L);
    }
  }
  const double off = double(n) / cost.plain_ms(n);
  return fmt::format(
      "gate n={}: plain {:.3f} ms, round ({}) by verify length 0..{}: {} ms; survival [{}] (prior {:.3f}, "
      "break-even {:.3f}, {} rounds); best L={} {:.3f} tok/ms = {:.3f}x plain (needs {:.2f}x): {}; credit {:.3f} of "
      "{:.3f} ms, {} probes, {} speculative steps, {} at rest",
      n, cost.plain_ms(n), cost.has_round_cost() ? "one-wait, measured" : "parts", a.size(), rounds, est, pr,
      break_even_acceptance(a.size(), n, cost, kMargin), use_warm() ? "warm" : "warm-up", best_l, best, best / off,
      1.0 + margin(), pays(n, cost) ? "drafts" : "rests", credit_, probe_price(n, cost), probes_, speculative_steps_,
      rest_steps_);
}

SpecGate::SpecGate(size_t positions, int64_t resume_steps, int64_t warmup_steps)
    : reached_(positions, 0.0),
      accepted_(positions, 0.0),
      early_reached_(positions, 0.0),
      early_accepted_(positions, 0.0),
      resume_steps_(std::max<int64_t>(resume_steps, 0)),
      warmup_steps_(std::max<int64_t>(warmup_steps, 0)) {}

void SpecGate::observe(int32_t verified, int32_t accepted, bool warm) {
  std::vector<double>& r = warm ? reached_ : early_reached_;
  std::vector<double>& c = warm ? accepted_ : early_accepted_;
  const size_t n = std::min(r.size(), size_t(std::max(verified, 0)));
  for (size_t k = 0; k < n && int32_t(k) <= accepted; ++k) {
    r[k] += 1.0;
    if (int32_t(k) < accepted) c[k] += 1.0;
  }
  if (n == 0) return;
  (warm ? saw_warm_ : saw_early_) = true;
  if (!warm) return;  // a warm-up round neither counts toward a probe's rounds nor ends it
  if (probe_rounds_ > 0) --probe_rounds_;
  // A probe ends with its kProbeRounds-th observed round (a fresh gate's first: begin_speculative_step decides).
  if (probe_rounds_ == 0 && !first_probe_) probe_left_ = 0;
}

void SpecGate::observe_expected(std::span<const float> a, size_t from, bool warm) {
  std::vector<double>& r = warm ? reached_ : early_reached_;
  std::vector<double>& c = warm ? accepted_ : early_accepted_;
  const size_t n = std::min(r.size(), a.size());
  for (size_t k = from; k < n; ++k) {
    r[k] += k == 0 ? 1.0 : double(a[k - 1]);
    c[k] += double(a[k]);
  }
  if (from == 0 && n > 0) (warm ? saw_warm_ : saw_early_) = true;
  if (from == 0 && n > 0 && warm) {  // a block cut to nothing: the probe's round is the head's estimate
    if (first_probe_) {
      if (probe_rounds_ > 0) --probe_rounds_;  // the first probe counts it as one of its rounds
    } else {
      probe_left_ = 0;
      probe_rounds_ = 0;
    }
  }
}

std::vector<double> SpecGate::survival(double prior) const {
  const std::vector<double>& r = use_warm() ? reached_ : early_reached_;
  const std::vector<double>& c = use_warm() ? accepted_ : early_accepted_;
  std::vector<double> a;
  double s = 1.0;
  for (size_t k = 0; k < r.size(); ++k) {
    s *= (c[k] + kPriorRounds * prior) / (r[k] + kPriorRounds);
    a.push_back(s);
  }
  return a;
}

double SpecGate::prior(int64_t n, const StepCostModel& cost) const {
  if (cost.empty()) return kPriorAcceptance;
  n = std::max<int64_t>(n, 1);
  return std::min(kPriorAcceptance, break_even_acceptance(reached_.size(), n, cost, kMargin));
}

bool SpecGate::drain_pays(int64_t n, double slowest, const StepCostModel& cost) const {
  std::vector<double> a(reached_.size());
  double s = 1.0;
  for (double& x : a) x = s *= slowest;
  return drafting_pays(a, n, cost, margin());
}

void SeqAcceptance::observe(uint64_t seq, int32_t verified, int32_t accepted) {
  if (verified <= 0) return;
  const double acc = double(std::clamp(accepted, 0, verified));
  const double rej = accepted < verified ? 1.0 : 0.0;
  Counts& c = seqs_[seq];
  c.accepted += acc;
  c.rejected += rej;
  run_.accepted += acc;
  run_.rejected += rej;
}

double SeqAcceptance::run() const {
  return (run_.accepted + kPriorTrials * SpecGate::kPriorAcceptance) /
         (run_.accepted + run_.rejected + kPriorTrials);
}

double SeqAcceptance::of(uint64_t seq) const {
  const double p = run();
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return p;
  return (it->second.accepted + kPriorTrials * p) / (it->second.accepted + it->second.rejected + kPriorTrials);
}

double SpecGate::margin() const { return explored_ && rest_steps_ == 0 ? 0.0 : kMargin; }

bool SpecGate::pays(int64_t n, const StepCostModel& cost) const {
  return drafting_pays(survival(prior(n, cost)), n, cost, margin());
}

double SpecGate::probe_price(int64_t n, const StepCostModel& cost) const {
  if (cost.empty() || reached_.empty()) return 0.0;
  n = std::max<int64_t>(n, 1);
  if (!drafting_pays(std::vector<double>(reached_.size(), 1.0), n, cost, kMargin)) return 0.0;
  const double plain = cost.plain_ms(n);
  const double h = cost.host_row_ms() * double(n);
  // The catch-up steps ingest and run the drafter without a round of the engine's kind: its parts timed apart.
  const double catch_up = std::max(0.0, cost.step_ms(n, 1) + h + cost.draft_ms(n) - plain);
  const int32_t rows = 1 + int32_t(reached_.size());
  const double round = std::max(0.0, cost.round_ms(n, rows, double(n)) - plain);
  return double(resume_steps_) * catch_up + 2.0 * round;
}

void SpecGate::add_credit(double ms, int64_t n, const StepCostModel& cost) {
  credit_ = std::min(credit_ + ms, probe_price(n, cost));
}

void SpecGate::rest_step(int64_t n, const StepCostModel& cost) {
  ++rest_steps_;
  if (rest_steps_ == 1 && gate_log()) std::fprintf(stderr, "[rests] %s\n", explain(n, cost).c_str());
  if (!cost.empty() && n > 0) add_credit(kExploreShare * cost.plain_ms(n), n, cost);
}

void SpecGate::spent(int64_t n, int32_t rows, int64_t tokens, const StepCostModel& cost) {
  if (cost.empty() || n <= 0) return;
  if (first_probe_ && probe_left_ > 0) return;  // a fresh gate's first probe is free: no debt for later probes
  const double round = cost.round_ms(n, std::max(rows, 1), double(tokens));
  add_credit(double(tokens) * cost.plain_ms(n) / double(n) - round, n, cost);
}

void SpecGate::begin_speculative_step(int64_t n, const StepCostModel& cost) {
  if (gate_log() && (rest_steps_ > 0 || speculative_steps_ % 256 == 0))
    std::fprintf(stderr, "[%s] %s\n", rest_steps_ > 0 ? "leaves rest" : "drafting", explain(n, cost).c_str());
  ++speculative_steps_;
  if ((rest_steps_ > 0 || !explored_) && !cost.empty() && !pays(n, cost)) {
    // A probe (the first speculative step, or the credit let the engine leave rest): the old rounds keep
    // kProbeMemory rounds' weight at most.
    for (auto [r, c] : {std::pair{&reached_, &accepted_}, std::pair{&early_reached_, &early_accepted_}})
      for (size_t k = 0; k < r->size(); ++k) {
        const double f = (*r)[k] > kProbeMemory ? kProbeMemory / (*r)[k] : 1.0;
        (*r)[k] *= f;
        (*c)[k] *= f;
      }
    const int64_t rounds = explored_ ? int64_t(kProbeRounds) : int64_t(kFirstProbeRounds);
    first_probe_ = !explored_;
    ++probes_;
    probe_left_ = resume_steps_ + 1 + rounds;
    probe_rounds_ = rounds;
    probe_extend_left_ = warmup_steps_;
    first_extra_ = first_probe_ ? kFirstProbeExtraSteps : 0;
  } else if (probe_left_ > 0 && saw_early_ && !saw_warm_ && probe_extend_left_ > 0) {
    --probe_extend_left_;  // the last step's rounds were all in a warm-up: the probe waits it out
    ++probe_left_;
  } else if (first_probe_ && probe_left_ > 0 && probe_rounds_ == 0) {
    // The first probe's rounds are in: it ends where the estimate pays or lies kMargin below paying, else it goes on
    // observing (at most kFirstProbeExtraSteps steps more).
    const std::vector<double> a = survival(prior(n, cost));
    const bool undecided = !cost.empty() && !drafting_pays(a, n, cost, 0.0) && drafting_pays(a, n, cost, -kMargin);
    if (undecided && first_extra_ > 0) {
      --first_extra_;
      ++probe_left_;
    } else {
      probe_left_ = 0;
    }
  }
  saw_warm_ = saw_early_ = false;
  if (probe_left_ > 0) --probe_left_;
  rest_steps_ = 0;
  explored_ = true;
  for (std::vector<double>* v : {&reached_, &accepted_, &early_reached_, &early_accepted_})
    for (double& x : *v) x *= kMemoryFade;
}

bool SpecGate::should_draft(int64_t n, const StepCostModel& cost) const {
  if (cost.empty() || probe_left_ > 0 || pays(n, cost)) return true;
  const double price = probe_price(n, cost);
  if (price <= 0.0) return false;
  // A fresh gate's first probe is free at one sequence, and at more only where the prior's ceiling would pay (the old
  // gate drafted there from the start): at batch 64 on the H200 a first-step probe of 64 sequences staggered the batch
  // (0.81x off, session 17). One sequence has nothing to stagger, and its credit-paid probe never comes within a run:
  // MTP-1 at batch 1 on the H200 needs 0.65 against the ceiling's 0.6 and rested through whole runs (session 43).
  if (!explored_ && (n == 1 || drafting_pays(survival(kPriorAcceptance), n, cost, kMargin))) return true;
  return credit_ >= price;
}

}  // namespace dsinfer::speculative
