// Scheduler (see header). Invariants: running_ is in admission order and, because admission is strictly
// FCFS and preemption always takes the newest running sequence, every running sequence is older than every
// waiting one; a running sequence holds a slot and blocks covering num_computed tokens.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <cassert>

#include "scheduler/scheduler_state.h"

namespace dsinfer::scheduler {

using sampling::FinishReason;

const char* seq_state_name(SeqState s) {
  switch (s) {
    case SeqState::Waiting: return "waiting";
    case SeqState::Prefilling: return "prefilling";
    case SeqState::Decoding: return "decoding";
    case SeqState::Finished: return "finished";
    case SeqState::Aborted: return "aborted";
  }
  return "?";
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig cfg, cache::StateCache cache)
    : cfg_(cfg), cache_(std::move(cache)), seed_state_(cfg.seed) {
  plan_.clear();
}

Scheduler::~Scheduler() = default;
Scheduler::Scheduler(Scheduler&&) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&&) noexcept = default;

Result<RequestId> Scheduler::add_request(RequestSpec spec) {
  const int64_t max_len = cache_.max_model_len();
  const int64_t plen = int64_t(spec.prompt.size());
  if (plen == 0) return Status::error("prompt is empty");
  if (plen >= max_len)
    return Status::errorf("prompt has {} tokens, but max_model_len is {} (room for at least one output token "
                          "is needed)", plen, max_len);
  if (cfg_.vocab_size > 0)
    for (size_t i = 0; i < spec.prompt.size(); ++i)
      if (spec.prompt[i] < 0 || spec.prompt[i] >= cfg_.vocab_size)
        return Status::errorf("prompt token {} (index {}) is outside the vocabulary [0, {})", spec.prompt[i], i,
                              cfg_.vocab_size);
  DSI_RETURN_IF_ERROR(sampling::validate(spec.params, cfg_.vocab_size));
  if (spec.params.max_tokens && *spec.params.max_tokens > max_len - plen)
    return Status::field_errorf("max_tokens", "max_tokens {} + prompt {} tokens exceeds max_model_len {}",
                                *spec.params.max_tokens, plen, max_len);
  auto req = std::make_unique<Request>();
  req->id = next_request_id_++;
  req->prompt = std::move(spec.prompt);
  req->params = std::move(spec.params);
  req->seed = req->params.seed ? *req->params.seed : splitmix64(seed_state_);
  req->max_tokens = req->params.max_tokens ? *req->params.max_tokens : max_len - plen;
  for (int32_t k = 0; k < req->params.n; ++k) {
    auto seq = std::make_unique<Sequence>(req.get(), next_seq_id_++, uint32_t(k), cfg_.eos_token_id);
    req->seqs.push_back(seq->id);
    waiting_.push_back(seq.get());
    seqs_.emplace(seq->id, std::move(seq));
  }
  req->live = req->params.n;
  RequestId id = req->id;
  requests_.emplace(id, std::move(req));
  return id;
}

void Scheduler::retire(Sequence* s, SeqState final_state) {
  if (s->state == SeqState::Prefilling || s->state == SeqState::Decoding) --num_running_;
  if (s->slot >= 0) prefix_end_replay(s);
  if (s->slot >= 0) release_slot(s);
  s->slot = -1;
  s->pending_step = 0;  // its in-flight token is dropped (the placeholder stays: a plan's spans may still see it)
  s->state = final_state;
  retired_.push_back(s->id);
  --s->req->live;
  (final_state == SeqState::Aborted ? num_aborted_ : num_finished_) += 1;
}

Status Scheduler::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return Status::errorf("abort: unknown request id {}", id);
  Request* r = it->second.get();
  if (r->live == 0) return Status::errorf("abort: request {} has already finished", id);
  for (SeqId sid : r->seqs) {
    Sequence* s = seqs_.at(sid).get();
    if (s->state == SeqState::Finished || s->state == SeqState::Aborted) continue;
    if (s->state == SeqState::Waiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    // Running ones are dropped from running_ by the next schedule() (state is no longer live).
    retire(s, SeqState::Aborted);
  }
  return Status::ok();
}

void Scheduler::preempt(Sequence* s) {
  // Recompute preemption: drop all state; on readmission prompt + output are prefilled again. The newest
  // running sequence is older than every waiting one, so it goes to the front of the queue.
  prefix_end_replay(s);
  // Freed now, even while a launched step still computes it: the device runs steps in order, so the step that
  // reuses these blocks writes them after that one. Its in-flight token is dropped and sampled again.
  cache_.free(s->slot);
  s->slot = -1;
  s->num_computed = 0;
  if (s->pending_step) s->output.pop_back();
  s->pending_step = 0;
  s->draft.clear();
  s->survival.clear();
  s->state = SeqState::Waiting;
  --num_running_;
  waiting_.push_front(s);
  plan_.preempted.push_back(s->id);
  ++num_preemptions_;
}

void Scheduler::emit(Sequence* s, int32_t n, int32_t num_spec) {
  // Hot path (runs for every sequence every step): fill in place, no temporaries.
  const int32_t offset = plan_.num_tokens();
  const bool logits = s->num_computed + n - num_spec == s->total_len();
  SeqPlan& sp = plan_.seqs.emplace_back();
  sp.seq_id = s->id;
  sp.request_id = s->req->id;
  sp.start_pos = s->num_computed;
  sp.num_new_tokens = n;
  sp.token_offset = offset;
  sp.is_prefill = s->state == SeqState::Prefilling;
  sp.needs_logits = logits;
  sp.num_spec_tokens = num_spec;
  sp.slot = s->slot;
  sp.block_table = cache_.table(s->slot);
  sp.params = &s->req->params;
  sp.rng = {s->req->seed, s->sample_index};
  sp.prompt_tokens = s->req->prompt;
  sp.output_tokens = s->output;
  s->last_step = step_;
  plan_.token_ids.resize(size_t(offset + n));
  plan_.positions.resize(size_t(offset + n));
  int32_t* ids = plan_.token_ids.data() + offset;
  int64_t* pos = plan_.positions.data() + offset;
  for (int32_t i = 0; i < n; ++i) {
    ids[i] = i < n - num_spec ? s->token_at(s->num_computed + i) : s->draft[size_t(i - (n - num_spec))];
    pos[i] = s->num_computed + i;
    if (ids[i] == kPendingToken) plan_.token_fills.push_back({offset + i, s->pending_row});
  }
  plan_.cu_seqlens.push_back(offset + n);
  if (logits) {
    sp.logits_row = plan_.num_logits();
    for (int32_t k = num_spec; k >= 0; --k) plan_.logits_token_index.push_back(offset + n - 1 - k);
  }
  plan_seqs_.push_back(s);
}

const BatchPlan& Scheduler::schedule() {
  // Drop retired sequences from running_ first (it may still point at them), then destroy them: a plan
  // built before this call is the last thing that could reference them.
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const Sequence* s) {
                                  return s->state != SeqState::Prefilling && s->state != SeqState::Decoding;
                                }),
                 running_.end());
  for (SeqId id : retired_) {
    auto it = seqs_.find(id);
    Request* r = it->second->req;
    seqs_.erase(it);
    if (r->live == 0 && std::none_of(r->seqs.begin(), r->seqs.end(), [&](SeqId x) { return seqs_.count(x) > 0; }))
      requests_.erase(r->id);
  }
  retired_.clear();

  plan_.clear();
  plan_.step = ++step_;
  plan_seqs_.clear();
  int64_t budget = cfg_.max_num_batched_tokens;

  // 1. Running sequences, oldest first; make room by preempting from the newest end.
  plan_spec_lengths();
  const SpecTurn turn = spec_turn(budget);
  last_turn_prompts_ = turn == SpecTurn::kPrompts;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    const bool prompt = s->state == SeqState::Prefilling;
    if ((turn == SpecTurn::kPrompts && s->spec_len > 0) || (turn == SpecTurn::kVerify && prompt)) continue;
    const int32_t rank = cache_.rank_of_slot(s->slot);
    // Asynchronous steps: its in-flight token reaches max_tokens, so it finishes when resolved; no surplus step.
    if (s->pending_step && int64_t(s->output.size()) >= s->req->max_tokens) continue;
    int32_t spec = int32_t(std::min<int64_t>(s->spec_len, budget - 1));
    int32_t n = prefix_cap(s->num_computed, s->replay_until, s->approx,
                           int32_t(std::min<int64_t>(s->total_len() - s->num_computed, budget))) + spec;
    assert(n > 0);
    bool self_preempted = false;
    // Most steps need no new block (one per block_size tokens): check capacity before the allocator.
    while (s->num_computed + n > cache_.capacity_tokens(s->slot) && !cache_.allocate_for(s->slot, s->num_computed + n)) {
      if (spec > 0) {  // short of blocks: verify no drafts rather than preempt (independent of draft values)
        n -= spec;
        spec = 0;
        continue;
      }
      preempted = true;
      // The newest sequence of s's rank (DP attention: only its blocks can make room; one rank: the newest).
      auto v = running_.end() - 1;
      while (cache_.rank_of_slot((*v)->slot) != rank) --v;  // stops at s at the latest
      Sequence* victim = *v;
      running_.erase(v);
      preempt(victim);
      if (victim == s) { self_preempted = true; break; }
    }
    if (self_preempted) {
      if (cache_.ranks() == 1) break;  // s was the newest: nothing after it
      --i;  // DP: the sequences after s are other ranks'; running_[i] is now the next one (i wraps, then ++i)
      continue;
    }
    // The chained step's blocks too, where free and where the step may be chained.
    if (spec > 0 && cfg_.spec_lookahead > 0 && running_.size() <= size_t(cfg_.spec_lookahead_max_seqs)) {
      const int64_t ahead = std::min(s->num_computed + n + cfg_.spec_lookahead, cache_.max_model_len());
      if (ahead > cache_.capacity_tokens(s->slot)) (void)cache_.allocate_for(s->slot, ahead);
    }
    emit(s, n, spec);
    budget -= n;
  }

  // 2. Admission, strictly FCFS, and not in a step that had to preempt (the pool is under pressure) or that verifies
  //    drafts with prompts apart.
  if (!preempted && turn != SpecTurn::kVerify) {
    while (!waiting_.empty() && int32_t(running_.size()) < max_running() && budget > 0) {
      Sequence* s = waiting_.front();
      const PrefixHit hit = prefix_lookup(s);  // nothing when prefix caching is off
      if (prefix_defer(s, hit)) break;
      const int32_t n = prefix_cap(hit.start, hit.replay_end, hit.replay_end > 0,
                                   int32_t(std::min<int64_t>(s->total_len() - hit.start, budget)));
      // Alone, a sequence may use every block: the cache was sized so that it can always finish.
      if (!cache_.can_admit(hit.start + n, admission_reserve(), hit.blocks, hit.extra_blocks)) break;
      waiting_.pop_front();
      s->slot = cache_.admit(hit.start + n, hit.blocks, hit.gens);
      s->state = SeqState::Prefilling;
      prefix_admit(s, hit);  // sets num_computed (0 without a hit)
      running_.push_back(s);
      ++num_running_;
      emit(s, n);
      budget -= n;
    }
  }
  if (!plan_.empty()) cache_.take_copies(plan_.state_copies);  // prefix caching (an empty plan is not run)
  return plan_;
}

Status Scheduler::update(std::span<const StepOutput> outputs) {
  num_updates_ = 0;
  saves_.clear();
  consumed_step_ = step_;  // synchronous: the plan has run
  free_consumed_slots();
  // Validate everything first so that a bad batch changes nothing.
  seen_.assign(plan_.seqs.size(), 0);
  for (const StepOutput& o : outputs) {
    if (o.plan_index < 0 || o.plan_index >= plan_.num_seqs())
      return Status::errorf("update: plan_index {} is outside the plan ({} sequences)", o.plan_index, plan_.num_seqs());
    const SeqPlan& sp = plan_.seqs[size_t(o.plan_index)];
    if (sp.seq_id != o.seq_id)
      return Status::errorf("update: plan_index {} holds sequence {}, output is for {}", o.plan_index, sp.seq_id,
                            o.seq_id);
    if (!sp.needs_logits) return Status::errorf("update: sequence {} needed no logits this step", o.seq_id);
    if (seen_[size_t(o.plan_index)]++) return Status::errorf("update: two outputs for sequence {}", o.seq_id);
    if (o.samples.empty()) return Status::errorf("update: no sampled token for sequence {}", o.seq_id);
    if (int32_t(o.samples.size()) > sp.num_spec_tokens + 1)
      return Status::errorf("update: sequence {} returned {} tokens for {} verified drafts", o.seq_id, o.samples.size(),
                            sp.num_spec_tokens);
    for (size_t k = 0; k + 1 < o.samples.size(); ++k)
      if (o.samples[k].token != plan_.token_ids[size_t(sp.token_offset + sp.num_new_tokens - sp.num_spec_tokens) + k])
        return Status::errorf("update: sequence {} accepted token {} at {} which is not its draft", o.seq_id,
                              o.samples[k].token, k);
    if (!o.text.empty() && o.text.size() != o.samples.size())
      return Status::errorf("update: sequence {} has {} text deltas for {} tokens", o.seq_id, o.text.size(),
                            o.samples.size());
    for (const auto& smp : o.samples)
      if (smp.token < 0 || (cfg_.vocab_size > 0 && smp.token >= cfg_.vocab_size))
        return Status::errorf("update: sequence {} sampled token {} outside the vocabulary", o.seq_id, smp.token);
  }
  for (size_t i = 0; i < plan_.seqs.size(); ++i)
    if (plan_.seqs[i].needs_logits && !seen_[i] && plan_seqs_[i]->state != SeqState::Aborted)
      return Status::errorf("update: no output for sequence {} which needed logits", plan_.seqs[i].seq_id);

  // Every planned (still live) sequence now has its new tokens in the state cache.
  for (size_t i = 0; i < plan_.seqs.size(); ++i) {
    Sequence* s = plan_seqs_[i];
    // Verify steps: the anchor now; accepted drafts below, once the outputs are read.
    if (s->state == SeqState::Prefilling || s->state == SeqState::Decoding) {
      s->num_computed += plan_.seqs[i].num_new_tokens - plan_.seqs[i].num_spec_tokens;
      prefix_register(s);  // complete blocks -> prefix cache, boundary snapshots -> saves_
    }
    s->draft.clear();
    s->survival.clear();
  }
  for (const StepOutput& o : outputs) {
    Sequence* s = plan_seqs_[size_t(o.plan_index)];
    if (s->state != SeqState::Prefilling && s->state != SeqState::Decoding) continue;  // aborted meanwhile
    const int32_t accepted = int32_t(o.samples.size()) - 1;  // drafts accepted (verify steps; else 0)
    s->num_computed += accepted;
    apply_samples(s, o, /*placeholder=*/false);
    const bool finished = s->state == SeqState::Finished;
    if (!finished && plan_.seqs[size_t(o.plan_index)].num_spec_tokens > accepted)
      DSI_RETURN_IF_ERROR(cache_.truncate(s->slot, s->num_computed));  // release blocks of rejected positions
  }
  return Status::ok();
}

// ---- speculative decoding ----

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.waiting = int32_t(waiting_.size());
  st.running = num_running_;
  st.num_preemptions = num_preemptions_;
  st.num_finished = num_finished_;
  st.num_aborted = num_aborted_;
  return st;
}

SeqState Scheduler::seq_state(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? SeqState::Finished : it->second->state;
}

std::vector<SeqId> Scheduler::seq_ids(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? std::vector<SeqId>{} : it->second->seqs;
}

const std::vector<int32_t>* Scheduler::output_tokens(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second->output;
}

int64_t Scheduler::num_computed(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second->num_computed;
}

}  // namespace dsinfer::scheduler
