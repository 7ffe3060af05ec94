// Speculator (see speculator.h).
#include "speculative/speculator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cache/prefix_cache.h"
#include "sampling/spec_sampling.h"
#include "scheduler/scheduler.h"
#include "speculative/verify_plan.h"

namespace dsinfer::speculative {

using scheduler::BatchPlan;
using scheduler::SeqPlan;
using scheduler::StepOutput;

Result<std::unique_ptr<Speculator>> Speculator::create(const SpeculativeConfig& cfg, const io::ModelConfig& target,
                                                       int32_t num_slots, std::unique_ptr<Drafter> device_drafter,
                                                       StepCostModel cost) {
  std::unique_ptr<Drafter> d = std::move(device_drafter);
  if (d && d->method() != cfg.method) return Status::error("speculator: the device drafter is of another method");
  if (!d) {
    DSI_ASSIGN_OR_RETURN(d, create_cpu_drafter(cfg, target, num_slots));
  }
  return std::make_unique<Speculator>(std::move(d), cfg, target.vocab_size, std::move(cost));
}

// Greedy with every logits-processing step a no-op for all drafts of this round (the Sampler's steps 2-4: bias,
// min_tokens, penalties): the draft is the argmax of the raw draft logits, which a device drafter takes itself.
bool plain_argmax(const SamplingParams& p, size_t num_output_tokens) {
  return p.greedy() && p.logit_bias.empty() && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 &&
         p.repetition_penalty == 1.0 && p.min_tokens <= int64_t(num_output_tokens);
}

namespace {
// DSINFER_SPEC_GATE_WARMUP=0: every round counts as past its warm-up (the gate before session 22: the A/B switch).
bool gate_warmup_setting() {
  const char* w = std::getenv("DSINFER_SPEC_GATE_WARMUP");
  return !(w && std::string(w) == "0");
}
}  // namespace

Speculator::Speculator(std::unique_ptr<Drafter> drafter, SpeculativeConfig cfg, int64_t vocab, StepCostModel cost)
    : warmup_(gate_warmup_setting() ? drafter->context_window() : 0),
      drafter_(std::move(drafter)),
      cfg_(std::move(cfg)),
      vocab_(vocab),
      cost_(std::move(cost)),
      gate_(size_t(std::max(cfg_.num_speculative_tokens, 0)), drafter_->resume_positions(), warmup_) {
  // DSINFER_SPEC_ONE_WAIT=0: every round verifies, then drafts, with a host wait each (the before/after switch).
  const char* w = std::getenv("DSINFER_SPEC_ONE_WAIT");
  one_wait_ = !(w && std::string(w) == "0");
  // DSINFER_SPEC_CHAIN=0: no chained verify steps (the before/after switch).
  const char* c = std::getenv("DSINFER_SPEC_CHAIN");
  chain_env_ = !(c && std::string(c) == "0");
  set_cost_model(std::move(cost_));
  const size_t k = size_t(cfg_.num_speculative_tokens);
  metrics_.method = spec_method_name(drafter_->method());
  metrics_.trials_per_position.assign(k, 0);
  metrics_.accepted_per_position.assign(k, 0);
  metrics_.predicted_survival_per_position.assign(k, 0.0);
  metrics_.survived_per_position.assign(k, 0);
  metrics_.verified_per_position.assign(k, 0);
  metrics_.calibration_trials.assign(kCalibrationBins, 0);
  metrics_.calibration_accepted.assign(kCalibrationBins, 0);
  metrics_.calibration_predicted.assign(kCalibrationBins, 0.0);
}

void Speculator::set_cost_model(StepCostModel cost) {
  if (!one_wait_) cost = cost.without_round();
  else if (cfg_.drain_gate) cost = cost.without_round_host();
  cost_ = std::move(cost);
}

void Speculator::count_calibration(const SeqDraft& d, int32_t verified, int32_t accepted) {
  // Survival a_k (drafts 1..k all accepted) against what happened; the reliability curve bins each verified draft
  // reached (its predecessors accepted) by its conditional acceptance estimate a_k / a_{k-1}.
  const size_t n = std::min({d.a.size(), size_t(verified), metrics_.survived_per_position.size()});
  for (size_t k = 0; k < n; ++k) {
    metrics_.verified_per_position[k] += 1;
    metrics_.predicted_survival_per_position[k] += double(d.a[k]);
    if (int32_t(k) < accepted) metrics_.survived_per_position[k] += 1;
    if (int32_t(k) > accepted) continue;
    const double prev = k == 0 ? 1.0 : double(d.a[k - 1]);
    const double p = prev > 0 ? std::clamp(double(d.a[k]) / prev, 0.0, 1.0) : 0.0;
    const size_t bin = std::min(kCalibrationBins - 1, size_t(p * double(kCalibrationBins)));
    metrics_.calibration_trials[bin] += 1;
    metrics_.calibration_predicted[bin] += p;
    if (int32_t(k) < accepted) metrics_.calibration_accepted[bin] += 1;
  }
}

std::vector<float> Speculator::survival(std::span<const float> c, bool greedy) const {
  // Prefix survival a_k = prod_{i<=k} sigmoid(c_i / T_i), T from sequential temperature scaling.
  const std::vector<double>& T = greedy && !cfg_.draft.sts_temperatures_greedy.empty()
                                             ? cfg_.draft.sts_temperatures_greedy
                                             : cfg_.draft.sts_temperatures;
  std::vector<float> a;
  double acc = 1.0;
  for (size_t k = 0; k < c.size(); ++k) {
    const double t = k < T.size() ? T[k] : 1.0;
    acc *= 1.0 / (1.0 + std::exp(-double(c[k]) / t));
    a.push_back(float(acc));
  }
  return a;
}

Status Speculator::sample(const BatchPlan& plan, std::span<const float> logits, int64_t eos_token_id,
                          sampling::Sampler& sampler, std::vector<StepOutput>& out,
                          const sampling::TokenBitmask* mask, structured::StructuredDecoding* sd) {
  const size_t V = size_t(vocab_);
  if (logits.size() != size_t(plan.num_logits()) * V)
    return Status::errorf("speculator: logits hold {} floats, expected {} rows x vocab {}", logits.size(),
                          plan.num_logits(), V);
  out.clear();
  ++metrics_.steps;
  int64_t rounds = 0;  // this step's decoding sequences, their tokens and verified rows (the gate's credit)
  int64_t tokens = 0;
  int32_t rows = 1;
  for (int32_t i = 0; i < plan.num_seqs(); ++i) {
    const SeqPlan& sp = plan.seqs[size_t(i)];
    if (!sp.needs_logits) continue;
    StepOutput o;
    o.plan_index = i;
    o.seq_id = sp.seq_id;
    const int32_t L = sp.num_spec_tokens;
    if (L == 0) {
      sampling::SampleInput in;
      in.logits = logits.subspan(size_t(sp.logits_row) * V, V);
      in.params = sp.params;
      in.prompt_tokens = sp.prompt_tokens;
      in.output_tokens = sp.output_tokens;
      in.rng = sp.rng;
      in.eos_token_id = eos_token_id;
      if (mask) in.token_bitmask = mask->row_if_active(sp.logits_row);
      o.samples.push_back(sampler.sample(in));
    } else {
      auto it = drafts_.find(sp.seq_id);
      const bool greedy = sp.params->greedy();
      if (!greedy && (it == drafts_.end() || it->second.q.size() < size_t(L) * V))
        return Status::errorf("speculator: sequence {} verifies {} drafts without their distributions", sp.seq_id, L);
      sampling::VerifyInput vi;
      vi.logits = logits.subspan(size_t(sp.logits_row) * V, size_t(L + 1) * V);
      vi.drafts = std::span<const int32_t>(plan.token_ids.data() + sp.token_offset + sp.num_new_tokens - L, size_t(L));
      if (!greedy) vi.draft_probs = std::span<const double>(it->second.q.data(), size_t(L) * V);
      vi.params = sp.params;
      vi.prompt_tokens = sp.prompt_tokens;
      vi.output_tokens = sp.output_tokens;
      vi.rng = sp.rng;
      vi.eos_token_id = eos_token_id;
      structured::TentativeMatcher tm(sd ? sd->matcher(sp.seq_id) : nullptr, vocab_);
      if (sd && sd->matcher(sp.seq_id)) {
        vi.row_mask = [&](size_t k) -> std::span<const int32_t> {
          if (k == 0 && mask) return mask->row_if_active(sp.logits_row);  // filled during the model step
          if (k > 0) tm.push(vi.drafts[k - 1]);
          return tm.mask();
        };
      }
      sampling::verify_drafts(vi, sampler, logprobs_mode_, o.samples);
      count_verified(sp, L, int32_t(o.samples.size()) - 1);
    }
    if (!sp.is_prefill) {
      rounds += 1;
      tokens += count_round(sp, L, o.samples.size());
      rows = std::max(rows, 1 + L);
    }
    out.push_back(std::move(o));
  }
  gate_.spent(rounds, rows, tokens, cost_);
  return Status::ok();
}

void Speculator::count_verified(const SeqPlan& sp, int32_t L, int32_t acc) {
  auto it = drafts_.find(sp.seq_id);
  if (it != drafts_.end()) count_calibration(it->second, L, acc);
  if (sp.params->greedy()) gate_.observe(L, acc, warm(sp.output_tokens.size()));
  if (sp.params->greedy() && cfg_.drain_gate) seq_acceptance_.observe(sp.seq_id, L, acc);
  for (int32_t k = 0; k < L && k <= acc && k < cfg_.num_speculative_tokens; ++k) {
    metrics_.trials_per_position[size_t(k)] += 1;
    if (k < acc) metrics_.accepted_per_position[size_t(k)] += 1;
  }
  metrics_.accepted_tokens += acc;
}

int64_t Speculator::count_round(const SeqPlan& sp, int32_t L, size_t samples) {
  int64_t emitted = int64_t(samples);
  if (sp.params && sp.params->max_tokens)  // none past max_tokens: a request's last round verifies its whole block
    emitted = std::clamp<int64_t>(*sp.params->max_tokens - int64_t(sp.output_tokens.size()), 0, emitted);
  ++metrics_.rounds;
  metrics_.emitted_tokens += emitted;
  metrics_.verified_tokens += 1 + L;
  return emitted;
}

bool Speculator::one_wait_round(const BatchPlan& plan, const scheduler::Scheduler& sched,
                                structured::StructuredDecoding* sd) const {
  if (!one_wait_ || !drafter_->supports_round() || plan.seqs.empty()) return false;
  if (!cost_.empty() && !gate_drafts(sched, next_step_seqs(sched))) return false;
  for (const SeqPlan& sp : plan.seqs) {
    if (sp.is_prefill || !sp.needs_logits || sched.seq_state(sp.seq_id) != scheduler::SeqState::Decoding) return false;
    if (!plain_argmax(*sp.params, sp.output_tokens.size()) || sp.params->logprobs) return false;
    if (sd && sd->matcher(sp.seq_id)) return false;
    if (sp.num_spec_tokens > drafter_->max_drafts() || sp.num_new_tokens != 1 + sp.num_spec_tokens) return false;
    auto c = context_.find(sp.seq_id);  // the drafter's context runs up to this step, whole (no gap to catch up)
    if (c == context_.end() || c->second.ingested_end != sp.start_pos || sp.start_pos + 1 < c->second.ready_at)
      return false;
  }
  return true;
}

Status Speculator::launch_round(const BatchPlan& plan) {
  round_ = Round{};
  for (const SeqPlan& sp : plan.seqs) {
    const int32_t L = sp.num_spec_tokens;
    const auto drafts = std::span<const int32_t>(plan.token_ids.data() + sp.token_offset + sp.num_new_tokens - L, size_t(L));
    round_.launched.push_back(
        {sp.slot, sp.start_pos, sp.logits_row, sp.token_offset, drafts, context_.at(sp.seq_id).context_start});
  }
  return drafter_->launch_round(round_.launched);
}

const BatchPlan* Speculator::chain(const BatchPlan& plan, const scheduler::Scheduler& sched) {
  chained_.reset();
  if (!chains(std::max(plan.seqs.size(), size_t(next_step_seqs(sched))))) return nullptr;  // as draft() will see it
  const RoundOutputs out = drafter_->round_outputs();
  if (!out.accepted) return nullptr;
  const cache::PrefixCache* pc = sched.cache().prefix();
  chained_ = chain_after(plan, cfg_.num_speculative_tokens, out.block, sched.cache().block_size(),
                         sched.cache().max_model_len(), pc && pc->has_snapshots());
  return chained_ ? &chained_->plan : nullptr;
}

bool Speculator::take_chained(const BatchPlan& plan, const scheduler::Scheduler& sched, bool one_wait) {
  if (!chained_) return false;
  const bool same = one_wait && is_chained_step(*chained_, plan, sched.cache().block_size());
  chained_.reset();
  metrics_.chained_steps += same ? 1 : 0;
  metrics_.chained_wasted += same ? 0 : 1;
  return same;
}

Status Speculator::finish_round(const BatchPlan& plan, std::vector<StepOutput>& out) {
  out.clear();
  ++metrics_.steps;
  DSI_RETURN_IF_ERROR(drafter_->finish_round(round_.launched, round_.results));
  if (chained_) settle_chained_step(*chained_, round_.results);
  const std::vector<RoundItem>& items = round_.launched;
  int64_t tokens = 0;
  int32_t rows = 1;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqPlan& sp = plan.seqs[i];
    const RoundResult& r = round_.results[i];
    StepOutput o;
    o.plan_index = int32_t(i);
    o.seq_id = sp.seq_id;
    for (int32_t t : r.tokens) {
      sampling::SampleResult x;
      x.token = t;
      o.samples.push_back(std::move(x));
    }
    const int32_t L = sp.num_spec_tokens;
    if (L > 0) count_verified(sp, L, r.accepted);
    tokens += count_round(sp, L, o.samples.size());
    rows = std::max(rows, 1 + L);
    round_.items.push_back({sp.slot, sp.start_pos + 1 + r.accepted, r.tokens.back(), 0, true, items[i].context_start});
    out.push_back(std::move(o));
  }
  gate_.spent(int64_t(plan.seqs.size()), rows, tokens, cost_);
  round_.active = true;
  metrics_.one_wait_rounds += 1;  // no draft_seconds: the drafter's part of the round is not timed apart from the verify
  return Status::ok();
}

void Speculator::take_round_proposals(const std::vector<ProposeItem>& items, std::span<const size_t> decoding,
                                      std::vector<Proposal>& props) {
  for (size_t j = 0; j < items.size(); ++j) {
    props[j] = std::move(round_.results[decoding[j]].proposal);
    props[j].tokens.resize(size_t(items[j].num_drafts));
    props[j].confidence_logits.resize(props[j].tokens.size());
  }
  metrics_.one_wait_proposals += 1;
}

bool Speculator::round_usable(const std::vector<ProposeItem>& items, std::span<const size_t> decoding) const {
  if (!round_.active || items.empty() || items.size() != decoding.size()) return false;
  for (size_t j = 0; j < items.size(); ++j) {
    if (decoding[j] >= round_.items.size()) return false;
    const ProposeItem& a = items[j];
    const ProposeItem& b = round_.items[decoding[j]];
    if (a.slot != b.slot || a.anchor_pos != b.anchor_pos || a.anchor_token != b.anchor_token ||
        a.context_start != b.context_start || a.num_drafts <= 0 || !a.pick_argmax)
      return false;
  }
  return true;
}

void Speculator::forget_finished(const scheduler::Scheduler& sched) {
  for (auto it = drafts_.begin(); it != drafts_.end();) {  // preempted, finished or aborted meanwhile
    const scheduler::SeqState st = sched.seq_state(it->first);
    it = st == scheduler::SeqState::Decoding ? std::next(it) : drafts_.erase(it);
  }
  // Not finished or aborted (a preempted one recomputes).
  auto live = [&](scheduler::SeqId id) {
    const scheduler::SeqState st = sched.seq_state(id);
    return st == scheduler::SeqState::Decoding || st == scheduler::SeqState::Prefilling ||
           st == scheduler::SeqState::Waiting;
  };
  std::erase_if(context_, [&](const auto& e) { return !live(e.first); });
  seq_acceptance_.retain(live);
}

Speculator::Committed Speculator::committed_positions(const BatchPlan& plan, std::span<const StepOutput> outputs,
                                                      scheduler::Scheduler& sched) {
  std::vector<int32_t> accepted(plan.seqs.size(), 0);
  for (const StepOutput& o : outputs) accepted[size_t(o.plan_index)] = int32_t(o.samples.size()) - 1;
  Committed c;
  c.next.resize(plan.seqs.size());
  c.ready.assign(plan.seqs.size(), true);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqPlan& sp = plan.seqs[i];
    drafts_.erase(sp.seq_id);
    const scheduler::SeqState st = sched.seq_state(sp.seq_id);
    if (st != scheduler::SeqState::Prefilling && st != scheduler::SeqState::Decoding) continue;
    const std::vector<int32_t>& out = *sched.output_tokens(sp.seq_id);
    const int32_t n = sp.num_new_tokens - sp.num_spec_tokens + (sp.num_spec_tokens > 0 ? accepted[i] : 0);
    const int64_t P = int64_t(sp.prompt_tokens.size());
    for (int32_t t = 0; t < n; ++t) {
      const int64_t p = sp.start_pos + t + 1;
      c.next[i].push_back(p < P ? sp.prompt_tokens[size_t(p)] : out[size_t(p - P)]);
    }
    c.ingest.push_back({sp.slot, sp.start_pos, n, sp.token_offset, c.next[i]});
    c.ready[i] = note_ingest(sp.seq_id, sp.start_pos, n);
    if (st == scheduler::SeqState::Decoding) c.decoding.push_back(i);
  }
  return c;
}

Status Speculator::draft(const BatchPlan& plan, std::span<const StepOutput> outputs, std::span<const float> hidden,
                         scheduler::Scheduler& sched, structured::StructuredDecoding* sd) {
  const auto t0 = std::chrono::steady_clock::now();
  forget_finished(sched);
  // 1. Every live planned sequence's newly committed positions.
  const Committed c = committed_positions(plan, outputs, sched);
  const std::vector<size_t>& decoding = c.decoding;

  // 2. A block of drafts after each decoding sequence's last token, drawn from the request's processing of the
  //    draft logits with its own Philox stream.
  std::vector<ProposeItem> items;
  std::vector<std::vector<int32_t>> hist(decoding.size());
  std::vector<bool> warmed(decoding.size());  // past the request's warm-up (the gate's observation of cut drafts)
  // Structured outputs: each constrained sequence's matcher walks this step's committed tokens, then the drafts.
  std::vector<std::unique_ptr<structured::TentativeMatcher>> tms(decoding.size());
  for (size_t j = 0; j < decoding.size(); ++j) {
    const SeqPlan& sp = plan.seqs[decoding[j]];
    hist[j] = *sched.output_tokens(sp.seq_id);
    warmed[j] = warm(hist[j].size());
    if (structured::SequenceMatcher* m = sd ? sd->matcher(sp.seq_id) : nullptr) {
      tms[j] = std::make_unique<structured::TentativeMatcher>(m, vocab_);
      for (size_t t = size_t(std::min<int64_t>(m->num_tokens(), int64_t(hist[j].size()))); t < hist[j].size(); ++t)
        tms[j]->push(hist[j][t]);
    }
    const int64_t anchor_pos = sched.num_computed(sp.seq_id);
    // Drafts at positions below max_model_len, as Scheduler::set_draft keeps them (near a request's end too: the
    // tokens past max_tokens are dropped when applied).
    const int32_t k = cfg_.num_speculative_tokens;
    int32_t num_drafts = int32_t(std::clamp<int64_t>(sched.cache().max_model_len() - 1 - anchor_pos, 0, k));
    const bool argmax = plain_argmax(*sp.params, hist[j].size()) && !tms[j];
    if (!c.ready[decoding[j]]) num_drafts = 0;  // its context still holds positions never ingested
    items.push_back({sp.slot, anchor_pos, hist[j].back(), num_drafts, argmax, context_[sp.seq_id].context_start});
  }
  std::vector<std::vector<double>> q(items.size());
  auto draw = [&](size_t j, int32_t k, std::span<const float> lg) {
    const SeqPlan& sp = plan.seqs[decoding[j]];
    sampling::SampleInput in;
    in.logits = lg;
    in.params = sp.params;
    in.prompt_tokens = sp.prompt_tokens;
    in.output_tokens = hist[j];
    in.rng = sp.rng;
    in.eos_token_id = sched.config().eos_token_id;
    if (tms[j]) in.token_bitmask = tms[j]->mask();
    const uint64_t anchor_index = hist[j].size() - 1 - size_t(k);
    std::vector<double> qk;
    const int32_t t = sampling::draw_draft(in, anchor_index, k, sp.params->greedy() ? nullptr : &qk);
    q[j].insert(q[j].end(), qk.begin(), qk.end());
    hist[j].push_back(t);
    if (tms[j]) tms[j]->push(t);
    return t;
  };
  // 3. The cost-model schedule (verify_plan.h) for greedy sequences: draft only where drafting is expected to pay at
  //    this batch, and verify the common length that maximises expected tokens per ms. Sampled sequences verify
  //    every draft: how many drafts a seeded draw verifies changes its tokens, so that choice must not depend on
  //    the batch or on measured times (reproducible and batch-invariant seeded sampling).
  const int64_t num_seqs = std::max<int64_t>(next_step_seqs(sched), int64_t(items.size()));
  gate_.begin_speculative_step(num_seqs, cost_);
  std::vector<bool> scheduled(items.size(), false);
  for (size_t j = 0; j < items.size(); ++j) scheduled[j] = !cost_.empty() && plan.seqs[decoding[j]].params->greedy();
  gate_drafting(items, scheduled, gate_drafts(sched, num_seqs));
  std::vector<Proposal> props(items.size());
  if (round_usable(items, decoding)) {
    // The one-wait round ingested and proposed after the same anchors already: the proposals of the sequences that
    // still decode (those of a sequence that finished in the round are dropped).
    take_round_proposals(items, decoding, props);
  } else {
    // A round whose proposals do not fit what the host decided after it (the gate stopped, a sequence without drafts)
    // proposes again. Its ingest already ran inside the round, reading the capture that a chained step launched since
    // may have overwritten: only a step without a round ingests here.
    if (!round_.active) DSI_RETURN_IF_ERROR(drafter_->ingest(c.ingest, hidden));
    if (std::any_of(items.begin(), items.end(), [](const ProposeItem& it) { return it.num_drafts > 0; }))
      DSI_RETURN_IF_ERROR(drafter_->propose(items, draw, props));
    DSI_RETURN_IF_ERROR(drafter_->flush());  // an ingest no propose took (nothing drafted this step)
    props.resize(items.size());
  }
  round_.active = false;
  std::vector<std::vector<float>> a(items.size());
  for (size_t j = 0; j < items.size(); ++j) {
    const bool greedy = plan.seqs[decoding[j]].params->greedy();
    a[j] = drafter_->has_confidence() ? survival(props[j].confidence_logits, greedy)
           : scheduled[j]             ? observed_survival()
                                      : std::vector<float>(props[j].tokens.size(), 1.0f);
    a[j].resize(props[j].tokens.size());
    metrics_.drafted_tokens += int64_t(props[j].tokens.size());
  }
  cut_to_best_length(props, a, scheduled, warmed, num_seqs);
  for (size_t j = 0; j < items.size(); ++j) {
    const SeqPlan& sp = plan.seqs[decoding[j]];
    SeqDraft& d = drafts_[sp.seq_id];
    if (!sp.params->greedy()) {
      d.q = std::move(q[j]);
      d.q.resize(std::min(d.q.size(), props[j].tokens.size() * size_t(vocab_)));
    }
    d.a = a[j];
    DSI_RETURN_IF_ERROR(sched.set_draft(sp.seq_id, std::move(props[j].tokens), std::move(a[j])));
  }
  metrics_.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace dsinfer::speculative

namespace dsinfer::speculative {

std::vector<float> Speculator::observed_survival() const {
  // Without a confidence head (MTP-1): the acceptance observed so far per position, (accepted + 1) / (trials + 2).
  std::vector<float> a;
  double acc = 1.0;
  for (size_t k = 0; k < metrics_.trials_per_position.size(); ++k) {
    acc *= double(metrics_.accepted_per_position[k] + 1) / double(metrics_.trials_per_position[k] + 2);
    a.push_back(float(acc));
  }
  return a;
}

int64_t Speculator::next_step_seqs(const scheduler::Scheduler& sched) {
  const scheduler::SchedulerStats st = sched.stats();
  const int64_t cap = std::min<int64_t>(sched.config().max_num_seqs, sched.cache().num_slots());
  return std::max<int64_t>(1, std::min<int64_t>(cap, int64_t(st.running) + int64_t(st.waiting)));
}

bool Speculator::resting(const scheduler::Scheduler& sched) const {
  // Drafts held (this step's, or those of sequences a prompt step left waiting: spec_prompts_apart) are verified first.
  if (cost_.empty() || sched.holds_drafts()) return false;
  return !gate_drafts(sched, next_step_seqs(sched));
}

bool Speculator::gate_drafts(const scheduler::Scheduler& sched, int64_t n) const {
  if (!gate_.should_draft(n, cost_)) return false;
  if (!cfg_.drain_gate || cost_.empty() || n <= 1) return true;
  const scheduler::SchedulerStats st = sched.stats();
  if (st.waiting > 0) return true;
  const double slowest = seq_acceptance_.slowest(
      [&](uint64_t id) { return sched.seq_state(id) == scheduler::SeqState::Decoding; }, st.running);
  return gate_.drain_pays(n, slowest, cost_);
}

void Speculator::count_rest_round(int64_t num_decoding) {
  gate_.rest_step(num_decoding, cost_);
  metrics_.rest_steps += 1;
  metrics_.rounds += num_decoding;
  metrics_.emitted_tokens += num_decoding;
  metrics_.verified_tokens += num_decoding;
}

bool Speculator::note_ingest(scheduler::SeqId id, int64_t start_pos, int32_t count) {
  auto [it, fresh] = context_.try_emplace(id);
  Context& c = it->second;
  if (start_pos > c.ingested_end || (fresh && start_pos > 0)) {  // a gap: positions the drafter never saw
    c.ready_at = start_pos + drafter_->resume_positions();
    c.context_start = start_pos;
  } else if (start_pos == 0) {
    c.ready_at = 0;  // (re)computed from its first position: whole again
    c.context_start = 0;
  }
  c.ingested_end = start_pos + count;
  // The sequence's next anchor is the position after the last committed one.
  return c.ingested_end >= c.ready_at;
}

void Speculator::gate_drafting(std::vector<ProposeItem>& items, const std::vector<bool>& scheduled, bool drafts) {
  metrics_.gate_probes = gate_.probes();  // begin_speculative_step may have started one
  if (cost_.empty() || drafts) return;
  for (size_t j = 0; j < items.size(); ++j)
    if (scheduled[j]) items[j].num_drafts = 0;
}

void Speculator::cut_to_best_length(std::vector<Proposal>& props, std::vector<std::vector<float>>& a,
                                    const std::vector<bool>& scheduled, const std::vector<bool>& warmed,
                                    int64_t num_seqs) {
  std::vector<std::vector<float>> sa;
  for (size_t j = 0; j < props.size(); ++j)
    if (scheduled[j] && !props[j].tokens.empty()) sa.push_back(a[j]);
  if (sa.empty()) return;
  // The drafting time is spent by now, but it is part of this round's time (StepCostModel::round_ms): it weighs
  // the choice like the round-rate it is (a long verify is worth more when the draft already cost much).
  VerifyChoice c;
  if (chains(size_t(num_seqs))) {
    for (const std::vector<float>& x : sa) c.length = std::max(c.length, int32_t(x.size()));
  } else {
    c = best_verify_length(sa, num_seqs, cost_);
  }
  for (size_t j = 0; j < props.size(); ++j) {
    // The confidence head's survival of the drafts cut here is their expected outcome for the gate.
    if (scheduled[j] && drafter_->has_confidence()) gate_.observe_expected(a[j], size_t(c.length), warmed[j]);
    if (!scheduled[j] || props[j].tokens.size() <= size_t(c.length)) continue;
    props[j].tokens.resize(size_t(c.length));
    a[j].resize(size_t(c.length));
  }
  metrics_.scheduled_rounds += 1;
  metrics_.scheduled_verify_length += c.length;
}

}  // namespace dsinfer::speculative
