// Engine: the step loop. Requests (OpenAI completions / chat bodies) -> token ids (tokenizer, chat encoding)
// -> Scheduler (which tokens run this step) -> BatchPlan -> ModelRunner (logits) -> sampler -> Scheduler
// update (stop checks) -> detokenized, parsed outputs. Synchronous: one step at a time on the caller's thread.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsinfer/engine.h"
#include "dsinfer/request.h"
#include "engine/model_runner.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "chat/output_parser.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

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
  bool finished = false;
  std::string finish_reason;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& opts);
  ~Engine();

  // Tokenizes / renders and queues one parsed request (prompt checks happen in the scheduler). Errors name
  // the field and value; nothing is queued then.
  Result<scheduler::RequestId> add(const Request& req);
  // One scheduler step (no-op when idle). A model failure is returned; the engine stays usable.
  Status step();
  bool has_unfinished() const { return sched_->has_unfinished(); }
  scheduler::SchedulerStats stats() const { return sched_->stats(); }
  // Called once per sequence update during step() (streaming); empty = off.
  void set_stream_callback(std::function<void(const StreamEvent&)> cb) { on_event_ = std::move(cb); }
  // Requests finished since the last call, in completion order.
  std::vector<RequestOutput> take_finished();

  const io::ModelConfig& model_config() const { return runner_->config(); }
  const tokenizer::Tokenizer* tokenizer() const { return tok_.get(); }
  const ModelRunner& runner() const { return *runner_; }
  int64_t max_model_len() const { return max_model_len_; }
  double now_s() const;

 private:
  struct Pending;
  struct SeqOut;
  Engine() = default;
  void apply_updates();
  void fail_request(const scheduler::SeqPlan& sp, const std::string& why);

  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<scheduler::Scheduler> sched_;
  sampling::Sampler sampler_;
  int64_t max_model_len_ = 0;
  std::map<scheduler::RequestId, std::unique_ptr<Pending>> pending_;
  std::vector<RequestOutput> finished_;
  std::vector<float> logits_;
  std::vector<scheduler::StepOutput> outputs_;
  std::vector<int32_t> nonfinite_;
  std::chrono::steady_clock::time_point t0_;
  std::function<void(const StreamEvent&)> on_event_;
};

}  // namespace dsinfer::engine
