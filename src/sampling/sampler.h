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

// Allowed-token bitmasks of a batch of logits rows (structured outputs), in xgrammar's layout: token t of row r
// is allowed iff bit (t % 32) of words[r * words_per_row + t / 32] is set. Rows with active[r] == 0 are not
// constrained. This is the seam between the grammar matchers and a sampler: the CPU sampler takes one row
// (SampleInput::token_bitmask), a GPU sampler can upload `words` as is.
struct TokenBitmask {
  int32_t words_per_row = 0;
  std::vector<int32_t> words;   // [rows, words_per_row]
  std::vector<uint8_t> active;  // [rows]
  // rows x vocab, every row inactive (the words are left for the matchers to fill).
  void reset(int32_t rows, int64_t vocab);
  int32_t rows() const { return int32_t(active.size()); }
  bool any_active() const;
  std::span<int32_t> row(int32_t r) { return {words.data() + size_t(r) * size_t(words_per_row), size_t(words_per_row)}; }
  // The row's mask, or empty when the row is unconstrained.
  std::span<const int32_t> row_if_active(int32_t r) const;
};
inline int32_t bitmask_words(int64_t vocab) { return int32_t((vocab + 31) / 32); }

// The mask hook: logits of tokens the bitmask row disallows become -inf (ids past the mask are disallowed).
void apply_token_bitmask(std::span<float> logits, std::span<const int32_t> mask);

struct SampleInput {
  std::span<const float> logits;          // [vocab_size]
  std::span<const int32_t> token_bitmask;  // structured outputs: allowed tokens (TokenBitmask row); empty = all
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

// Processing order (same as vLLM V1): token_bitmask (disallowed -> -inf; raw logprobs then describe the
// masked logits, as vLLM's do) -> logit_bias -> min_tokens mask -> repetition/frequency/presence
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
  void apply_penalties(const SamplingParams& p, const SampleInput& in);  // on work_
  LogprobsMode mode_;
  // Scratch reused across calls (a Sampler is per thread / per runner, never shared between threads).
  std::vector<float> work_;
  std::vector<double> probs_;
  std::vector<int32_t> order_;
  std::vector<uint32_t> counts_;
  std::vector<int32_t> touched_;
  std::vector<float> masked_;
};

// log_softmax(logits)[token] and the top-n (value desc, id asc) of a row; exposed for tests and runners.
void log_softmax_top(std::span<const float> logits, int32_t n, int32_t token, float* token_logprob,
                     std::vector<TokenLogprob>* top);

}  // namespace dsinfer::sampling
