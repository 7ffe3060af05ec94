// Engine: asynchronous steps (docs/engine_core.md "Asynchronous steps"). One call of step_async():
//   schedule step t+1 (a decode token sampled by step t is a placeholder the device fills from t's sampled ids)
//   -> launch its forward and sampling -> wait for step t's samples, detokenize, resolve them in the scheduler
//   (stop conditions, one step late) -> advance the scheduler past step t+1.
// So the device runs step t+1 while the host handles step t. A sequence that finished at step t was planned in
// step t+1 already: that surplus token is dropped by the scheduler (never emitted nor counted) and its slot is
// freed only once step t+1 has been consumed.
#include "engine/engine.h"
#include "scheduler/step_sampling.h"
#include "speculative/speculator.h"

namespace dsinfer::engine {

void Engine::choose_step_mode(bool async_scheduling) {
  const char* why = nullptr;
  if (!async_scheduling) why = "async scheduling off";
  else if (spec_) why = "speculative decoding verifies on the host";
  else if (sched_->cache().prefix()) why = "prefix caching";
  else if (!device_sampling_) why = "host sampling";
  else if (!runner_->supports_async_steps()) why = "the runner has no asynchronous steps";
  async_ = why == nullptr;
  step_mode_ = async_ ? "async" : fmt::format("sync ({})", why);
  // Speculation at rest runs the plain steps (Engine::step): asynchronous under the other conditions above.
  spec_rest_async_ = spec_ && async_scheduling && !sched_->cache().prefix() && spec_rest_device_ &&
                     runner_->supports_async_steps();
}

namespace {
// Presence / frequency / repetition penalties are packed from the whole output history, so that step needs the
// token of the step before on the host.
bool needs_history(const scheduler::BatchPlan& plan) {
  for (const scheduler::SeqPlan& sp : plan.seqs) {
    if (!sp.needs_logits || !sp.params) continue;
    const sampling::SamplingParams& p = *sp.params;
    if (p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1) return true;
  }
  return false;
}
}  // namespace

Status Engine::step_async() {
  const scheduler::BatchPlan& plan = sched_->schedule();
  if (plan.empty()) return inflight_.active ? finish_inflight() : Status::ok();
  // Resolving first puts the real ids in the output histories the rows are packed from (the plan's spans see them).
  if (inflight_.active && needs_history(plan)) DSI_RETURN_IF_ERROR(finish_inflight());
  Status s = runner_->copy_state(plan.state_copies);  // none: prefix caching keeps steps synchronous
  if (s) s = runner_->begin_sampled_step(plan);
  if (s) s = scheduler::pack_step_rows(plan, model_config().vocab_size, model_config().eos_token_id, nullptr, rows_);
  if (s) s = runner_->launch_sample_rows(rows_);
  if (!s) {
    // Nothing of this plan was taken as computed: the next schedule() plans it again.
    if (inflight_.active) (void)finish_inflight();
    return s;
  }
  next_.active = true;
  next_.step = plan.step;
  next_.rows.clear();
  for (const scheduler::SeqPlan& sp : plan.seqs)
    if (sp.needs_logits)
      next_.rows.push_back({sp.request_id, sp.seq_id, sp.start_pos + sp.num_new_tokens - 1,
                            sp.params && sp.params->logprobs, sp.is_prefill});
  // The device now runs step t+1 (queued behind step t): handle step t on the host meanwhile.
  Status done = inflight_.active ? finish_inflight() : Status::ok();
  // advance() only reads the plan, so it runs even when resolving failed: the launched sampling must be waited for.
  s = sched_->advance();
  std::swap(inflight_, next_);
  DSI_RETURN_IF_ERROR(done);
  return s;
}

Status Engine::finish_inflight() {
  inflight_.active = false;
  DSI_RETURN_IF_ERROR(runner_->wait_sample_rows(device_samples_));
  if (device_samples_.size() != inflight_.rows.size())
    return Status::errorf("device sampling: {} results for {} rows", device_samples_.size(), inflight_.rows.size());
  outputs_.clear();
  for (size_t j = 0; j < inflight_.rows.size(); ++j) {
    const InflightRow& row = inflight_.rows[j];
    const ops::SampleRowOut& r = device_samples_[j];
    if (!sched_->awaits(row.seq_id, inflight_.step)) continue;  // finished / aborted / preempted since
    if (r.status == ops::kSampleNonFinite) {
      fail_seq(row.request_id, row.seq_id, row.position, "the model produced non-finite logits (NaN or Inf)");
      continue;
    }
    if (r.status != ops::kSampleOk || r.token < 0)
      return Status::errorf("device sampling: row {} was rejected (status {}, token {})", j, r.status, r.token);
    scheduler::StepOutput& o = outputs_.emplace_back();
    o.plan_index = int32_t(j);
    o.seq_id = row.seq_id;
    o.samples.push_back(sampling::to_sample_result(r, row.logprobs));
    DSI_RETURN_IF_ERROR(detokenize(row.request_id, o));
  }
  DSI_RETURN_IF_ERROR(sched_->resolve(inflight_.step, outputs_));
  if (spec_) {  // speculation at rest (the only way a speculative engine takes these steps)
    int64_t decoding = 0;
    for (const scheduler::StepOutput& o : outputs_) decoding += inflight_.rows[size_t(o.plan_index)].prefill ? 0 : 1;
    spec_->count_rest_round(decoding);
  }
  apply_updates();
  return Status::ok();
}

}  // namespace dsinfer::engine
