// dsinfer public C++ API: build an engine from a model directory, submit OpenAI-style requests (completions
// with text or token-id prompts, or chat messages rendered with the DeepSeek-V4 chat encoding), step it, and
// collect results or stream tokens. No CUDA and no third-party types in this header; requests and responses
// are exchanged as JSON text in the OpenAI formats.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dsinfer {

struct EngineOptions {
  std::string model_dir;
  std::string backend = "cpu";         // "cpu" (reference) or "cuda"
  std::string numerics = "official";   // "official" or "hf" (transformers semantics)
  std::string load_format = "auto";    // "auto" or "dummy" (random weights, cuda)
  std::string tokenizer_path;          // default: model_dir/tokenizer.json when present
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;           // 0: min(max_position_embeddings, 8192)
  uint64_t seed = 0;
  double state_memory_gb = 0;          // 0: automatic
};

struct Completion {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;                    // completions text, or chat content
  std::string reasoning;               // chat reasoning_content
  std::string finish_reason;           // "stop", "length", "tool_calls", "abort"
};

struct RequestResult {
  uint64_t id = 0;
  std::vector<Completion> completions;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string response_json;           // the OpenAI response object (chat.completion / text_completion)
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

  // Queues an OpenAI completions / chat-completions request body (JSON text). Returns the request id, or 0 with
  // the reason (naming the field and value) in *error.
  uint64_t submit(const std::string& body_json, std::string* error);
  // Runs one step; false (with *error) if the model step failed.
  bool step(std::string* error);
  bool has_unfinished() const;
  std::vector<RequestResult> take_finished();
  // Steps until every submitted request has finished.
  bool run_until_idle(std::vector<RequestResult>& results, std::string* error);
  // Called for every sequence that produced tokens in a step (streaming).
  void set_token_callback(std::function<void(const TokenEvent&)> cb);

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
