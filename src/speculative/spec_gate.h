// SpecGate: whether a speculative engine drafts at all for its next step, decided before any proposal (the verify
// length of a proposed block is verify_plan.h's best_verify_length, from the confidence head's survival). No draft
// when no verify pays: the engine then takes the plain decode step (Speculator::resting).
//
// Estimate. Per draft position k, the conditional acceptance c_k observed in greedy verified rounds that reached k
// (drafts 1..k-1 accepted, draft k verified), with a prior worth kPriorRounds rounds, counts fading by kMemoryFade
// per speculative step (recent rounds weigh most); survival a_k = c_1 ... c_k. The prior is kPriorAcceptance capped
// at the batch's break-even acceptance (verify_plan.h's break_even_acceptance with kMargin): the prior alone never
// makes drafting pay, only observed rounds above break-even do (session 17: with 0.6 above the shipped model's
// batch-1 break-even of ~0.54, every run and every probe began with rounds that lost). A position few rounds reach
// keeps the prior instead of looking perfect; drafts the verify length cut count with the confidence head's survival
// as their expected outcome (observe_expected). Drafting pays when a round at the estimate (StepCostModel::round_ms:
// the one-wait round as the profile timed it where the engine runs it, else its parts) beats the engine's plain
// step by margin(): kMargin to leave rest, none to go on drafting (hysteresis).
//
// Exploration. At rest nothing is observed, so an estimate alone stays where its last rounds left it. The gate probes:
// a fresh gate at its first speculative step where kPriorAcceptance itself would pay or the batch is one sequence
// (nothing observed yet, no gap to catch up), then whenever its credit covers a probe's price. The credit is in
// modelled milliseconds: each plain step at rest adds kExploreShare of its time; each speculative step subtracts what
// it cost beyond the plain steps its tokens would have taken (it adds back what it saved), capped at one probe's price
// (the catch-up steps after the gap, each a one-row speculative step with the drafter's work, and two rounds verifying
// every draft that emit one token each). A probe cuts the memory to kProbeMemory rounds and drafts until kProbeRounds
// rounds (a fresh gate's first probe: kFirstProbeRounds) were observed or a block was cut to nothing (the first probe
// counts such a block as one of its rounds instead, and goes on while undecided: kFirstProbeExtraSteps; at most
// resume_steps + 1 + that many steps, plus its warm-up steps: below), then the rounds decide again. So exploring costs
// at most about kExploreShare of the time at rest past a fresh gate's first probe, and a batch where drafting cannot
// pay even if every draft survived is never probed. Deterministic: cost-model times and observed acceptance only, no
// clock read.
//
// Warm-up (session 22). A request's first rounds draft from a context ring that still holds its prompt, and accept
// less than its later ones (the shipped drafter at batch 1 on the H200: first-draft acceptance 0.42 over a request's
// first ~30 rounds, 0.60 over the run). The caller says whether a round is in its sequence's warm-up (the first
// `warmup_steps` output tokens: the drafter's context window). Warm-up rounds keep their own counts, which the
// estimate reads only while no round past a warm-up is remembered (requests that end inside their warm-up are judged
// on what there is); they neither count toward a probe's rounds nor end it, and a probe's steps that observed
// warm-up rounds only do not use up its steps (up to warmup_steps of them a probe). So a probe that starts with a
// request waits out its warm-up instead of putting the gate at rest on rounds the rest of the request does not
// resemble, and a gate that drafts keeps drafting through the next request's warm-up.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "speculative/step_cost.h"

namespace dsinfer::speculative {

// Each greedy sequence's acceptance, for the gate's drain rule (SpecGate::drain_pays): the drafts it had verified,
// accepted and rejected (a round that verified L drafts and accepted fewer rejected one), and the run's totals. Its
// conditional acceptance per draft (geometric: the chance that each next draft is accepted) is
// (accepted + kPriorTrials p) / (accepted + rejected + kPriorTrials), p the run's own (with
// SpecGate::kPriorAcceptance as its prior, worth kPriorTrials), so a sequence judged on few rounds stays near the run's.
class SeqAcceptance {
 public:
  static constexpr double kPriorTrials = 4.0;
  // One verified round of sequence `seq`: `verified` drafts, the first `accepted` of them accepted.
  void observe(uint64_t seq, int32_t verified, int32_t accepted);
  // The run's conditional acceptance, and sequence `seq`'s (the run's for one never observed).
  double run() const;
  double of(uint64_t seq) const;
  // The lowest acceptance among the observed sequences `live` says decode, and at most the run's where fewer than
  // `decoding` were observed (a decoding sequence with no verified round yet); 1 where there are none.
  template <typename Live>
  double slowest(Live live, int64_t decoding) const {
    double s = 1.0;
    int64_t seen = 0;
    for (const auto& [id, c] : seqs_) {
      if (!live(id)) continue;
      s = std::min(s, of(id));
      ++seen;
    }
    return seen < decoding ? std::min(s, run()) : s;
  }
  // Keeps the sequences `live` says are live (Speculator::forget_finished: the others finished or were aborted).
  template <typename Live>
  void retain(Live live) {
    std::erase_if(seqs_, [&](const auto& e) { return !live(e.first); });
  }

 private:
  struct Counts {
    double accepted = 0.0, rejected = 0.0;
  };
  std::unordered_map<uint64_t, Counts> seqs_;
  Counts run_;
};

class SpecGate {
 public:
  // The prior's ceiling; the prior itself is min(this, the batch's break-even acceptance): prior(n, cost).
  static constexpr double kPriorAcceptance = 0.6;
  static constexpr double kPriorRounds = 8.0;
  static constexpr double kMemoryFade = 1.0 - 1.0 / 64.0;
  static constexpr double kMargin = 0.05;
  // 0.01, not 0.05 (session 17): where nothing pays (the shipped model at every batch on the H200) exploring is pure
  // loss, and 5 % of the time at rest put DSpark at ~0.95x off in the batch-1 model; with a prior at break-even a
  // probe's one good round is enough to resume drafting, so probes can be rarer.
  static constexpr double kExploreShare = 0.01;
  // What a probe keeps of the old rounds (in rounds): enough that one poor probe round does not erase a long record
  // of good ones, little enough that one good round above break-even outweighs an old poor record at the prior.
  static constexpr double kProbeMemory = 2.0;
  // Rounds a probe observes before the estimate decides again (its price counts two rounds): one round alone at the
  // shipped drafter's ~0.5 first-draft acceptance ends half the probes on a rejected first draft.
  static constexpr int32_t kProbeRounds = 2;
  // Rounds a fresh gate's first probe observes (session 21): its sequences' drafter context is whole, and nothing
  // else informs the estimate before the gate may rest for ~100 x the probe's price; one or two rounds at the shipped
  // drafter's ~0.6 first-draft acceptance put it at rest for a whole batch-1 run on the H200 (2 probes, 4 drafts
  // verified, in 1,024 steps) although verifying every draft there is 1.13x off. Session 22: one memory's worth of
  // rounds (1 / (1 - kMemoryFade)) past the warm-up; 16 rounds past it (outputs ~64-100 of a 256-token request) still
  // put it at rest on the H200 (first-draft acceptance ~0.44 there, 0.60 over the run: it keeps rising).
  static constexpr int32_t kFirstProbeRounds = 64;
  // After its kFirstProbeRounds, the first probe goes on while its estimate is undecided (no gain at it, but within
  // kMargin of one), up to this many steps more: the shipped drafter's acceptance keeps rising through a request.
  static constexpr int64_t kFirstProbeExtraSteps = 192;

  // `positions`: drafts per round at most. `resume_steps`: the speculative steps a sequence needs after a gap before
  // it drafts again (the drafter's resume_positions(): Speculator::note_ingest).
  // `warmup_steps`: the steps a probe may extend by while it observes warm-up rounds only (0: none).
  SpecGate(size_t positions, int64_t resume_steps, int64_t warmup_steps = 0);

  // One greedy sequence's verified round: `verified` drafts, the first `accepted` of them accepted; `warm`: the
  // sequence is past its warm-up (see the file comment).
  void observe(int32_t verified, int32_t accepted, bool warm = true);
  // The drafts of one greedy block that were proposed but not verified (positions from `from` on, cut by the verify
  // length): the confidence head's calibrated survival `a` counts as their expected outcome (position k reached with
  // probability a_{k-1}, accepted with a_k). So a batch where the head's estimates make every block verify nothing
  // stops drafting too, instead of proposing blocks nobody verifies.
  void observe_expected(std::span<const float> a, size_t from, bool warm = true);
  // A speculative step of n decoding sequences verified up to rows - 1 drafts each and emitted `tokens`: its
  // modelled cost beyond plain steps comes off the credit.
  void spent(int64_t n, int32_t rows, int64_t tokens, const StepCostModel& cost);
  // A speculative step's draft phase begins (before should_draft is asked for its proposals), the next step having
  // n sequences. After steps at rest where drafting did not pay this is a probe. Then the memory fades by one step.
  void begin_speculative_step(int64_t n, const StepCostModel& cost);
  // A plain step of n decoding sequences taken at rest.
  void rest_step(int64_t n, const StepCostModel& cost);

  // Survival estimate per position (non-increasing) with a prior conditional acceptance `prior`.
  std::vector<double> survival(double prior = kPriorAcceptance) const;
  // The prior at batch n: kPriorAcceptance capped at the break-even acceptance (1 without a cost model).
  double prior(int64_t n, const StepCostModel& cost) const;
  // Drafting is expected to pay at the estimate, a probe is under way, or the credit covers one.
  bool should_draft(int64_t n, const StepCostModel& cost) const;
  bool pays(int64_t n, const StepCostModel& cost) const;
  // The drain rule (SpeculativeConfig::drain_gate; Speculator::gate_drafts applies it when no request waits and the
  // batch holds more than one sequence): such a run ends with its slowest sequence, and every round costs every
  // sequence the round's time, so drafting must also pay for the sequence with the lowest conditional acceptance
  // `slowest` (SeqAcceptance::slowest): drafting_pays with the survival slowest, slowest^2, ... at every position,
  // against margin(). Static batches whose prompts the drafter predicts unevenly otherwise lose to plain steps
  // though each round models a gain (bench/NOTES.md sessions 48-49).
  bool drain_pays(int64_t n, double slowest, const StepCostModel& cost) const;
  // The share of the plain rate a round must beat: kMargin to leave rest (a fresh gate is at rest), none to go on
  // drafting (hysteresis: a gate drafting at its estimate's break-even stays, one at rest waits for kMargin).
  double margin() const;
  // A probe's modelled price at batch n (ms); 0 = never probed (drafting cannot pay at n even if every draft survived).
  double probe_price(int64_t n, const StepCostModel& cost) const;
  double credit() const { return credit_; }
  int64_t probes() const { return probes_; }
  // One line of the gate's numbers at batch n: the modelled plain step and round per verify length, the estimate,
  // the prior and break-even, the best rate at the estimate against the plain rate with kMargin, the credit. With
  // DSINFER_SPEC_GATE_LOG=1 the gate prints it to stderr when it rests, when it leaves rest and every 256th
  // speculative step (a log only: the decisions never read it).
  std::string explain(int64_t n, const StepCostModel& cost) const;

 private:
  void add_credit(double ms, int64_t n, const StepCostModel& cost);

  // The counts the estimate reads: the warm rounds', or the warm-up rounds' while no warm round is remembered.
  bool use_warm() const { return reached_.empty() || reached_[0] >= kWarmEvidence; }
  // A round's worth of first drafts past a warm-up: below it (faded, or none yet) the warm-up rounds decide.
  static constexpr double kWarmEvidence = 1.0;

  std::vector<double> reached_, accepted_;  // faded counts per position of rounds past their warm-up
  std::vector<double> early_reached_, early_accepted_;  // the same of warm-up rounds
  int64_t resume_steps_;
  int64_t warmup_steps_;
  int64_t probe_extend_left_ = 0;  // steps a probe may still extend by (warm-up rounds only observed)
  int64_t first_extra_ = 0;        // steps the first probe may still go on while undecided
  bool saw_warm_ = false, saw_early_ = false;  // rounds observed since the last speculative step began
  int64_t rest_steps_ = 0;  // plain steps at rest since the last speculative step
  int64_t probe_left_ = 0;    // speculative steps a probe still drafts for without its observed rounds
  int64_t probe_rounds_ = 0;  // observed rounds a probe still waits for
  int64_t probes_ = 0;
  int64_t speculative_steps_ = 0;
  bool explored_ = false;  // a speculative step was begun (the first one probes)
  bool first_probe_ = false;  // the probe under way is a fresh gate's first (free: spent() charges nothing)
  double credit_ = 0.0;
};

}  // namespace dsinfer::speculative
