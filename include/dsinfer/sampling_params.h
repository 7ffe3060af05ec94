// SamplingParams: the per-request sampling and stopping controls, named as in the OpenAI / vLLM APIs.
// Plain data (part of the public request type, include/dsinfer/request.h); validation and parsing from an
// OpenAI body live in src/sampling/sampling_params.h.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsinfer {

// Below this temperature sampling is greedy (argmax); vLLM uses the same cut-off (_SAMPLING_EPS = 1e-5).
inline constexpr double kGreedyTemperature = 1e-5;
// OpenAI caps top_logprobs at 20; vLLM's default max_logprobs is also 20.
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingParams {
  double temperature = 1.0;         // 0 (or < 1e-5) = greedy
  double top_p = 1.0;               // (0, 1]; 1 = off
  int32_t top_k = 0;                // 0 or -1 = off, else >= 1
  double min_p = 0.0;               // [0, 1]; 0 = off
  double presence_penalty = 0.0;    // [-2, 2], on generated tokens only (vLLM semantics)
  double frequency_penalty = 0.0;   // [-2, 2], on generated tokens only
  double repetition_penalty = 1.0;  // > 0, on prompt and generated tokens; 1 = off
  std::map<int32_t, double> logit_bias;  // token id -> additive bias in [-100, 100]
  std::optional<uint64_t> seed;     // absent: the scheduler draws one from its own seeded generator
  std::optional<int64_t> max_tokens;  // absent: up to max_model_len - prompt length
  int64_t min_tokens = 0;           // stop tokens / EOS / stop strings are ignored before this many tokens
  std::vector<std::string> stop;    // stop strings, never included in the output text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;            // return the chosen token's logprob
  int32_t top_logprobs = 0;         // and this many alternatives (0..20), needs logprobs
  int32_t n = 1;                    // samples per prompt

  bool greedy() const { return temperature < kGreedyTemperature; }
  bool top_k_enabled() const { return top_k > 0; }
};

}  // namespace dsinfer
