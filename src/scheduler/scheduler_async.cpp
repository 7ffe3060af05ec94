// Scheduler: the halves of update() that asynchronous steps use (advance / resolve, see scheduler.h), the
// shared "append sampled tokens and check the finish conditions" and the deferred freeing of slots.
#include <algorithm>

#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace dsinfer::scheduler {

using sampling::FinishReason;

void Scheduler::apply_samples(Sequence* s, const StepOutput& o, bool placeholder) {
  // Hot path: SeqUpdate records are reused across steps (their buffers keep their capacity).
  if (num_updates_ == updates_.size()) updates_.emplace_back();
  SeqUpdate& u = updates_[num_updates_++];
  u.request_id = s->req->id;
  u.seq_id = s->id;
  u.sample_index = s->sample_index;
  u.tokens.clear();
  u.logprobs.clear();
  u.text.clear();
  u.finished = false;
  u.finish_reason = FinishReason::None;
  u.stop_token = -1;
  u.stop_string.clear();
  u.request_finished = false;
  for (size_t k = 0; k < o.samples.size(); ++k) {
    const int32_t tok = o.samples[k].token;
    if (placeholder && k == 0) {
      s->output.back() = tok;
      s->pending_step = 0;
    } else {
      s->output.push_back(tok);
    }
    u.tokens.push_back(tok);
    if (s->req->params.logprobs) u.logprobs.push_back(o.samples[k]);
    sampling::StopResult r = s->stop.append(tok, o.text.empty() ? std::string_view() : std::string_view(o.text[k]));
    u.text += r.text;
    if (r.finished) {
      u.finished = true;
      u.finish_reason = r.reason;
      u.stop_token = r.stop_token;
      u.stop_string = std::move(r.stop_string);
      retire(s, SeqState::Finished);
      u.request_finished = s->req->live == 0;
      break;  // later (speculative) tokens are discarded
    }
  }
  if (!u.finished) s->state = s->total_len() - s->num_computed > 1 ? SeqState::Prefilling : SeqState::Decoding;
}

void Scheduler::release_slot(Sequence* s) {
  // A launched step that has not been resolved yet may still write this slot: keep it until it is consumed.
  if (s->last_step > consumed_step_) deferred_free_.emplace_back(s->slot, s->last_step);
  else cache_.free(s->slot);
}

void Scheduler::free_consumed_slots() {
  auto keep = std::remove_if(deferred_free_.begin(), deferred_free_.end(), [&](const auto& d) {
    if (d.second > consumed_step_) return false;
    cache_.free(d.first);
    return true;
  });
  deferred_free_.erase(keep, deferred_free_.end());
}

Status Scheduler::advance() {
  num_updates_ = 0;
  saves_.clear();
  for (size_t i = 0; i < plan_.seqs.size(); ++i) {
    const Sequence* s = plan_seqs_[i];
    if (s->state != SeqState::Prefilling && s->state != SeqState::Decoding) continue;
    if (plan_.seqs[i].num_spec_tokens > 0) return Status::error("advance: a verify step needs update()");
    if (plan_.seqs[i].needs_logits && s->pending_step)
      return Status::errorf("advance: sequence {} still waits for the token of step {}", s->id, s->pending_step);
  }
  for (size_t i = 0; i < plan_.seqs.size(); ++i) {
    Sequence* s = plan_seqs_[i];
    if (s->state != SeqState::Prefilling && s->state != SeqState::Decoding) continue;  // finished / aborted meanwhile
    const SeqPlan& sp = plan_.seqs[i];
    s->num_computed += sp.num_new_tokens;
    prefix_register(s);
    if (!sp.needs_logits) continue;
    s->output.push_back(kPendingToken);
    s->pending_step = plan_.step;
    s->pending_row = sp.logits_row;
    s->state = SeqState::Decoding;
  }
  return Status::ok();
}

bool Scheduler::awaits(SeqId id, uint64_t step) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  const Sequence* s = it->second.get();
  return (s->state == SeqState::Prefilling || s->state == SeqState::Decoding) && s->pending_step == step;
}

Status Scheduler::resolve(uint64_t step, std::span<const StepOutput> outputs) {
  num_updates_ = 0;
  saves_.clear();
  for (const StepOutput& o : outputs) {
    if (o.samples.size() != 1) return Status::errorf("resolve: sequence {} has {} samples, expected 1", o.seq_id, o.samples.size());
    if (!o.text.empty() && o.text.size() != 1)
      return Status::errorf("resolve: sequence {} has {} text deltas for one token", o.seq_id, o.text.size());
    const int32_t tok = o.samples[0].token;
    if (awaits(o.seq_id, step) && (tok < 0 || (cfg_.vocab_size > 0 && tok >= cfg_.vocab_size)))
      return Status::errorf("resolve: sequence {} sampled token {} outside the vocabulary", o.seq_id, tok);
  }
  consumed_step_ = std::max(consumed_step_, step);
  for (const StepOutput& o : outputs) {
    if (!awaits(o.seq_id, step)) continue;  // finished, aborted or preempted since: its token is dropped
    apply_samples(seqs_.at(o.seq_id).get(), o, /*placeholder=*/true);
  }
  free_consumed_slots();
  return Status::ok();
}

}  // namespace dsinfer::scheduler
