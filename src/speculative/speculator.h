// Speculator: the engine's speculative-decoding driver (docs/engine_core.md "Speculative decoding"). Owns the
// drafter and each sequence's pending drafts with the distributions they were drawn from. Per step:
//   schedule (the scheduler plans anchor + admitted drafts) -> runner (logits for every verified token, target
//   hidden states captured) -> sample(): verification (sampling/spec_sampling.h) and plain sampling of the rest
//   -> Scheduler::update (accepted tokens, rollback) -> draft(): the drafter ingests the hidden states of every
//   newly committed position, then proposes the next block for each decoding sequence; the confidence head's
//   cumulative survival goes to the scheduler with the drafts.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "sampling/sampler.h"
#include "scheduler/step_output.h"
#include "speculative/chained_step.h"
#include "speculative/drafter.h"
#include "speculative/spec_gate.h"
#include "speculative/speculative_config.h"
#include "speculative/step_cost.h"
#include "structured/structured_decoding.h"

namespace dsinfer::scheduler {
class Scheduler;  // draft() reads the sequences and hands it the drafts (speculator.cpp includes scheduler.h)
}  // namespace dsinfer::scheduler

namespace dsinfer::speculative {

// True when greedy draws from unprocessed logits (ProposeItem::pick_argmax) for a sequence with this many output
// tokens: no bias, penalties or pending min_tokens.
bool plain_argmax(const SamplingParams& p, size_t num_output_tokens);

// Bins of the confidence head's reliability curve (SpeculativeMetrics::calibration_*), of width 1 / bins.
inline constexpr size_t kCalibrationBins = 10;

class Speculator {
 public:
  // `cfg` resolved (resolve_speculative_config). `num_slots`: the state cache's slots. `device_drafter`: the
  // runner's drafter on its device (ModelRunner::create_drafter), or nullptr for the CPU reference drafter.
  // `cost`: the step cost model (speculative/step_cost.h) the greedy sequences' verify lengths and the choice to
  // draft at all are weighed against (verify_plan.h); empty = every draft verified (up to the scheduler's budget).
  static Result<std::unique_ptr<Speculator>> create(const SpeculativeConfig& cfg, const io::ModelConfig& target,
                                                    int32_t num_slots,
                                                    std::unique_ptr<Drafter> device_drafter = nullptr,
                                                    StepCostModel cost = {});
  Speculator(std::unique_ptr<Drafter> drafter, SpeculativeConfig cfg, int64_t vocab, StepCostModel cost = {});

  const std::vector<int64_t>& tapped_layers() const { return drafter_->tapped_layers(); }
  int32_t num_speculative_tokens() const { return cfg_.num_speculative_tokens; }
  Drafter& drafter() { return *drafter_; }
  // The model the gate and the verify length read; two-wait rounds (DSINFER_SPEC_ONE_WAIT=0) drop its measured
  // one-wait round (StepCostModel::without_round: their cost is the parts timed apart).
  // With the drain gate (SpeculativeConfig::drain_gate) a one-wait round is costed without the host's row time
  // (StepCostModel::without_round_host).
  void set_cost_model(StepCostModel cost);
  const StepCostModel& cost_model() const { return cost_; }

  // Samples every logits row of the plan: verifying sequences with sampling::verify_drafts, others like
  // scheduler::sample_step. Structured outputs (both null = none): `mask` holds each sequence's first row
  // (StructuredDecoding::fill_bitmask of the plan, computed during the model step); the rows after accepted
  // drafts come from `sd`'s matchers, advanced tentatively through the drafts and rolled back afterwards (the
  // engine advances them over the accepted tokens after Scheduler::update).
  Status sample(const scheduler::BatchPlan& plan, std::span<const float> logits, int64_t eos_token_id,
                sampling::Sampler& sampler, std::vector<scheduler::StepOutput>& out,
                const sampling::TokenBitmask* mask = nullptr, structured::StructuredDecoding* sd = nullptr);
  // After Scheduler::update(plan's outputs): ingest + propose (see the file comment). `hidden`: the runner's
  // captured_hidden() of the plan's step. With `sd` (structured outputs, matchers not yet advanced over this
  // step's tokens), drafts of a constrained sequence are drawn from grammar-masked draft logits: a cheaper,
  // better draft; verification's target-side mask is what keeps the output exact.
  Status draft(const scheduler::BatchPlan& plan, std::span<const scheduler::StepOutput> outputs,
               std::span<const float> hidden, scheduler::Scheduler& sched,
               structured::StructuredDecoding* sd = nullptr);

  // The one-wait round (docs/decisions.md, 2026-12-04; DSINFER_SPEC_ONE_WAIT=0 turns it off): true when this verify
  // step can be verified and the next block proposed on the device with one host wait. Every sequence of the plan
  // decodes, draws greedily from unprocessed logits without logprobs or a grammar, its drafter context is whole up to
  // the step, the drafter can (Drafter::supports_round) and the gate would draft. The engine then launches the step
  // without a download (ModelRunner::begin_sampled_step) and calls round() instead of sample(), then draft() as always.
  bool one_wait_round(const scheduler::BatchPlan& plan, const scheduler::Scheduler& sched,
                      structured::StructuredDecoding* sd) const;
  // sample()'s outputs of a one-wait round (the same tokens: greedy acceptance of the same logits), in two halves:
  // launch_round() queues the round on the device, finish_round() waits for it. The proposals wait for draft(),
  // which uses them where the host's decisions after the step match the anchors they were proposed after, and
  // proposes again otherwise.
  Status launch_round(const scheduler::BatchPlan& plan);
  Status finish_round(const scheduler::BatchPlan& plan, std::vector<scheduler::StepOutput>& out);
  // The chained verify step (chained_step.h; on where the runner has it: enable_chained_steps), between the halves:
  // the plan to launch with ModelRunner::begin_chained_step after the launched round, or nullptr where it could not
  // be adopted. take_chained(): whether the host's next plan, run as a one-wait round, is that launched step (the
  // engine then launches nothing); called before every synchronous step, it forgets the launched step either way.
  void enable_chained_steps(bool on) { chain_ = on && chain_env_ && one_wait_ && drafter_->supports_round(); }
  // The positions past a verify step that its sequences' blocks should cover (SchedulerConfig::spec_lookahead).
  int64_t chained_lookahead() const {
    return chain_ ? chain_lookahead(cfg_.num_speculative_tokens, drafter_->max_drafts()) : 0;
  }
  const scheduler::BatchPlan* chain(const scheduler::BatchPlan& plan, const scheduler::Scheduler& sched);
  bool take_chained(const scheduler::BatchPlan& plan, const scheduler::Scheduler& sched, bool one_wait);

  SpeculativeMetrics& metrics() { return metrics_; }

  // At rest: the gate (spec_gate.h) does not draft at the next step's batch (next_step_seqs: drafting not expected to
  // pay with the survival observed so far, and no probe due) and no sequence holds drafts (Scheduler::holds_drafts). The
  // engine then runs plain decode steps (its own non-speculative path: the step without speculation, no drafter
  // launch) and calls neither sample() nor draft() while only greedy requests live (a sampled request's verified
  // drafts must not depend on the batch). Never with an empty cost model.
  bool resting(const scheduler::Scheduler& sched) const;
  // A plain decode step taken at rest: its sequences count as rounds of one token (the metrics' accepted length).
  void count_rest_round(int64_t num_decoding);

 private:
  struct SeqDraft {
    std::vector<double> q;  // [drafts, vocab] distributions drawn from (sampling requests only)
    std::vector<float> a;   // the drafts' cumulative survival (calibration counters)
  };
  std::vector<float> survival(std::span<const float> conf_logits, bool greedy) const;
  // The metrics and the gate's observation of one verified sequence (L drafts, acc accepted) and of one decode round.
  void count_verified(const scheduler::SeqPlan& sp, int32_t L, int32_t acc);
  // Counts the round with the tokens of its `samples` that the request keeps (none past its max_tokens: drafts near
  // its end are verified whole, Scheduler::set_draft) and returns them.
  int64_t count_round(const scheduler::SeqPlan& sp, int32_t L, size_t samples);
  // draft()'s items (items[j]: the plan's sequence decoding[j], one that still decodes) match the last round's.
  bool round_usable(const std::vector<ProposeItem>& items, std::span<const size_t> decoding) const;
  void take_round_proposals(const std::vector<ProposeItem>& items, std::span<const size_t> decoding,
                            std::vector<Proposal>& props);
  void count_calibration(const SeqDraft& d, int32_t verified, int32_t accepted);
  // draft()'s first step: every live planned sequence's newly committed positions (never a rejected draft's) for the
  // drafter's ingest, the plan indices of the decoding sequences (to draft for) and whether each sequence's drafter
  // context is whole (note_ingest). Drops every planned sequence's pending drafts.
  struct Committed {
    std::vector<IngestItem> ingest;          // reads `next`
    std::vector<std::vector<int32_t>> next;  // per plan index: the tokens after the committed positions
    std::vector<size_t> decoding;
    std::vector<bool> ready;
  };
  Committed committed_positions(const scheduler::BatchPlan& plan, std::span<const scheduler::StepOutput> outputs,
                                scheduler::Scheduler& sched);
  // The cost-model schedule of draft(): which items draft at all (num_drafts = 0 where drafting does not pay), and
  // after proposing, the greedy sequences' common verify length.
  void gate_drafting(std::vector<ProposeItem>& items, const std::vector<bool>& scheduled, bool drafts);
  // A chained step (chain()) verifies every draft: then the length is the longest, not the cost model's.
  void cut_to_best_length(std::vector<Proposal>& props, std::vector<std::vector<float>>& a,
                          const std::vector<bool>& scheduled, const std::vector<bool>& warmed, int64_t num_seqs);
  bool chains(size_t num_seqs) const { return chain_ && num_seqs <= size_t(kChainMaxSeqs); }
  // A round proposed after `outputs` output tokens is past its request's warm-up (SpecGate's file comment): the
  // drafter's context window holds none of the prompt any more.
  bool warm(size_t outputs) const { return int64_t(outputs) >= warmup_; }
  std::vector<float> observed_survival() const;
  // Drops the pending drafts of sequences no longer decoding and the drafter context of finished ones.
  void forget_finished(const scheduler::Scheduler& sched);
  // The sequences the next step is expected to hold: the running ones and the waiting ones admission can add (up to
  // max_num_seqs and the slots), the batch whose step costs the choice to draft is weighed against.
  static int64_t next_step_seqs(const scheduler::Scheduler& sched);
  // Whether the next step of n sequences drafts: the gate's choice (SpecGate::should_draft), and with the drain gate
  // (SpeculativeConfig::drain_gate) where no request waits and n > 1, drafting must also pay for the slowest
  // decoding sequence (SpecGate::drain_pays, seq_acceptance_; a running sequence without a verified round yet, a
  // prefilling one included, counts at the run's acceptance). resting(), one_wait_round() and draft() ask it.
  bool gate_drafts(const scheduler::Scheduler& sched, int64_t n) const;
  // Drafter context after a gap (positions not ingested: steps taken at rest, a prefill at rest, a prefix-cache hit):
  // the sequence may draft again once the drafter's resume_positions() after the gap have been ingested, its
  // proposals reading context from the gap on (ProposeItem::context_start). Returns false for a sequence that may
  // not draft yet.
  bool note_ingest(scheduler::SeqId id, int64_t start_pos, int32_t count);

  // Output tokens of a request's warm-up: the drafter's context window (read before drafter_ is moved in);
  // DSINFER_SPEC_GATE_WARMUP=0 (read once, in the constructor): 0, every round past it.
  int64_t warmup_ = 0;
  std::unique_ptr<Drafter> drafter_;
  SpeculativeConfig cfg_;
  int64_t vocab_;
  StepCostModel cost_;
  // The choice to draft uses the observed acceptance and times from cost_ only (profiled once, cached), never clocks
  // read during the run: the same requests make the same choices (docs/decisions.md, 2026-12-02).
  SpecGate gate_;
  SeqAcceptance seq_acceptance_;  // greedy sequences' verified drafts (the drain gate only)
  struct Context {
    int64_t ingested_end = 0;  // positions [0, ingested_end) were ingested, or the gap's recovery ended there
    int64_t ready_at = 0;      // the sequence may draft with its anchor at or after this position
    int64_t context_start = 0;  // the first position ingested since the last gap
  };
  std::unordered_map<scheduler::SeqId, Context> context_;
  sampling::LogprobsMode logprobs_mode_ = sampling::LogprobsMode::Raw;
  std::unordered_map<scheduler::SeqId, SeqDraft> drafts_;
  bool one_wait_ = true;  // DSINFER_SPEC_ONE_WAIT (read once, in the constructor)
  struct Round {
    bool active = false;  // finish_round() ran since the last draft()
    std::vector<RoundItem> launched;  // launch_round()'s items (finish_round reads them)
    std::vector<RoundResult> results;
    std::vector<ProposeItem> items;  // the anchors its proposals follow (num_drafts unused)
  } round_;
  bool chain_env_ = true;  // DSINFER_SPEC_CHAIN (read once, in the constructor; 0: no chained steps)
  bool chain_ = false;     // enable_chained_steps
  std::optional<ChainedStep> chained_;  // launched by the last round, not yet taken
  SpeculativeMetrics metrics_;
};

}  // namespace dsinfer::speculative
