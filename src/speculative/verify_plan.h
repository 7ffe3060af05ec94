// The confidence schedule against a measured step cost (docs/engine_core.md "Speculative decoding"): how many
// drafts a step verifies, chosen to maximise expected accepted tokens per second. Survival a_k is the confidence
// head's estimate that drafts 1..k are all accepted (non-increasing); verifying the first L of a sequence's drafts
// emits 1 + a_1 + ... + a_L tokens in expectation. A choice made from the drafter's own confidence and the step
// times, never from the target's output: lossless.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "speculative/step_cost.h"

namespace dsinfer::speculative {

struct VerifyChoice {
  int32_t length = 0;          // drafts verified per drafted sequence (fewer where a sequence has fewer)
  double tokens_per_ms = 0.0;  // expected tokens per ms of the round (draft + verify) at that length
};

// The one verify length L in [0, longest draft] for every drafted sequence of a step (uniform lengths keep the
// verify step a captured CUDA graph) that maximises
//   tokens / cost.round_ms(num_seqs, 1 + L, tokens)   (the round's draft, verify and host parts: step_cost.h),
// tokens = others + sum_s (1 + a_s,1 + ... + a_s,min(L, len_s)),
// num_seqs = the step's sequences (the drafted ones and `others` = num_seqs - survival.size(), one token each).
// Ties: the shorter L. L = 0 verifies nothing (the drafting is spent all the same).
VerifyChoice best_verify_length(std::span<const std::vector<float>> survival, int64_t num_seqs,
                                const StepCostModel& cost);

// Whether drafting for a step of num_seqs sequences is expected to beat plain decode (num_seqs / plain_ms(num_seqs):
// the engine's plain step, sampled on the device where it can) by more than `margin` (a share of its rate) when
// every sequence's drafts survive like `mean_survival` (per position) and a round costs cost.round_ms.
bool drafting_pays(std::span<const double> mean_survival, int64_t num_seqs, const StepCostModel& cost,
                   double margin = 0.0);

// The break-even conditional acceptance at num_seqs: the largest p in [0, 1] (to 1e-4) at which drafting_pays is
// still false when every draft is accepted with conditional probability p (survival p, p^2, ..., p^positions).
// Drafting pays above it; 1.0 when it cannot pay even if every draft survives.
double break_even_acceptance(size_t positions, int64_t num_seqs, const StepCostModel& cost, double margin = 0.0);

}  // namespace dsinfer::speculative
