// include/dsinfer/engine.h on top of runtime::Engine.
#include <ctime>
#include <filesystem>

#include "dsinfer/engine.h"
#include "runtime/engine.h"
#include "runtime/openai_format.h"

namespace dsinfer {

struct Engine::Impl {
  std::unique_ptr<runtime::Engine> e;
  std::string model_name;
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::create(const EngineOptions& o, std::string* error) {
  runtime::EngineConfig c;
  c.runner = {o.model_dir, o.backend, o.numerics, o.load_format};
  c.tokenizer_path = o.tokenizer_path;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  c.seed = o.seed;
  c.state_budget_bytes = int64_t(o.state_memory_gb * double(int64_t(1) << 30));
  auto r = runtime::Engine::create(c);
  if (!r) {
    if (error) *error = r.status().message();
    return nullptr;
  }
  std::unique_ptr<Engine> e(new Engine());
  e->impl_->e = std::move(r).value();
  e->impl_->model_name = std::filesystem::path(o.model_dir).filename().string();
  return e;
}

uint64_t Engine::submit(const std::string& body_json, std::string* error) {
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(body_json);
  } catch (const std::exception& ex) {
    if (error) *error = std::string("request is not valid JSON: ") + ex.what();
    return 0;
  }
  auto id = impl_->e->add(body);
  if (!id) {
    if (error) *error = id.status().message();
    return 0;
  }
  return *id;
}

bool Engine::step(std::string* error) {
  Status s = impl_->e->step();
  if (!s && error) *error = s.message();
  return s.is_ok();
}

bool Engine::has_unfinished() const { return impl_->e->has_unfinished(); }

std::vector<RequestResult> Engine::take_finished() {
  std::vector<RequestResult> out;
  const int64_t created = int64_t(std::time(nullptr));
  for (runtime::RequestOutput& r : impl_->e->take_finished()) {
    RequestResult rr;
    rr.id = r.id;
    rr.prompt_tokens = r.prompt_tokens;
    rr.completion_tokens = r.completion_tokens;
    rr.response_json = runtime::response_body(r, impl_->model_name, impl_->e->tokenizer(), created).dump();
    for (runtime::Choice& c : r.choices)
      rr.completions.push_back({c.index, std::move(c.token_ids), std::move(c.text), std::move(c.reasoning), c.finish_reason});
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
  impl_->e->set_stream_callback([cb = std::move(cb)](const runtime::StreamEvent& ev) {
    cb(TokenEvent{ev.request_id, ev.index, ev.token_ids, ev.text, ev.reasoning, ev.finished, ev.finish_reason});
  });
}

}  // namespace dsinfer
