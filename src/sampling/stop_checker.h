// StopChecker: per-sequence, incremental finish conditions — EOS (unless ignore_eos), stop_token_ids,
// stop strings matched across token boundaries on the detokenized text, min_tokens and max_tokens.
// Text that could still turn into a stop string is held back; a matched stop string never reaches the output.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "sampling/sampling_params.h"

namespace dsinfer::sampling {

enum class FinishReason { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort" (OpenAI names)

struct StopResult {
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string text;                 // text released to the client by this token (may be empty)
  int32_t stop_token = -1;          // the EOS / stop_token_ids token that finished the sequence
  std::string stop_string;          // the stop string that matched
};

class StopChecker {
 public:
  // max_tokens: the effective limit (the request's max_tokens, already capped by max_model_len - prompt).
  StopChecker(const SamplingParams* params, int64_t eos_token_id, int64_t max_tokens);

  // Feed one generated token and its detokenized text delta (may be empty, e.g. for special tokens or an
  // incomplete UTF-8 sequence the detokenizer is still holding). Must not be called after finishing.
  // Semantics (as vLLM): all stop conditions apply only once the output (counting this token) has
  // min_tokens tokens; a stop token's own text is not output; on a stop string the output ends right before
  // the earliest match in the not-yet-released text; on "length" the held-back text is flushed.
  StopResult append(int32_t token, std::string_view text_delta);

  int64_t num_tokens() const { return num_tokens_; }
  bool finished() const { return finished_; }
  const std::string& held_back() const { return pending_; }

 private:
  const SamplingParams* params_;
  int64_t eos_;
  int64_t max_tokens_;
  int64_t num_tokens_ = 0;
  bool finished_ = false;
  std::string pending_;  // decoded text not released yet (a possible stop-string prefix at its end)
};

}  // namespace dsinfer::sampling
