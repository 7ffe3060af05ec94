// Scheduler: request / sequence lifecycle, FCFS admission under max_num_seqs and free state blocks, a
// per-step token budget with chunked prefill mixed with decode tokens, preemption (by recompute) of the
// newest sequences when blocks run out, abort. schedule() -> BatchPlan; update(outputs) appends sampled
// tokens and applies the finish conditions. Single-threaded; owns the StateCache bookkeeping.
#pragma once
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/state_cache.h"
#include "dsinfer/engine.h"
#include "sampling/sampler.h"
#include "sampling/stop_checker.h"
#include "scheduler/batch_plan.h"
#include "scheduler/step_output.h"

namespace dsinfer::scheduler {

// Waiting -> Prefilling -> Decoding -> Finished; Aborted from any live state; Prefilling / Decoding ->
// Waiting on preemption (state freed; on readmission it recomputes prompt + generated tokens).
enum class SeqState { Waiting, Prefilling, Decoding, Finished, Aborted };
const char* seq_state_name(SeqState s);

struct SchedulerConfig {
  int32_t max_num_seqs = EngineOptions{}.max_num_seqs;  // running sequences at once (also capped by the cache's slots)
  int64_t max_num_batched_tokens = EngineOptions{}.max_num_batched_tokens;  // tokens per step, prefill + decode
  double admission_watermark = 0.01;      // fraction of blocks kept free when admitting (not when alone)
  int64_t eos_token_id = -1;
  int64_t vocab_size = 0;                 // > 0: token ids in prompts / params are checked against it
  uint64_t seed = 0;                      // seeds requests that carry none (reproducible per engine seed)
  // Speculative decoding (set_draft): verify budget = most draft tokens verified per step over all sequences
  // (0 = no limit), and the least cumulative survival a draft needs to be verified (0 = any).
  int64_t spec_budget = 0;
  double spec_min_survival = 0.0;
  // Positions past a verify step's own that a sequence verifying drafts gets blocks for where they are free (never
  // preempting): the chained verify step's (speculative/chained_step.h chain_lookahead; 0 without chained steps),
  // only while at most spec_lookahead_max_seqs sequences run (kChainMaxSeqs: no larger step is chained).
  int64_t spec_lookahead = 0;
  int32_t spec_lookahead_max_seqs = 0;
  // Speculation: prompts apart from verify steps. A step that verifies drafts takes no prompt tokens and a step that
  // takes prompt tokens verifies no drafts (its sequences that hold drafts wait a step, drafts kept): a prompt in a
  // verify step makes it an eager step whose rows the host verifies, where the verify step alone is a captured graph
  // and the one-wait round. While both have work the two kinds alternate, prompts first. New prompts are admitted in
  // groups: once min(waiting sequences, spec_admit_group) slots are free (a prompt step's fixed cost, its launches and
  // the drafter's ingest, is paid once a group; the freed slots idle meanwhile). The engine sets both with speculation
  // on (DSINFER_SPEC_PROMPTS_APART=0: mixed, as before; =1: apart, each prompt admitted at once).
  bool spec_prompts_apart = false;
  int32_t spec_admit_group = 1;
};

struct RequestSpec {
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
};

struct SchedulerStats {
  int32_t waiting = 0, running = 0;
  int64_t num_preemptions = 0, num_finished = 0, num_aborted = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, cache::StateCache cache);
  ~Scheduler();  // out of line: Request / Sequence are private, complete only in scheduler.cpp
  Scheduler(Scheduler&&) noexcept;
  Scheduler& operator=(Scheduler&&) noexcept;

  // Validates (prompt non-empty and within max_model_len and vocab, params ranges, max_tokens fits) and
  // queues n sequences sharing the prompt. Errors name the parameter and value.
  Result<RequestId> add_request(RequestSpec spec);
  // Ends every live sequence of the request now and frees its state. Outputs for it that arrive in the
  // next update() are dropped. Fails for an unknown or already finished request.
  Status abort(RequestId id);

  // Builds the next step's plan (empty when nothing can run). The reference is valid until the next
  // schedule() call; spans inside it until the next update() or schedule().
  const BatchPlan& schedule();
  // Applies the runner's outputs for the last plan: advances computed positions of every planned sequence,
  // appends sampled tokens, checks finish conditions, frees finished state. Outputs are validated first
  // (plan index, seq id, exactly one per logits row); on error nothing is changed.
  Status update(std::span<const StepOutput> outputs);
  // Asynchronous steps (docs/engine_core.md "Asynchronous steps"): update() in two halves. advance(), right after
  // the last plan was launched, takes its tokens as computed and gives every sequence that gets logits a
  // placeholder output token (kPendingToken) that the next schedule() plans as a BatchPlan::token_fills entry;
  // resolve(step, outputs), once that step's samples are on the host, puts the sampled tokens in place of the
  // placeholders of `step` and applies the finish conditions — one step late. Outputs of sequences that finished,
  // were aborted or preempted meanwhile (a preempted sequence drops its placeholder and resamples it) are
  // dropped, and a finished / aborted sequence's slot is freed only once every step that computed it has been
  // resolved. Not for speculative verification steps (update() only). updates() / state_saves() as for update().
  Status advance();
  Status resolve(uint64_t step, std::span<const StepOutput> outputs);
  // True when the sequence still waits for the token it sampled in `step` (resolve would take it).
  bool awaits(SeqId id, uint64_t step) const;
  // Speculative decoding: drafts to verify after the last token of a decoding sequence (num_computed ==
  // total_len - 1) in its next step, with their cumulative survival estimates (non-increasing, in [0, 1]).
  // schedule() verifies, per sequence, the prefix that falls in the step's global top-spec_budget by survival
  // (ties: earlier draft position, then older sequence) among those >= spec_min_survival — a choice that never
  // depends on the value of a draft it admits, which keeps rejection sampling lossless. Drafts are dropped when
  // the sequence is scheduled, preempted or finishes. update() then takes 1 + accepted tokens as computed and
  // rolls the state cache back past them (StateCache::truncate; ring / frontier rows are overwritten later).
  Status set_draft(SeqId id, std::vector<int32_t> tokens, std::vector<float> survival);
  // Some live sequence holds drafts its next step verifies.
  bool holds_drafts() const;

  // Prefix caching: state copies the runner must do right after update() (snapshots of slots that reached a
  // block boundary), before the next schedule(); valid until the next update().
  std::span<const cache::StateCopy> state_saves() const { return saves_; }
  cache::PrefixCacheStats prefix_stats() const;

  // The per-sequence events of the last update() (valid until the next update()).
  std::span<const SeqUpdate> updates() const { return {updates_.data(), num_updates_}; }

  bool has_unfinished() const { return !waiting_.empty() || num_running_ > 0; }
  SchedulerStats stats() const;
  const cache::StateCache& cache() const { return cache_; }
  // Between steps only (the engine's prefix-state import / export): state bookkeeping the scheduler does not plan.
  cache::StateCache& cache_between_steps() { return cache_; }
  const SchedulerConfig& config() const { return cfg_; }
  // SchedulerConfig::spec_lookahead and spec_lookahead_max_seqs, known once the engine's speculator is
  // (Speculator::chained_lookahead, kChainMaxSeqs).
  void set_spec_lookahead(int64_t positions, int32_t max_seqs) {
    cfg_.spec_lookahead = positions;
    cfg_.spec_lookahead_max_seqs = max_seqs;
  }
  // Inspection (tests, engine): nullopt-like -1 / empty for unknown or destroyed sequences.
  SeqState seq_state(SeqId id) const;
  std::vector<SeqId> seq_ids(RequestId id) const;
  const std::vector<int32_t>* output_tokens(SeqId id) const;
  int64_t num_computed(SeqId id) const;

 private:
  struct Request;
  struct Sequence;
  void preempt(Sequence* s);
  void retire(Sequence* s, SeqState final_state);
  void emit(Sequence* s, int32_t n, int32_t num_spec = 0);
  // Appends the sampled tokens of `o` to s (the first replaces its placeholder when `placeholder`), applies the
  // stop conditions and records the SeqUpdate.
  void apply_samples(Sequence* s, const StepOutput& o, bool placeholder);
  void release_slot(Sequence* s);
  void free_consumed_slots();
  void plan_spec_lengths();
  // Admission's limits: the sequences that may run at once, and the blocks an admission leaves free (the watermark;
  // none when nothing runs: alone, a sequence may use every block).
  int32_t max_running() const { return std::min(cfg_.max_num_seqs, cache_.num_slots()); }
  int64_t admission_reserve() const {
    return running_.empty() ? 0 : int64_t(cfg_.admission_watermark * cache_.num_blocks());
  }
  // Which sequences this step plans (SchedulerConfig::spec_prompts_apart), after plan_spec_lengths: kMixed (all;
  // nothing to verify), kVerify (no prompt tokens: none runs or can be admitted as a group, or the last step ran
  // prompts) or kPrompts (no sequence that verifies).
  enum class SpecTurn { kMixed, kPrompts, kVerify };
  SpecTurn spec_turn(int64_t budget) const;
  // Prefix caching (scheduler_prefix.cpp). A hit: cached blocks that start the table and where computing
  // resumes (exact: a snapshot restores the slot; replay: the window before replay_end is recomputed).
  struct PrefixHit {
    std::vector<cache::BlockId> blocks;
    std::vector<uint64_t> gens;
    int64_t start = 0, replay_end = 0, extra_blocks = 0;
    int32_t snapshot = -1;
  };
  PrefixHit prefix_lookup(Sequence* s);
  bool prefix_defer(const Sequence* s, const PrefixHit& h);
  void prefix_admit(Sequence* s, const PrefixHit& h);
  int32_t prefix_cap(int64_t pos, int64_t replay_until, bool approx, int32_t n) const;
  void prefix_register(Sequence* s);
  void prefix_end_replay(Sequence* s);

  SchedulerConfig cfg_;
  cache::StateCache cache_;
  uint64_t seed_state_;
  RequestId next_request_id_ = 1;
  SeqId next_seq_id_ = 1;
  uint64_t step_ = 0;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;   // admission order = age order (oldest first); may hold retired
                                     // sequences until the next schedule() compacts it
  int32_t num_running_ = 0;          // live (prefilling / decoding) sequences
  std::deque<Sequence*> waiting_;    // arrival order
  std::vector<SeqId> retired_;       // finished / aborted, destroyed at the next schedule()
  BatchPlan plan_;
  std::vector<Sequence*> plan_seqs_;  // parallel to plan_.seqs
  std::vector<uint8_t> seen_;         // update(): one output per logits row
  std::vector<SeqUpdate> updates_;    // reused across steps (inner buffers keep their capacity)
  std::vector<cache::StateCopy> saves_;  // prefix caching: snapshots to take after the last update()
  size_t num_updates_ = 0;
  bool last_turn_prompts_ = false;  // the last step was spec_turn's kPrompts
  uint64_t consumed_step_ = 0;  // every step up to this one has finished on the device (asynchronous steps)
  std::vector<std::pair<cache::SlotId, uint64_t>> deferred_free_;  // slots of retired sequences, and their last step
  int64_t num_preemptions_ = 0, num_finished_ = 0, num_aborted_ = 0;
};

}  // namespace dsinfer::scheduler
