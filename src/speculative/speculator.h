// Speculator: the engine's speculative-decoding driver (docs/engine_core.md "Speculative decoding"). Owns the
// drafter and each sequence's pending drafts with the distributions they were drawn from. Per step:
//   schedule (the scheduler plans anchor + admitted drafts) -> runner (logits for every verified token, target
//   hidden states captured) -> sample(): verification (sampling/spec_sampling.h) and plain sampling of the rest
//   -> Scheduler::update (accepted tokens, rollback) -> draft(): the drafter ingests the hidden states of every
//   newly committed position, then proposes the next block for each decoding sequence; the confidence head's
//   cumulative survival goes to the scheduler with the drafts.
#pragma once
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "sampling/sampler.h"
#include "scheduler/step_output.h"
#include "speculative/drafter.h"
#include "speculative/speculative_config.h"
#include "structured/structured_decoding.h"

namespace dsinfer::scheduler {
class Scheduler;  // draft() reads the sequences and hands it the drafts (speculator.cpp includes scheduler.h)
}  // namespace dsinfer::scheduler

namespace dsinfer::speculative {

// True when greedy draws from unprocessed logits (ProposeItem::pick_argmax) for a sequence with this many output
// tokens: no bias, penalties or pending min_tokens.
bool plain_argmax(const SamplingParams& p, size_t num_output_tokens);

// The number of drafts worth verifying given their cumulative survival a_1 >= a_2 >= ...: the L maximising the
// expected tokens per step cost (1 + a_1 + ... + a_L) / (1 + row_cost * L) (ties: the shorter prefix); row_cost
// <= 0 keeps every draft. A choice made from the drafter's own confidence, never from the target: lossless.
size_t best_verify_length(std::span<const float> survival, double row_cost);

class Speculator {
 public:
  // `cfg` resolved (resolve_speculative_config). `num_slots`: the state cache's slots. `device_drafter`: the
  // runner's drafter on its device (ModelRunner::create_drafter), or nullptr for the CPU reference drafter.
  static Result<std::unique_ptr<Speculator>> create(const SpeculativeConfig& cfg, const io::ModelConfig& target,
                                                    int32_t num_slots,
                                                    std::unique_ptr<Drafter> device_drafter = nullptr);
  Speculator(std::unique_ptr<Drafter> drafter, SpeculativeConfig cfg, int64_t vocab);

  const std::vector<int64_t>& tapped_layers() const { return drafter_->tapped_layers(); }
  int32_t num_speculative_tokens() const { return cfg_.num_speculative_tokens; }
  Drafter& drafter() { return *drafter_; }

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

  SpeculativeMetrics& metrics() { return metrics_; }

 private:
  struct SeqDraft {
    std::vector<double> q;  // [drafts, vocab] distributions drawn from (sampling requests only)
  };
  std::vector<float> survival(std::span<const float> conf_logits, bool greedy) const;

  std::unique_ptr<Drafter> drafter_;
  SpeculativeConfig cfg_;  // batch 1: drafts of the only running sequence are cut to best_verify_length(row_cost)
  int64_t vocab_;
  sampling::LogprobsMode logprobs_mode_ = sampling::LogprobsMode::Raw;
  std::unordered_map<scheduler::SeqId, SeqDraft> drafts_;
  SpeculativeMetrics metrics_;
};

}  // namespace dsinfer::speculative
