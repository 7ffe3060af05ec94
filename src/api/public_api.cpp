// include/dsinfer/engine.h on top of engine::Engine.
#include <ctime>
#include <filesystem>

#include "api/engine_impl.h"
#include "api/openai_format.h"
#include "api/request.h"
#include "parallel/bootstrap.h"

namespace dsinfer {

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::create(const EngineOptions& o, std::string* error) {
  auto defaults = chat::load_chat_defaults(o.model_dir);  // before the weights: a bad file fails at once
  if (!defaults) {
    if (error) *error = defaults.status().message();
    return nullptr;
  }
  auto r = engine::Engine::create(o);
  if (!r) {
    if (error) *error = r.status().message();
    return nullptr;
  }
  std::unique_ptr<Engine> e(new Engine());
  e->impl_->e = std::move(r).value();
  e->impl_->model_name = std::filesystem::path(o.model_dir).filename().string();
  e->impl_->chat_defaults = std::move(defaults).value();
  return e;
}

namespace {

// A failure: the reason (and field) for the caller; `result` is what the call returns.
template <class T>
T report(const Status& s, T result, std::string* error, std::string* error_param = nullptr) {
  if (error) *error = s.message();
  if (error_param) *error_param = s.field();
  return result;
}

// The request as the engine runs it: a conversation gets the model's thinking default where the request left it
// open, and DeepSeek's tool_choice rule. `storage` holds the copy when one is made.
Result<const Request*> with_chat_defaults(const chat::ChatDefaults& defaults, const Request& request, Request& storage) {
  if (!request.conversation) return &request;
  chat::Conversation conv = *request.conversation;
  DSI_RETURN_IF_ERROR(chat::apply_chat_defaults(defaults, conv));
  storage = request;
  storage.conversation = std::make_shared<const chat::Conversation>(std::move(conv));
  return &storage;
}

}  // namespace

uint64_t Engine::submit(const Request& request, std::string* error, std::string* error_param) {
  Request storage;
  Result<const Request*> req = with_chat_defaults(impl_->chat_defaults, request, storage);
  if (!req) return report(req.status(), uint64_t(0), error, error_param);
  auto id = impl_->e->add(**req);
  if (!id) return report(id.status(), uint64_t(0), error, error_param);
  return *id;
}

bool Engine::tokenize(const Request& request, std::vector<int32_t>* ids, std::string* error, std::string* error_param) const {
  Request storage;
  Result<const Request*> req = with_chat_defaults(impl_->chat_defaults, request, storage);
  if (!req) return report(req.status(), false, error, error_param);
  Result<std::vector<int32_t>> r = impl_->e->prompt_ids(**req);
  if (!r) return report(r.status(), false, error, error_param);
  *ids = std::move(r).value();
  return true;
}

bool Engine::detokenize(const std::vector<int32_t>& ids, std::string* text, std::string* error) const {
  const tokenizer::Tokenizer* tok = impl_->e->tokenizer();
  if (!tok)
    return report(Status::error("detokenizing needs a tokenizer, and this model directory has no tokenizer.json"),
                  false, error);
  Result<std::string> r = tok->decode(ids, /*skip_special_tokens=*/false);
  if (!r) return report(r.status(), false, error);
  *text = std::move(r).value();
  return true;
}

int64_t Engine::flush_prefix_cache(std::string* error) {
  Result<int64_t> r = impl_->e->flush_prefix_cache();
  if (!r) return report(r.status(), int64_t(-1), error);
  return *r;
}

bool Engine::prepare(const Request& request, std::string* error, std::string* error_param) const {
  auto g = impl_->e->compile_structured(request);
  if (g) return true;
  if (error) *error = g.status().message();
  if (error_param) *error_param = g.status().field();
  return false;
}

std::shared_future<PrepareResult> Engine::prepare_async(const Request& request) const {
  auto done = std::make_shared<std::promise<PrepareResult>>();
  std::shared_future<PrepareResult> f = done->get_future().share();
  if (!request.structured.active()) {
    done->set_value(PrepareResult{});
    return f;
  }
  impl_->compile_pool.post([this, request, done] {
    PrepareResult r;
    r.ok = prepare(request, &r.error, &r.error_param);
    done->set_value(std::move(r));
  });
  return f;
}

uint64_t Engine::submit(const std::string& body_json, std::string* error, std::string* error_param) {
  // Chat when the body has "messages": the same rule as an OpenAI client choosing the endpoint.
  Request r;
  Status s = api::parse_request_text(body_json, std::nullopt, r);
  if (!s) {
    if (error) *error = s.message();
    if (error_param) *error_param = s.field();
    return 0;
  }
  return submit(r, error, error_param);
}

bool Engine::step(std::string* error) {
  Status s = impl_->e->step();
  if (!s) {
    // A runner that can run no more (a failed rank): every request ends now with its reason, none is lost.
    if (const Status h = impl_->e->runner().health(); !h.is_ok()) impl_->e->fail_all(h.message());
  }
  if (!s && error) *error = s.message();
  return s.is_ok();
}

bool Engine::has_unfinished() const { return impl_->e->has_unfinished(); }

std::vector<RequestResult> Engine::take_finished() {
  std::vector<RequestResult> out;
  const int64_t created = int64_t(std::time(nullptr));
  for (engine::RequestOutput& r : impl_->e->take_finished()) {
    RequestResult rr;
    rr.id = r.id;
    rr.prompt_tokens = r.prompt_tokens;
    rr.prompt_token_ids = std::move(r.prompt_token_ids);
    rr.completion_tokens = r.completion_tokens;
    rr.arrival_s = r.arrival_s;
    rr.first_token_s = r.first_token_s;
    rr.finish_s = r.finish_s;
    rr.error = r.error;
    rr.response_id = api::response_id(r);
    rr.response_json = api::dump_json(api::response_body(r, impl_->model_name, impl_->e->tokenizer(), created));
    for (engine::Choice& c : r.choices) {
      Completion cp{c.index, std::move(c.token_ids), std::move(c.text), std::move(c.reasoning), {}, {}, c.finish_reason};
      for (const chat::ParsedToolCall& t : c.tool_calls) cp.tool_calls.push_back({t.id, t.name, t.arguments});
      cp.logprobs = api::public_logprobs(c.logprobs);
      rr.completions.push_back(std::move(cp));
    }
    out.push_back(std::move(rr));
  }
  return out;
}

bool Engine::run_until_idle(std::vector<RequestResult>& results, std::string* error) {
  while (has_unfinished()) {
    if (!step(error)) return false;
    for (auto& r : take_finished()) results.push_back(std::move(r));
  }
  return true;
}

void Engine::set_token_callback(std::function<void(const TokenEvent&)> cb) {
  if (!cb) {
    impl_->e->set_stream_callback(nullptr);
    return;
  }
  impl_->e->set_stream_callback([cb = std::move(cb)](const engine::StreamEvent& ev) {
    TokenEvent te{ev.request_id, ev.index, ev.token_ids, ev.text, ev.reasoning, ev.finished, ev.finish_reason, {}, {}, {}};
    for (const chat::ToolCallDelta& d : ev.tool_call_deltas) te.tool_calls.push_back({d.index, d.id, d.name, d.arguments});
    te.logprobs = api::public_logprobs(ev.logprobs);
    te.parse_error = ev.parse_error;
    cb(te);
  });
}

bool Engine::export_prefix_state(const std::vector<int32_t>& prompt_token_ids, std::string* blob, std::string* error) {
  Result<std::string> r = impl_->e->export_prefix_state(prompt_token_ids);
  if (!r) {
    if (error) *error = r.status().message();
    return false;
  }
  *blob = std::move(r).value();
  return true;
}

int64_t Engine::import_prefix_state(std::string_view blob, std::string* error) {
  Result<int64_t> r = impl_->e->import_prefix_state(blob);
  if (!r && error) *error = r.status().message();
  return r ? *r : -1;
}

std::string Engine::backend_name() const { return impl_->e->runner().name(); }
std::string Engine::step_mode() const { return impl_->e->step_mode(); }
SpeculativeMetrics Engine::speculative_metrics() const { return impl_->e->speculative_metrics(); }
int64_t Engine::max_model_len() const { return impl_->e->max_model_len(); }
std::string Engine::unavailable_reason() const {
  const Status h = impl_->e->runner().health();
  return h.is_ok() ? std::string() : h.message();
}

bool Engine::has_tokenizer() const { return impl_->e->tokenizer() != nullptr; }
double Engine::now_s() const { return impl_->e->now_s(); }
std::string Engine::model_name() const { return impl_->model_name; }

bool Engine::abort(uint64_t request_id, std::string* error) {
  Status s = impl_->e->abort(request_id);
  if (!s && error) *error = s.message();
  return s.is_ok();
}

EngineStats Engine::stats() const {
  const engine::Engine& e = *impl_->e;
  const scheduler::SchedulerStats ss = e.stats();
  const cache::StateCacheStats cs = e.state_cache().stats();
  EngineStats st;
  st.running_requests = e.num_running_requests();
  st.waiting_requests = e.num_pending_requests() - st.running_requests;
  st.running_seqs = ss.running;
  st.waiting_seqs = ss.waiting;
  st.num_preemptions = ss.num_preemptions;
  st.state_slots = cs.num_slots;
  st.state_slots_used = cs.num_slots - cs.free_slots;
  st.state_blocks = cs.num_blocks;
  st.state_blocks_used = cs.num_blocks - cs.free_blocks;
  st.state_bytes_used = cs.used_bytes;
  st.state_bytes_budget = cs.budget_bytes;
  st.state_block_size = cs.block_size;
  st.state_block_bytes = cs.block_bytes;
  st.state_slot_bytes = cs.slot_bytes;
  st.prefix_cache = e.prefix_stats();
  st.speculative = e.speculative_metrics();
  const engine::Engine::GraphCounts gc = e.graph_counts();
  st.graphs_at_start = gc.at_start;
  st.graphs_in_run = gc.in_run;
  st.drafter_graphs_at_start = gc.drafter_at_start;
  st.drafter_graphs_in_run = gc.drafter_in_run;
  st.graph_warmup_seconds = gc.warmup_seconds;
  const structured::GrammarCacheStats gs = e.grammar_stats();
  st.grammar = {gs.compiles, gs.hits, gs.entries, int64_t(gs.bytes), gs.compile_seconds};
  return st;
}

bool process_rank(int32_t* rank, int32_t* world, std::string* error) {
  auto launch = parallel::parse_launch_env(parallel::torchrun_env(), -1);
  if (!launch.is_ok()) return report(launch.status(), false, error);
  *rank = *launch ? (*launch)->rank : 0;
  *world = *launch ? (*launch)->world : 1;
  return true;
}

}  // namespace dsinfer
