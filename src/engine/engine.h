// Engine: the step loop. Requests (OpenAI completions / chat bodies) -> token ids (tokenizer, chat encoding)
// -> Scheduler (which tokens run this step) -> BatchPlan -> runner::ModelRunner (logits) -> sampler -> Scheduler
// update (stop checks) -> detokenized, parsed outputs. One step at a time on the caller's thread; with
// asynchronous scheduling (async_step.cpp) a step plans and launches the next device step before it reads the
// sampled tokens of the one before, so the device never waits for the host.
#pragma once
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"
#include "dsinfer/engine.h"
#include "dsinfer/request.h"
#include "engine/step_phases.h"
#include "runner/model_runner.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "structured/structured_decoding.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::speculative {
class Speculator;
}

namespace dsinfer::engine {


struct Choice {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;                        // completions: all text; chat: the content part
  std::string reasoning;                   // chat: reasoning_content
  std::vector<chat::ParsedToolCall> tool_calls;
  std::vector<sampling::SampleResult> logprobs;  // per token, when asked for
  std::string finish_reason;
  std::string parse_error;                 // chat output that did not parse (kept as content)
};

struct RequestOutput {
  scheduler::RequestId id = 0;
  bool chat = false;
  bool return_token_ids = false;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<int32_t> prompt_token_ids;  // the prompt as tokenized (P/D: the prefill worker exports its state)
  std::vector<Choice> choices;
  double arrival_s = 0, first_token_s = -1, finish_s = 0;  // seconds since the engine started
  std::string error;  // non-empty: the request failed mid-run (e.g. non-finite logits); choices end "error"
};

// One sequence's progress in a step (for streaming): the new tokens and the text they released.
struct StreamEvent {
  scheduler::RequestId request_id = 0;
  int32_t index = 0;                 // choice index (n > 1)
  std::vector<int32_t> token_ids;
  std::string text, reasoning;       // chat: content / reasoning deltas; completions: text delta
  std::vector<chat::ParsedToolCall> tool_calls;  // completed this step
  std::vector<chat::ToolCallDelta> tool_call_deltas;  // tool-call pieces parsed this step (streaming)
  std::vector<sampling::SampleResult> logprobs;  // per token, when the request asked for logprobs
  bool finished = false;
  std::string parse_error;           // chat output that did not parse (Choice::parse_error), with finished
  std::string finish_reason;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& opts);
  // create() with a runner the caller built (tests: a fake device-sampling runner); opts.backend etc. unused.
  static Result<std::unique_ptr<Engine>> create_with_runner(const EngineOptions& opts, std::unique_ptr<runner::ModelRunner> runner);
  ~Engine();

  // Tokenizes / renders and queues one parsed request (prompt checks happen in the scheduler). Errors name
  // the field and value; nothing is queued then.
  Result<scheduler::RequestId> add(const Request& req);
  // The prompt token ids add() runs for req (chat: rendered, then tokenized); errors name the field. Reads only
  // the tokenizer (thread-safe).
  Result<std::vector<int32_t>> prompt_ids(const Request& req) const;
  // Drops every prefix-cache entry; refused while requests are unfinished. The number of blocks dropped.
  Result<int64_t> flush_prefix_cache();
  // Ends a queued or running request now: its state is freed, its unfinished choices finish with "abort"
  // (stream events say so) and it is returned by the next take_finished(). Fails for an unknown or finished id.
  Status abort(scheduler::RequestId id);
  // The runner can run no more (ModelRunner::health(), a failed rank): every queued and running request ends now
  // with `why` as its error (none is lost), and nothing stays in flight.
  void fail_all(const std::string& why);
  // One scheduler step (no-op when idle). A model failure is returned; the engine stays usable.
  Status step();
  bool has_unfinished() const { return sched_->has_unfinished() || inflight_.active; }
  // How steps run: "async" or "sync (<why>)" (EngineOptions::async_scheduling and what it needs).
  const std::string& step_mode() const { return step_mode_; }
  // The runner's bench hooks (dsinfer bench --engine-decode: device idle time between steps).
  runner::RunnerDiagnostics& runner_diagnostics() { return runner_->diagnostics(); }
  scheduler::SchedulerStats stats() const { return sched_->stats(); }
  const cache::StateCache& state_cache() const { return sched_->cache(); }
  // Requests queued / running in the scheduler (a request runs when any of its sequences holds state).
  int32_t num_running_requests() const;
  int32_t num_pending_requests() const { return int32_t(pending_.size()); }
  // Called once per sequence update during step() (streaming); empty = off.
  void set_stream_callback(std::function<void(const StreamEvent&)> cb) { on_event_ = std::move(cb); }
  // Requests finished since the last call, in completion order.
  std::vector<RequestOutput> take_finished();

  const io::ModelConfig& model_config() const { return runner_->config(); }
  const tokenizer::Tokenizer* tokenizer() const { return tok_.get(); }
  const runner::ModelRunner& runner() const { return *runner_; }
  int64_t max_model_len() const { return max_model_len_; }
  double now_s() const;
  SpeculativeMetrics speculative_metrics() const;
  // The runner's step graphs and the drafter's graphs: captured in create() (the cost model's profile and the graph
  // warm-up), and since.
  struct GraphCounts {
    int64_t at_start = 0, in_run = 0;
    int64_t drafter_at_start = 0, drafter_in_run = 0;
    double warmup_seconds = 0;  // the graph warm-up's wall time (0: off or nothing to warm up)
  };
  GraphCounts graph_counts() const;
  structured::GrammarCacheStats grammar_stats() const;  // zeros before the first constrained request
  // Compiles the request's structured-output grammar into the engine's grammar cache (errors name the field). Safe
  // to call from any thread while another steps the engine: the server's connection threads compile their own
  // request's grammar, so submit() (on the engine thread) finds it cached and no request waits for another's.
  Result<structured::Grammar> compile_structured(const Request& req) const;
  cache::PrefixCacheStats prefix_stats() const { return sched_->prefix_stats(); }
  // Prefill/decode disaggregation (state_transfer.cpp, cache/state_blob.h; between steps, on the engine's thread):
  // the state of the deepest prefix of `prompt` that a request with this prompt resumes exactly from the prefix
  // cache (whole blocks with a slot snapshot, at most prompt - 1 tokens), as a blob; and the import of such a blob
  // into this engine's prefix cache (checked: format, checksum, model identity, layout, token ids), after which a
  // request whose prompt starts with the blob's tokens resumes there as an exact hit. Import returns the tokens it
  // holds. Errors say why (no prefix caching, no such state, no free state memory, a bad blob); nothing changes then.
  Result<std::string> export_prefix_state(std::span<const int32_t> prompt);
  Result<int64_t> import_prefix_state(std::string_view blob);
  // The logits of the last step ([rows, vocab], one row per sequence that needed logits); tests and divergence
  // measurements read them between steps. Empty when the step sampled on the device.
  std::span<const float> last_logits() const { return logits_; }

 private:
  struct Pending;
  struct SeqOut;
  Engine() = default;
  void apply_updates();
  Status flush_state_copies();  // the StateCache's queued copies, now (state_transfer.cpp)
  // One synchronous step; `rest`: speculation at rest (a plain step, no drafter work).
  Status step_sync(bool rest);
  // Speculative decoding at rest (Speculator::resting at the running batch, only greedy requests live).
  bool spec_resting() const;
  // The runner's hidden-state capture of the drafter's layers: on while speculating, off at rest (a step at rest is
  // then the plain step, graph included). Toggling drops the runner's captured graphs; it happens on entering and
  // leaving rest only.
  Status set_spec_capture(bool on);
  // Asynchronous steps (async_step.cpp): the launched step whose sampled tokens are not read yet, one record per
  // logits row (what resolving it needs once the scheduler's plan has moved on).
  struct InflightRow {
    scheduler::RequestId request_id = 0;
    scheduler::SeqId seq_id = 0;
    int64_t position = 0;  // of the token whose logits the row holds
    bool logprobs = false;
    bool prefill = false;  // the row ends a prefill (not a decode round)
  };
  struct Inflight {
    bool active = false;
    uint64_t step = 0;
    std::vector<InflightRow> rows;
  };
  void choose_step_mode(bool async_scheduling);  // EngineConfig::async_scheduling
  Status step_async();
  Status finish_inflight();
  Status detokenize(scheduler::RequestId rid, scheduler::StepOutput& o);
  // Structured outputs (src/structured): the request's grammar, compiled before anything is queued; the
  // matchers of its sequences; the step's bitmasks, computed while the model step runs.
  // The grammar cache, created once (thread-safe); the StructuredDecoding on the engine thread shares it.
  Result<structured::GrammarCache*> grammars() const;
  Status ensure_structured();
  void track_structured(const Request& req, const structured::Grammar& g, const std::vector<int32_t>& prompt,
                        const std::vector<scheduler::SeqId>& seqs);
  std::future<Status> start_bitmasks(const scheduler::BatchPlan& plan);
  void finish_request(std::map<scheduler::RequestId, std::unique_ptr<Pending>>::iterator it, double t);
  void fail_request(const scheduler::SeqPlan& sp, const std::string& why) {
    fail_seq(sp.request_id, sp.seq_id, sp.start_pos + sp.num_new_tokens - 1, why);
  }
  void fail_seq(scheduler::RequestId rid, scheduler::SeqId sid, int64_t position, const std::string& why);
  // Ends every sequence of request `id` not finished yet with `reason`: its tokens counted, a final event streamed.
  void close_open_seqs(scheduler::RequestId id, Pending& p, const std::string& reason);

  std::unique_ptr<runner::ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<scheduler::Scheduler> sched_;
  std::unique_ptr<speculative::Speculator> spec_;  // speculative decoding (null when off)
  sampling::Sampler sampler_;
  int64_t max_model_len_ = 0;
  std::map<scheduler::RequestId, std::unique_ptr<Pending>> pending_;
  std::vector<RequestOutput> finished_;
  std::vector<float> logits_;
  std::unique_ptr<structured::StructuredDecoding> structured_;  // created with the first constrained request
  mutable std::once_flag grammars_once_;
  mutable std::shared_ptr<structured::GrammarCache> grammars_;  // set once under grammars_once_
  mutable Status grammars_status_;
  sampling::TokenBitmask bitmask_;
  bool device_sampling_ = false;  // EngineOptions::sampling "device" on a runner that can, without speculation
  bool spec_rest_device_ = false;  // speculation at rest samples on the device (a runner that can, sampling "device")
  bool spec_rest_async_ = false;   // ... and takes asynchronous steps (where the engine without speculation would)
  bool spec_capture_ = true;       // set_spec_capture's state (Engine::create turns the capture on)
  int32_t sampled_live_ = 0;       // live requests that are not greedy (speculation never rests while any lives)
  sampling::PackedRows rows_;
  std::vector<ops::SampleRowOut> device_samples_;
  std::vector<scheduler::StepOutput> outputs_;
  std::vector<int32_t> nonfinite_;
  bool async_ = false;  // asynchronous steps (see step_mode())
  std::string step_mode_;
  Inflight inflight_, next_;
  std::chrono::steady_clock::time_point t0_;
  int64_t graphs_at_start_ = 0, drafter_graphs_at_start_ = 0;
  double warmup_seconds_ = 0;
  std::function<void(const StreamEvent&)> on_event_;
  StepPhases phases_;  // DSINFER_STEP_PHASES=1: the host's time per phase of step_sync
};

}  // namespace dsinfer::engine
