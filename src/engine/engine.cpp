// Engine (see engine.h). Read top to bottom: create (runner, tokenizer, state cache sized from the layout,
// scheduler) -> add (body -> prompt ids + sampling params) -> step (schedule, run, sample, detokenize,
// update, collect outputs).
#include "engine/engine.h"

#include <algorithm>
#include <filesystem>

#include "chat/chat_encoding.h"
#include "chat/chat_types.h"
#include "chat/parser_options.h"
#include "engine/engine_config.h"
#include "engine/graph_warmup.h"
#include "engine/prefix_setup.h"
#include "engine/runner_factory.h"
#include "engine/step_cost_setup.h"
#include "scheduler/step_sampling.h"
#include "speculative/speculator.h"
#include "structured/tool_call_tag.h"

namespace dsinfer::engine {

// Per sequence: its streaming detokenizer and (chat) output parser, and what it produced so far.
struct Engine::SeqOut {
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  std::unique_ptr<chat::OutputParser> parser;
  Choice choice;
};

struct Engine::Pending {
  RequestOutput out;
  bool want_logprobs = false;
  std::optional<chat::ParserOptions> parser_opts;
  std::map<scheduler::SeqId, SeqOut> seqs;
  int32_t live = 0;
  bool sampled = false;  // not greedy (counted in sampled_live_ while speculation is on)
};

Engine::~Engine() = default;

double Engine::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& o) {
  DSI_ASSIGN_OR_RETURN(const runner::RunnerOptions ro, resolve_runner_options(o));
  DSI_ASSIGN_OR_RETURN(std::unique_ptr<runner::ModelRunner> runner, create_runner(ro));
  return create_with_runner(o, std::move(runner));
}

Result<std::unique_ptr<Engine>> Engine::create_with_runner(const EngineOptions& o,
                                                           std::unique_ptr<runner::ModelRunner> runner) {
  std::unique_ptr<Engine> e(new Engine());
  e->t0_ = std::chrono::steady_clock::now();
  e->runner_ = std::move(runner);
  const io::ModelConfig& mc = e->runner_->config();
  DSI_ASSIGN_OR_RETURN(const EngineConfig cfg, resolve_engine_config(o, mc, e->runner_->kv_elem_bytes()));
  e->max_model_len_ = cfg.max_model_len;
  if (!cfg.tokenizer_path.empty()) {
    DSI_ASSIGN_OR_RETURN(e->tok_, tokenizer::Tokenizer::from_file(cfg.tokenizer_path));
    if (int64_t(e->tok_->vocab_size()) > mc.vocab_size)
      return Status::errorf("{}: {} token ids but the model's vocab_size is {}", cfg.tokenizer_path,
                            e->tok_->vocab_size(), mc.vocab_size);
  }
  DSI_ASSIGN_OR_RETURN(cache::StateCache sc, cache::StateCache::create(mc, cfg.cache));
  if (e->runner_->state_ranks() > 1) DSI_RETURN_IF_ERROR(sc.set_ranks(e->runner_->state_ranks()));  // DP attention
  DSI_ASSIGN_OR_RETURN(const PrefixMemory pmem, setup_prefix_cache(o, *e->runner_, cfg.speculative.enabled(),
                                                                   cfg.cache.budget_bytes, sc));
  DSI_RETURN_IF_ERROR(e->runner_->bind_state(sc.layout(), sc.num_slots(), sc.num_blocks(), e->max_model_len_));
  DSI_RETURN_IF_ERROR(e->runner_->bind_snapshots(pmem.num_snapshots));
  DSI_RETURN_IF_ERROR(e->runner_->bind_host_blocks(pmem.num_host_blocks));
  const int32_t num_slots = sc.num_slots();
  e->sched_ = std::make_unique<scheduler::Scheduler>(cfg.scheduler, std::move(sc));
  if (cfg.speculative.enabled()) {
    // The runner's own drafter when it has one (CUDA: on the GPU, reading the captured states in place).
    DSI_ASSIGN_OR_RETURN(std::unique_ptr<speculative::Drafter> dd, e->runner_->create_drafter(cfg.speculative, num_slots));
    DSI_ASSIGN_OR_RETURN(e->spec_, speculative::Speculator::create(cfg.speculative, mc, num_slots, std::move(dd)));
    DSI_RETURN_IF_ERROR(e->runner_->set_hidden_capture(e->spec_->tapped_layers()));
    // After the capture is on: the profiled verify steps capture hidden states as the real ones do.
    DSI_ASSIGN_OR_RETURN(speculative::StepCostModel cost,
                         setup_step_cost(o, cfg.speculative, *e->runner_, e->spec_->drafter(),
                                         e->sched_->cache(), e->max_model_len_));
    e->spec_->set_cost_model(std::move(cost));
    e->spec_->enable_chained_steps(e->runner_->supports_chained_steps());
    e->sched_->set_spec_lookahead(e->spec_->chained_lookahead(), speculative::kChainMaxSeqs);
  }
  if (cfg.graph_warmup) {  // after the cost model's profile: the graphs of every bucket, captured before a request
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t max_seqs = std::min<int64_t>(cfg.scheduler.max_num_seqs, num_slots);
    const GraphWarmup w{.batch_sizes = e->runner_->graph_batch_sizes(max_seqs), .max_seqs = max_seqs,
                        .max_batched_tokens = cfg.scheduler.max_num_batched_tokens, .max_model_len = e->max_model_len_,
                        .max_drafts = e->spec_ ? cfg.speculative.num_speculative_tokens : 0};
    DSI_RETURN_IF_ERROR(warm_up_graphs(*e->runner_, e->sched_->cache(), w,
                                       e->spec_ ? e->spec_->tapped_layers() : std::vector<int64_t>{},
                                       e->spec_ ? &e->spec_->drafter() : nullptr));
    if (!w.batch_sizes.empty())
      e->warmup_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  e->graphs_at_start_ = e->runner_->diagnostics().graphs_captured();
  e->drafter_graphs_at_start_ = e->spec_ ? e->spec_->drafter().graphs_captured() : 0;
  // Speculative verification needs full logits rows on the host, so it keeps the host sampler.
  e->device_sampling_ = cfg.device_sampling && e->runner_->supports_device_sampling() && !e->spec_;
  // At rest (speculator.h: no draft pays at this batch) it samples as the engine without speculation does.
  e->spec_rest_device_ = e->spec_ && cfg.device_sampling && e->runner_->supports_device_sampling();
  e->choose_step_mode(cfg.async_scheduling);
  return e;
}

SpeculativeMetrics Engine::speculative_metrics() const {
  if (!spec_) return SpeculativeMetrics{};
  SpeculativeMetrics m = spec_->metrics();
  m.graphs_captured = runner_->diagnostics().graphs_captured();
  return m;
}

Engine::GraphCounts Engine::graph_counts() const {
  const int64_t all = runner_->diagnostics().graphs_captured();
  const int64_t drafter = spec_ ? spec_->drafter().graphs_captured() : 0;
  return {graphs_at_start_, all - graphs_at_start_, drafter_graphs_at_start_, drafter - drafter_graphs_at_start_,
          warmup_seconds_};
}

structured::GrammarCacheStats Engine::grammar_stats() const {
  auto g = grammars();
  return g ? (*g)->stats() : structured::GrammarCacheStats{};
}

Result<std::vector<int32_t>> Engine::prompt_ids(const Request& req) const {
  if (req.endpoint == Endpoint::kChatCompletions) {
    if (!req.conversation) return Status::error("a chat request needs a conversation");
    if (!tok_)
      return Status::field_error("messages",
                                 "'messages' needs a tokenizer, and this model directory has no tokenizer.json");
    Result<std::vector<int32_t>> ids =
        chat::encode_prompt(chat::render_prompt(*req.conversation, chat::chat_family(model_config())), *tok_);
    if (!ids) return ids.status().with_field("messages");
    return ids;
  }
  if (req.prompt_is_ids) return req.prompt_ids;
  if (!tok_)
    return Status::field_error(
        "prompt", "a text 'prompt' needs a tokenizer; send token ids (a JSON array of integers) instead");
  Result<std::vector<int32_t>> ids = tok_->encode(req.prompt_text);
  if (!ids) return ids.status().with_field("prompt");
  return ids;
}

Result<int64_t> Engine::flush_prefix_cache() {
  if (has_unfinished())
    return Status::error("requests are queued or running; the prefix cache can only be flushed when the engine is idle");
  return sched_->cache_between_steps().flush_prefix_cache();
}

Result<scheduler::RequestId> Engine::add(const Request& req) {
  auto p = std::make_unique<Pending>();
  scheduler::RequestSpec spec;
  DSI_ASSIGN_OR_RETURN(spec.prompt, prompt_ids(req));
  if (req.endpoint == Endpoint::kChatCompletions) {
    p->parser_opts = chat::parser_options_for(*req.conversation, chat::chat_family(model_config()));
    p->out.chat = true;
  }
  spec.params = req.sampling;
  if (req.structured.active()) {
    // A constraint that completes ends the request (docs/decisions.md, README "Structured outputs"): min_tokens
    // and ignore_eos cannot extend the output past the end of the constraint's language, where only text outside
    // the constraint could follow.
    spec.params.min_tokens = 0;
    spec.params.ignore_eos = false;
  }
  DSI_ASSIGN_OR_RETURN(structured::Grammar grammar, compile_structured(req));
  if (grammar) DSI_RETURN_IF_ERROR(ensure_structured());
  const std::vector<int32_t> prompt_ids = grammar ? spec.prompt : std::vector<int32_t>();
  p->out.return_token_ids = req.return_token_ids;
  if (!tok_) {
    if (!spec.params.stop.empty())
      return Status::field_error("stop", "'stop' strings need a tokenizer; use 'stop_token_ids'");
    p->out.return_token_ids = true;  // without a tokenizer the ids are the only output
  }
  p->want_logprobs = spec.params.logprobs;
  p->out.prompt_tokens = int64_t(spec.prompt.size());
  p->out.prompt_token_ids = spec.prompt;
  const int32_t n = spec.params.n;
  const bool chat = req.endpoint == Endpoint::kChatCompletions;
  Result<scheduler::RequestId> added = sched_->add_request(std::move(spec));
  if (!added) return added.status().with_field(chat ? "messages" : "prompt");  // unless it names its own field
  const scheduler::RequestId id = *added;
  p->sampled = spec_ && !req.sampling.greedy();
  if (p->sampled) ++sampled_live_;
  p->out.id = id;
  p->out.arrival_s = now_s();
  const std::vector<scheduler::SeqId> seqs = sched_->seq_ids(id);
  if (grammar) track_structured(req, grammar, prompt_ids, seqs);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SeqOut& so = p->seqs[seqs[i]];
    so.choice.index = int32_t(i);
    if (tok_) so.decoder = std::make_unique<tokenizer::StreamDecoder>(*tok_, /*skip_special_tokens=*/true);
    if (p->parser_opts) so.parser = std::make_unique<chat::OutputParser>(*p->parser_opts);
  }
  p->live = n;
  pending_[id] = std::move(p);
  return id;
}

Status Engine::step() {
  // Structured outputs compute the next step's bitmasks from the sampled tokens: those steps stay synchronous.
  const bool structured = structured_ && !structured_->empty();
  if (async_ && !structured) return step_async();
  bool rest = spec_resting();
  if (spec_ && !rest && inflight_.active) {
    // Out of rest: the launched plain step is resolved first (it can finish requests and so change the choice).
    DSI_RETURN_IF_ERROR(finish_inflight());
    rest = spec_resting();
  }
  // Speculation at rest: the plain path, asynchronous where the engine's plain steps are, without the hidden-state
  // capture (the plain step's own graph); out of rest the capture is back before the step that needs it.
  if (spec_) DSI_RETURN_IF_ERROR(set_spec_capture(!rest));
  if (spec_rest_async_ && !structured && rest) return step_async();
  if (inflight_.active) DSI_RETURN_IF_ERROR(finish_inflight());
  return step_sync(rest);
}

bool Engine::spec_resting() const {
  return spec_ && sampled_live_ == 0 && spec_->resting(*sched_);
}

Status Engine::set_spec_capture(bool on) {
  if (on == spec_capture_) return Status::ok();
  DSI_RETURN_IF_ERROR(runner_->set_hidden_capture(on ? spec_->tapped_layers() : std::vector<int64_t>{}));
  spec_capture_ = on;
  return Status::ok();
}

Status Engine::step_sync(bool rest) {
  const bool device_sampling = device_sampling_ || (rest && spec_rest_device_);
  phases_.begin_step();
  const scheduler::BatchPlan& plan = sched_->schedule();
  if (plan.empty()) return Status::ok();
  phases_.mark(StepPhases::kSchedule);
  const auto t0 = std::chrono::steady_clock::now();
  std::future<Status> masks = start_bitmasks(plan);
  const bool masked = masks.valid();
  // Speculation's one-wait round: the verify step's logits stay on the device, where the drafter accepts and drafts.
  const bool one_wait = spec_ && !rest && !device_sampling && !masked && spec_->one_wait_round(plan, *sched_, structured_.get());
  // The verify step the last round chained (launched before the host read that round) when it is this plan's.
  const bool chained = spec_ && spec_->take_chained(plan, *sched_, one_wait);
  Status ran = runner_->copy_state(plan.state_copies);  // prefix-cache hits: restore / replay setup
  if (ran && (device_sampling || one_wait)) logits_.clear();
  if (ran && !chained)
    ran = device_sampling || one_wait ? runner_->begin_sampled_step(plan) : runner_->step(plan, logits_);
  if (masked) DSI_RETURN_IF_ERROR(masks.get());
  DSI_RETURN_IF_ERROR(ran);
  phases_.mark(StepPhases::kLaunch);
  const int64_t V = model_config().vocab_size;
  const int64_t eos = model_config().eos_token_id;
  const sampling::TokenBitmask* mask = masked && bitmask_.any_active() ? &bitmask_ : nullptr;
  if (device_sampling) {
    // The forward is still running on the GPU while the rows are packed here; only ids and logprobs come back.
    DSI_RETURN_IF_ERROR(scheduler::pack_step_rows(plan, V, eos, mask, rows_));
    DSI_RETURN_IF_ERROR(runner_->sample_rows(rows_, device_samples_));
    DSI_RETURN_IF_ERROR(scheduler::collect_device_samples(plan, device_samples_, outputs_, nonfinite_));
    for (int32_t i : nonfinite_) fail_request(plan.seqs[size_t(i)], "the model produced non-finite logits (NaN or Inf)");
  } else if (one_wait) {
    DSI_RETURN_IF_ERROR(spec_->launch_round(plan));
    // The next round's verify step, queued now so that the device runs it while the host reads this round.
    if (const scheduler::BatchPlan* next = spec_->chain(plan, *sched_))
      DSI_RETURN_IF_ERROR(runner_->begin_chained_step(*next, spec_->drafter().round_outputs()));
    DSI_RETURN_IF_ERROR(spec_->finish_round(plan, outputs_));
    phases_.mark(StepPhases::kRound);
  } else if (spec_ && !rest) {
    DSI_RETURN_IF_ERROR(spec_->sample(plan, logits_, eos, sampler_, outputs_, mask, structured_.get()));
  } else {
    DSI_RETURN_IF_ERROR(scheduler::sample_step(plan, logits_, V, eos, sampler_, outputs_, nonfinite_, mask));
    // A broken model (NaN / Inf weights or activations) fails only the requests whose logits are not finite.
    for (int32_t i : nonfinite_) fail_request(plan.seqs[size_t(i)], "the model produced non-finite logits (NaN or Inf)");
  }
  phases_.mark(StepPhases::kSample);  // the paths above other than the one-wait round
  // Text deltas let the stop checker match stop strings across token boundaries.
  for (scheduler::StepOutput& o : outputs_) DSI_RETURN_IF_ERROR(detokenize(plan.seqs[size_t(o.plan_index)].request_id, o));
  phases_.mark(StepPhases::kDetokenize);
  DSI_RETURN_IF_ERROR(sched_->update(outputs_));
  DSI_RETURN_IF_ERROR(runner_->copy_state(sched_->state_saves()));  // boundary snapshots, before the slot moves on
  phases_.mark(StepPhases::kUpdate);
  if (spec_ && rest) {
    int64_t decoding = 0;
    for (const scheduler::StepOutput& o : outputs_) decoding += plan.seqs[size_t(o.plan_index)].is_prefill ? 0 : 1;
    spec_->count_rest_round(decoding);
  } else if (spec_) {
    // Speculative decoding: the drafter reads the committed positions' hidden states and drafts the next step.
    DSI_RETURN_IF_ERROR(spec_->draft(plan, outputs_, runner_->captured_hidden(), *sched_, structured_.get()));
    spec_->metrics().step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  phases_.mark(StepPhases::kDraft);
  apply_updates();
  phases_.mark(StepPhases::kApply);
  phases_.end_step();
  return Status::ok();
}

Status Engine::detokenize(scheduler::RequestId rid, scheduler::StepOutput& o) {
  auto pit = pending_.find(rid);
  if (pit == pending_.end()) return Status::ok();
  SeqOut& so = pit->second->seqs[o.seq_id];
  if (!so.decoder) return Status::ok();
  o.text.clear();
  for (const sampling::SampleResult& r : o.samples) {
    std::string delta;
    DSI_RETURN_IF_ERROR(so.decoder->push(r.token, delta));
    o.text.push_back(std::move(delta));
  }
  return Status::ok();
}

void Engine::apply_updates() {
  const double t = now_s();
  if (structured_) structured_->advance(sched_->updates());
  for (const scheduler::SeqUpdate& u : sched_->updates()) {
    auto pit = pending_.find(u.request_id);
    if (pit == pending_.end()) continue;
    Pending& p = *pit->second;
    SeqOut& so = p.seqs[u.seq_id];
    if (!u.tokens.empty() && p.out.first_token_s < 0) p.out.first_token_s = t;
    so.choice.token_ids.insert(so.choice.token_ids.end(), u.tokens.begin(), u.tokens.end());
    if (p.want_logprobs) so.choice.logprobs.insert(so.choice.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    std::string text = u.text;
    if (u.finished && so.decoder && u.finish_reason != sampling::FinishReason::Stop) so.decoder->finish(text);
    StreamEvent ev;
    ev.request_id = u.request_id;
    ev.index = so.choice.index;
    ev.token_ids = u.tokens;
    if (p.want_logprobs) ev.logprobs = u.logprobs;
    if (so.parser) {
      chat::ParseDelta d = so.parser->push(text);
      if (u.finished) {
        Status s = so.parser->finish(d);
        if (!s) so.choice.parse_error = ev.parse_error = s.message();
      }
      so.choice.reasoning += d.reasoning;
      so.choice.text += d.content;
      ev.text = std::move(d.content);
      ev.reasoning = std::move(d.reasoning);
      ev.tool_calls = d.tool_calls;
      ev.tool_call_deltas = std::move(d.tool_call_deltas);
      for (auto& c : d.tool_calls) so.choice.tool_calls.push_back(std::move(c));
    } else {
      so.choice.text += text;
      ev.text = std::move(text);
    }
    if (u.finished) {
      so.choice.finish_reason = sampling::finish_reason_name(u.finish_reason);
      if (!so.choice.tool_calls.empty() && u.finish_reason == sampling::FinishReason::Stop) so.choice.finish_reason = "tool_calls";
      p.out.completion_tokens += int64_t(so.choice.token_ids.size());
      --p.live;
      ev.finished = true;
      ev.finish_reason = so.choice.finish_reason;
    }
    if (on_event_) on_event_(ev);
    if (u.request_finished || p.live == 0) finish_request(pit, t);
  }
}

Result<structured::GrammarCache*> Engine::grammars() const {
  if (!tok_)
    return Status::error("structured outputs need a tokenizer, and this model directory has no tokenizer.json");
  std::call_once(grammars_once_, [this] {
    auto c = structured::GrammarCache::create(*tok_, model_config().vocab_size, int32_t(model_config().eos_token_id));
    if (c)
      grammars_ = std::shared_ptr<structured::GrammarCache>(std::move(c).value());
    else
      grammars_status_ = c.status();
  });
  if (!grammars_) return grammars_status_;
  return grammars_.get();
}

Status Engine::ensure_structured() {
  if (structured_) return Status::ok();
  DSI_ASSIGN_OR_RETURN(structured::GrammarCache * cache, grammars());
  (void)cache;
  DSI_ASSIGN_OR_RETURN(structured_,
                       structured::StructuredDecoding::create(*tok_, model_config().vocab_size,
                                                              int32_t(model_config().eos_token_id), 0, grammars_));
  return Status::ok();
}

Result<structured::Grammar> Engine::compile_structured(const Request& req) const {
  if (!req.structured.active()) return structured::Grammar();
  // Errors name the top-level request field ("response_format" for "response_format.json_schema.schema").
  const std::string param = req.structured.field.substr(0, req.structured.field.find('.'));
  if (!tok_)
    return Status::field_errorf(
        param, "'{}' (structured outputs) needs a tokenizer, and this model directory has no tokenizer.json",
        req.structured.field);
  Result<structured::GrammarCache*> cache = grammars();
  if (!cache) return cache.status().with_field(param);
  // Strict tool calls are parsed model-independently; their grammar uses this model's DSML tags.
  Result<StructuredOutput> so = structured::resolve_tool_calls(req.structured, chat::chat_family(model_config()));
  if (!so) return so.status().with_field(param);
  Result<structured::Grammar> g = (*cache)->get(*so);
  if (!g) return g.status().with_field(param);
  return g;
}

void Engine::track_structured(const Request& req, const structured::Grammar& g, const std::vector<int32_t>& prompt,
                              const std::vector<scheduler::SeqId>& seqs) {
  structured::StructuredDecoding::SeqOptions so;
  so.stop_tokens = req.sampling.stop_token_ids;
  // Chat prompts that end inside the reasoning (thinking mode, or a continued reasoning prefix): the grammar
  // applies to the answer after </think>.
  if (req.endpoint == Endpoint::kChatCompletions) {
    const auto start = tok_->token_to_id("<think>"), end = tok_->token_to_id(structured::kThinkEnd);
    const auto last = [&](std::optional<int32_t> id) {
      auto it = id ? std::find(prompt.rbegin(), prompt.rend(), *id) : prompt.rend();
      return it == prompt.rend() ? int64_t(-1) : int64_t(prompt.rend() - it - 1);
    };
    so.wait_for_think_end = start && last(start) > last(end);
  }
  for (scheduler::SeqId s : seqs) structured_->add(s, g, so);
}

std::future<Status> Engine::start_bitmasks(const scheduler::BatchPlan& plan) {
  if (!structured_ || structured_->empty()) return {};
  return std::async(std::launch::async, [this, &plan]() -> Status {
    try {
      structured_->fill_bitmask(plan, bitmask_);
    } catch (const std::exception& e) {
      return Status::errorf("structured outputs: computing the token bitmasks failed: {}", e.what());
    }
    return Status::ok();
  });
}

void Engine::finish_request(std::map<scheduler::RequestId, std::unique_ptr<Pending>>::iterator it, double t) {
  RequestOutput& out = it->second->out;
  out.finish_s = t;
  for (auto& [sid, s] : it->second->seqs) out.choices.push_back(std::move(s.choice));
  std::sort(out.choices.begin(), out.choices.end(), [](const Choice& a, const Choice& b) { return a.index < b.index; });
  finished_.push_back(std::move(out));
  if (it->second->sampled) --sampled_live_;
  pending_.erase(it);
}

Status Engine::abort(scheduler::RequestId id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return Status::errorf("abort: request {} is unknown or has already finished", id);
  DSI_RETURN_IF_ERROR(sched_->abort(id));  // frees the state of every live sequence
  close_open_seqs(id, *it->second, sampling::finish_reason_name(sampling::FinishReason::Abort));
  finish_request(it, now_s());
  return Status::ok();
}

void Engine::fail_all(const std::string& why) {
  inflight_.active = false;  // the step in flight died with the runner
  while (!pending_.empty()) {
    auto it = pending_.begin();
    (void)sched_->abort(it->first);
    it->second->out.error = why + "; the request was stopped";
    close_open_seqs(it->first, *it->second, "error");
    finish_request(it, now_s());
  }
}

void Engine::close_open_seqs(scheduler::RequestId id, Pending& p, const std::string& reason) {
  for (auto& [sid, so] : p.seqs) {
    if (structured_) structured_->remove(sid);
    if (!so.choice.finish_reason.empty()) continue;
    so.choice.finish_reason = reason;
    p.out.completion_tokens += int64_t(so.choice.token_ids.size());
    if (!on_event_) continue;
    StreamEvent ev;
    ev.request_id = id;
    ev.index = so.choice.index;
    ev.finished = true;
    ev.finish_reason = reason;
    on_event_(ev);
  }
}

void Engine::fail_seq(scheduler::RequestId rid, scheduler::SeqId sid, int64_t position, const std::string& why) {
  auto pit = pending_.find(rid);
  if (pit == pending_.end()) return;  // another of its sequences failed it already
  (void)sched_->abort(rid);  // its outputs in this step's update() are dropped
  Pending& p = *pit->second;
  p.out.error = fmt::format("{} at position {} (sample {}); the request was stopped", why, position,
                            p.seqs[sid].choice.index);
  close_open_seqs(rid, p, "error");
  finish_request(pit, now_s());
}

int32_t Engine::num_running_requests() const {
  int32_t n = 0;
  for (const auto& [id, p] : pending_)
    for (const auto& [sid, so] : p->seqs) {
      const scheduler::SeqState st = sched_->seq_state(sid);
      if (st == scheduler::SeqState::Prefilling || st == scheduler::SeqState::Decoding) {
        ++n;
        break;
      }
    }
  return n;
}

std::vector<RequestOutput> Engine::take_finished() {
  std::vector<RequestOutput> out;
  out.swap(finished_);
  return out;
}

}  // namespace dsinfer::engine
