// dsinfer public C++ API: build an engine from a model directory, submit typed requests (include/dsinfer/
// request.h: completions with text or token-id prompts, or chat conversations rendered with the DeepSeek-V4
// chat encoding), step it, and collect results or stream tokens. No CUDA and no third-party types here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/request.h"

namespace dsinfer {

// The one definition of every engine option's default (vLLM names).
struct EngineOptions {
  std::string model_dir;
  std::string backend = "cpu";         // "cpu" (reference) or "cuda"
  std::string numerics = "official";   // "official" or "hf" (transformers semantics)
  std::string load_format = "auto";    // "auto" or "dummy" (random weights, cuda)
  std::string tokenizer_path;          // default: model_dir/tokenizer.json when present
  int32_t max_num_seqs = 64;           // sequences holding state at once
  int64_t max_num_batched_tokens = 2048;  // tokens computed per step, prefill + decode
  int64_t max_model_len = 0;           // 0: min(max_position_embeddings, 8192)
  uint64_t seed = 0;                   // draws the seeds of requests that give none
  double state_memory_gb = 0;          // 0: room for max_num_seqs full-length sequences, capped at 4 GiB
};

struct ToolCallResult {
  std::string id, name, arguments;     // arguments: JSON object text
};

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // top_logprobs alternatives
};

struct Completion {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;                    // completions text, or chat content
  std::string reasoning;               // chat reasoning_content
  std::vector<ToolCallResult> tool_calls;
  std::vector<TokenLogprob> logprobs;  // when the request asked for logprobs
  std::string finish_reason;           // "stop", "length", "tool_calls", "abort", "error"
};

struct RequestResult {
  uint64_t id = 0;
  std::vector<Completion> completions;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double arrival_s = 0, first_token_s = -1, finish_s = 0;  // seconds since the engine was created
  std::string response_id;             // the response object's "id" ("chatcmpl-<id>" / "cmpl-<id>")
  std::string response_json;           // the OpenAI response object (chat.completion / text_completion)
  std::string error;                   // non-empty: the request failed mid-run (e.g. the model produced
                                       // non-finite logits); unfinished completions end with "error"
};

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text, reasoning;
  bool finished = false;
  std::string finish_reason;
};

class Engine {
 public:
  // nullptr on failure, with the reason in *error.
  static std::unique_ptr<Engine> create(const EngineOptions& options, std::string* error);
  ~Engine();

  // Queues a parsed request. Returns the request id, or 0 with the reason (naming the field and value) in
  // *error; nothing is queued then.
  uint64_t submit(const Request& request, std::string* error);
  // Parses an OpenAI body (chat when it has "messages", else completions) and queues it.
  uint64_t submit(const std::string& body_json, std::string* error);
  // Runs one step; false (with *error) if the model step failed.
  bool step(std::string* error);
  bool has_unfinished() const;
  std::vector<RequestResult> take_finished();
  // Steps until every submitted request has finished.
  bool run_until_idle(std::vector<RequestResult>& results, std::string* error);
  // Called for every sequence that produced tokens in a step (streaming).
  void set_token_callback(std::function<void(const TokenEvent&)> cb);

  std::string backend_name() const;    // e.g. "cpu (official numerics)"
  int64_t max_model_len() const;
  bool has_tokenizer() const;
  double now_s() const;                // seconds since the engine was created

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
