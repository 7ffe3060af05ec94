// Reference CPU sampler: one sequence's fp32 logits row + its SamplingParams + its token history + its
// counter-based RNG key -> the next token and (optionally) logprobs. A pure function of those inputs, so a
// request's tokens never depend on what else shares the batch.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/philox.h"
#include "sampling/sampling_params.h"

namespace dsinfer::sampling {

// Which distribution logprobs describe (vLLM's `logprobs_mode` names):
//  Raw:       log_softmax of the model's logits as given (vLLM default "raw_logprobs"; what OpenAI reports).
//  Processed: log_softmax of the distribution actually sampled from: after logit_bias, min_tokens masking,
//             penalties, temperature and the min_p / top_k / top_p masks (masked tokens have -inf).
//             For greedy requests temperature and the truncation masks are not applied.
enum class LogprobsMode { Raw, Processed };

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleInput {
  std::span<const float> logits;          // [vocab_size]
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;  // for repetition_penalty
  std::span<const int32_t> output_tokens;  // generated so far: penalties, min_tokens, and the RNG step
  RngKey rng;
  int64_t eos_token_id = -1;               // masked (with stop_token_ids) while output < min_tokens
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;               // of `token`; filled when params->logprobs
  std::vector<TokenLogprob> top;      // top_logprobs alternatives, best first (ties: lower token id first)
};

// Processing order (same as vLLM V1): logit_bias -> min_tokens mask -> repetition/frequency/presence
// penalties -> [greedy: argmax] -> temperature -> min_p -> top_k -> top_p -> inverse-CDF draw.
// Tie rules, all deterministic: argmax and top_k/top_p ordering break ties by lower token id; top_k keeps
// exactly k tokens; top_p keeps the shortest prefix (in that order) whose mass reaches top_p (at least one);
// min_p keeps tokens with p >= min_p * p_max. The draw walks the kept tokens in ascending id order with a
// double-precision running sum, so it never depends on sort stability or summation order elsewhere.
// Non-finite logits: NaN is treated as -inf; if every token is -inf the lowest id allowed is returned.
class Sampler {
 public:
  explicit Sampler(LogprobsMode mode = LogprobsMode::Raw) : mode_(mode) {}
  SampleResult sample(const SampleInput& in);

 private:
  LogprobsMode mode_;
  // Scratch reused across calls (a Sampler is per thread / per runner, never shared between threads).
  std::vector<float> work_;
  std::vector<double> probs_;
  std::vector<int32_t> order_;
  std::vector<uint32_t> counts_;
  std::vector<int32_t> touched_;
};

// log_softmax(logits)[token] and the top-n (value desc, id asc) of a row; exposed for tests and runners.
void log_softmax_top(std::span<const float> logits, int32_t n, int32_t token, float* token_logprob,
                     std::vector<TokenLogprob>* top);

}  // namespace dsinfer::sampling
