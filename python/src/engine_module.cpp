// dsinfer._core: the Python binding of the public C++ API (include/dsinfer/ only; nanobind). The Python layer
// (python/dsinfer/*.py) builds OpenAI request bodies and turns results into vLLM-style objects; this file only
// exposes the engine, its result types, the tokenizer and the chat template. Engine errors become Python
// exceptions carrying the engine's message: ValueError for a rejected request or option, RuntimeError for a
// failed model step or engine creation. The GIL is released around every engine call (a step runs the model).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.h"
#include "dsinfer/request.h"
#include "python/src/module.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dsinfer::python {
namespace {

// One engine behind a mutex: the calls may come from several Python threads (the AsyncEngine's worker steps
// while the event loop's thread only queues work), and none holds the GIL while it waits or runs.
class PyEngine {
 public:
  explicit PyEngine(const EngineOptions& options) {
    std::string error;
    {
      nb::gil_scoped_release unlocked;
      engine_ = Engine::create(options, &error);
    }
    if (!engine_) throw std::runtime_error(error);
  }

  // Streaming on: every step's token events are kept until step() returns them.
  void set_streaming(bool on) {
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(mu_);
    if (!on) {
      engine_->set_token_callback(nullptr);
      return;
    }
    engine_->set_token_callback([this](const TokenEvent& ev) { events_.push_back(ev); });
  }

  uint64_t submit(const std::string& body_json) {
    std::string error;
    uint64_t id = 0;
    {
      nb::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> lock(mu_);
      id = engine_->submit(body_json, &error);
    }
    if (!id) throw std::invalid_argument(error);
    return id;
  }

  // Compiles the structured-output grammar of the body (a chat body when `chat`) into the engine's cache
  // (Engine::prepare: thread-safe, so no engine lock; GIL released), so that a later submit() does not compile it
  // on the thread that steps the engine. ValueError naming the field when the request is invalid.
  void prepare(const std::string& body_json, bool chat) {
    std::string error;
    bool ok = false;
    {
      nb::gil_scoped_release unlocked;
      Request r;
      const Endpoint ep = chat ? Endpoint::kChatCompletions : Endpoint::kCompletions;
      ok = parse_request(body_json, ep, &r, &error) && engine_->prepare(r, &error);
    }
    if (!ok) throw std::invalid_argument(error);
  }

  // False when the request is unknown or already finished (nothing to abort).
  bool abort(uint64_t id) {
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(mu_);
    std::string error;
    return engine_->abort(id, &error);
  }

  // One engine step; returns the token events it produced (empty unless streaming).
  std::vector<TokenEvent> step() {
    std::vector<TokenEvent> events;
    std::string error;
    bool ok = true;
    {
      nb::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> lock(mu_);
      ok = engine_->step(&error);
      events.swap(events_);
    }
    if (!ok) throw std::runtime_error("engine step failed: " + error);
    return events;
  }

  // Steps until some request finishes, none is left, or max_seconds have passed (at least one step when work is
  // left); returns the finished requests. LLM.generate's loop: one call and one GIL hand-over for many steps
  // (three per step through step / take_finished / has_unfinished cost ~40 us a step, 5 % of a small model's step);
  // the time bound keeps Ctrl-C served within a step plus max_seconds. Token events are left for step() (streaming).
  std::vector<RequestResult> run_steps(double max_seconds) {
    std::vector<RequestResult> done;
    std::string error;
    bool ok = true;
    {
      nb::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> lock(mu_);
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, max_seconds));
      do {
        if (!engine_->has_unfinished()) break;
        ok = engine_->step(&error);
        done = engine_->take_finished();
      } while (ok && done.empty() && std::chrono::steady_clock::now() < end);
    }
    if (!ok) throw std::runtime_error("engine step failed: " + error);
    return done;
  }

  std::vector<RequestResult> take_finished() {
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->take_finished();
  }

  bool has_unfinished() {
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->has_unfinished();
  }

  EngineStats stats() {
    nb::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->stats();
  }

  std::string backend_name() const { return engine_->backend_name(); }
  std::string model_name() const { return engine_->model_name(); }
  int64_t max_model_len() const { return engine_->max_model_len(); }
  bool has_tokenizer() const { return engine_->has_tokenizer(); }

 private:
  std::mutex mu_;
  std::unique_ptr<Engine> engine_;
  std::vector<TokenEvent> events_;
};

void bind_options(nb::module_& m) {
  nb::class_<EngineOptions>(m, "EngineOptions", "Engine options (include/dsinfer/engine.h; vLLM names).")
      .def(nb::init<>())
      .def_rw("model_dir", &EngineOptions::model_dir)
      .def_rw("backend", &EngineOptions::backend)
      .def_rw("numerics", &EngineOptions::numerics)
      .def_rw("load_format", &EngineOptions::load_format)
      .def_rw("tokenizer_path", &EngineOptions::tokenizer_path)
      .def_rw("max_num_seqs", &EngineOptions::max_num_seqs)
      .def_rw("max_num_batched_tokens", &EngineOptions::max_num_batched_tokens)
      .def_rw("max_model_len", &EngineOptions::max_model_len)
      .def_rw("seed", &EngineOptions::seed)
      .def_rw("state_memory_gb", &EngineOptions::state_memory_gb)
      .def_rw("speculative", &EngineOptions::speculative)
      .def_rw("num_speculative_tokens", &EngineOptions::num_speculative_tokens)
      .def_rw("speculative_budget", &EngineOptions::speculative_budget)
      .def_rw("speculative_min_survival", &EngineOptions::speculative_min_survival)
      .def_rw("speculative_cost_model", &EngineOptions::speculative_cost_model)
      .def_rw("enable_prefix_caching", &EngineOptions::enable_prefix_caching)
      .def_rw("prefix_snapshot_memory_gb", &EngineOptions::prefix_snapshot_memory_gb)
      .def_rw("prefix_cache_host_bytes", &EngineOptions::prefix_cache_host_bytes)
      .def_rw("batch_invariant", &EngineOptions::batch_invariant)
      .def_rw("state_format", &EngineOptions::state_format)
      .def_rw("sampling", &EngineOptions::sampling)
      .def_rw("gpus", &EngineOptions::gpus)
      .def_rw("expert_parallel_size", &EngineOptions::expert_parallel_size)
      .def_rw("data_parallel_size", &EngineOptions::data_parallel_size)
      .def_rw("tensor_parallel_size", &EngineOptions::tensor_parallel_size)
      .def_rw("eplb", &EngineOptions::eplb)
      .def_rw("num_redundant_experts", &EngineOptions::num_redundant_experts)
      .def_rw("eplb_interval", &EngineOptions::eplb_interval)
      .def_rw("async_scheduling", &EngineOptions::async_scheduling)
      .def_rw("graph_warmup", &EngineOptions::graph_warmup)
      .def_rw("engram_placement", &EngineOptions::engram_placement);
}

void bind_results(nb::module_& m) {
  nb::class_<ToolCallResult>(m, "ToolCall", "A parsed tool call: id, name, arguments (JSON object text).")
      .def_ro("id", &ToolCallResult::id)
      .def_ro("name", &ToolCallResult::name)
      .def_ro("arguments", &ToolCallResult::arguments);
  nb::class_<TokenLogprob>(m, "TokenLogprob", "A sampled token's logprob and its top alternatives.")
      .def_ro("token", &TokenLogprob::token)
      .def_ro("logprob", &TokenLogprob::logprob)
      .def_ro("top", &TokenLogprob::top);
  nb::class_<Completion>(m, "Completion", "One sample of a request (the engine's Completion).")
      .def_ro("index", &Completion::index)
      .def_ro("token_ids", &Completion::token_ids)
      .def_ro("text", &Completion::text)
      .def_ro("reasoning", &Completion::reasoning)
      .def_ro("tool_calls", &Completion::tool_calls)
      .def_ro("logprobs", &Completion::logprobs)
      .def_ro("finish_reason", &Completion::finish_reason);
  nb::class_<RequestResult>(m, "RequestResult", "A finished request (the engine's RequestResult).")
      .def_ro("id", &RequestResult::id)
      .def_ro("completions", &RequestResult::completions)
      .def_ro("prompt_tokens", &RequestResult::prompt_tokens)
      .def_ro("completion_tokens", &RequestResult::completion_tokens)
      .def_ro("arrival_s", &RequestResult::arrival_s)
      .def_ro("first_token_s", &RequestResult::first_token_s)
      .def_ro("finish_s", &RequestResult::finish_s)
      .def_ro("response_id", &RequestResult::response_id)
      .def_ro("response_json", &RequestResult::response_json)
      .def_ro("error", &RequestResult::error);
  nb::class_<ToolCallDelta>(m, "ToolCallDelta", "A streamed piece of a tool call.")
      .def_ro("index", &ToolCallDelta::index)
      .def_ro("id", &ToolCallDelta::id)
      .def_ro("name", &ToolCallDelta::name)
      .def_ro("arguments", &ToolCallDelta::arguments);
  nb::class_<TokenEvent>(m, "TokenEvent", "Tokens one sequence produced in one step (streaming).")
      .def_ro("request_id", &TokenEvent::request_id)
      .def_ro("index", &TokenEvent::index)
      .def_ro("token_ids", &TokenEvent::token_ids)
      .def_ro("text", &TokenEvent::text)
      .def_ro("reasoning", &TokenEvent::reasoning)
      .def_ro("finished", &TokenEvent::finished)
      .def_ro("finish_reason", &TokenEvent::finish_reason)
      .def_ro("tool_calls", &TokenEvent::tool_calls)
      .def_ro("logprobs", &TokenEvent::logprobs)
      .def_ro("parse_error", &TokenEvent::parse_error);
  nb::class_<EngineStats>(m, "EngineStats", "A snapshot of the engine's load and state memory.")
      .def_ro("running_requests", &EngineStats::running_requests)
      .def_ro("waiting_requests", &EngineStats::waiting_requests)
      .def_ro("running_seqs", &EngineStats::running_seqs)
      .def_ro("waiting_seqs", &EngineStats::waiting_seqs)
      .def_ro("num_preemptions", &EngineStats::num_preemptions)
      .def_ro("state_slots", &EngineStats::state_slots)
      .def_ro("state_slots_used", &EngineStats::state_slots_used)
      .def_ro("state_blocks", &EngineStats::state_blocks)
      .def_ro("state_blocks_used", &EngineStats::state_blocks_used)
      .def_ro("state_bytes_used", &EngineStats::state_bytes_used)
      .def_ro("state_bytes_budget", &EngineStats::state_bytes_budget)
      .def_ro("graphs_at_start", &EngineStats::graphs_at_start)
      .def_ro("graphs_in_run", &EngineStats::graphs_in_run)
      .def_ro("drafter_graphs_at_start", &EngineStats::drafter_graphs_at_start)
      .def_ro("drafter_graphs_in_run", &EngineStats::drafter_graphs_in_run)
      .def_ro("graph_warmup_seconds", &EngineStats::graph_warmup_seconds);
}

void bind_engine(nb::module_& m) {
  nb::class_<PyEngine>(m, "Engine", "The C++ engine (dsinfer::Engine). Use dsinfer.LLM / dsinfer.AsyncEngine.")
      .def(nb::init<const EngineOptions&>(), "options"_a)
      .def("set_streaming", &PyEngine::set_streaming, "on"_a, "Keep token events for step() to return.")
      .def("submit", &PyEngine::submit, "body_json"_a,
           "Queue an OpenAI request body (chat when it has 'messages'); returns the request id. ValueError naming "
           "the field when the request is invalid.")
      .def("prepare", &PyEngine::prepare, "body_json"_a, "chat"_a,
           "Compile the body's structured-output grammar into the engine's cache (thread-safe, GIL released), so "
           "that submit() finds it. ValueError naming the field when the request is invalid.")
      .def("abort", &PyEngine::abort, "request_id"_a, "End a queued or running request now; False if unknown.")
      .def("step", &PyEngine::step, "Run one engine step (GIL released); returns its token events.")
      .def("take_finished", &PyEngine::take_finished, "The requests that finished since the last call.")
      .def("run_steps", &PyEngine::run_steps, "max_seconds"_a,
           "Step until a request finishes, none is left or max_seconds passed (GIL released); returns the finished "
           "requests.")
      .def("has_unfinished", &PyEngine::has_unfinished)
      .def("stats", &PyEngine::stats)
      .def_prop_ro("backend_name", &PyEngine::backend_name)
      .def_prop_ro("model_name", &PyEngine::model_name)
      .def_prop_ro("max_model_len", &PyEngine::max_model_len)
      .def_prop_ro("has_tokenizer", &PyEngine::has_tokenizer);
}

}  // namespace
}  // namespace dsinfer::python

NB_MODULE(_core, m) {
  m.doc() = "dsinfer's C++ engine (the public API of include/dsinfer/), bound with nanobind.";
  dsinfer::python::bind_options(m);
  dsinfer::python::bind_results(m);
  dsinfer::python::bind_engine(m);
  dsinfer::python::bind_tokenizer_and_chat(m);
}
