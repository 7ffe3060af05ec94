// GPU-resident sampling: the packed per-row description the device sampler reads and the per-row result it
// writes. Plain C++17 data shared by the host packer (sampling/row_pack.*), the launcher and the kernels.
// The semantics are the reference CPU sampler's (sampling/sampler.h), which stays the reference: the packer turns
// SamplingParams + histories + the RNG key of a row into this description, so for the same inputs the device
// sampler picks the same token (processing order, tie rules and the Philox uniform are the host's).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

// OpenAI's and vLLM's cap on top_logprobs (dsinfer::kMaxTopLogprobs; restated here for the C++17 kernels).
inline constexpr int32_t kSampleMaxTop = 20;

enum SampleRowFlags : int32_t {
  kSampleGreedy = 1,        // temperature < 1e-5: argmax
  kSampleLogprobs = 2,      // fill logprob (and top_logprobs alternatives)
  kSampleProcessed = 4,     // logprobs of the sampled-from distribution (LogprobsMode::Processed), else raw
  kSampleRepetition = 8,    // repetition_penalty != 1 (apply it to every penalty entry)
};

// One sparse edit of a row: logit_bias (value = float(bias), added), a min_tokens ban (value unused: -inf) or a
// penalty entry (value = float(frequency * count + presence * [count > 0]), subtracted after the repetition
// penalty). Token ids are unique within one list of one row and inside [0, vocab).
struct SampleEntry {
  int32_t token = 0;
  float value = 0.0f;
};

// What one logits row needs. Lists index SamplingBatch::entries.
struct SampleRowDesc {
  int32_t logits_row = 0;        // row of the logits [rows, V]
  int32_t mask_row = -1;         // row of the bitmask words (structured outputs); -1: unconstrained
  int32_t flags = 0;             // SampleRowFlags
  int32_t top_k = 0;             // 0: off
  int32_t top_logprobs = 0;      // 0..kSampleMaxTop
  int32_t bias_begin = 0, bias_count = 0;
  int32_t ban_begin = 0, ban_count = 0;
  int32_t penalty_begin = 0, penalty_count = 0;
  int32_t reserved = 0;
  double inv_temperature = 1.0;  // 1.0 / temperature in double (the host's probabilities)
  double top_p = 1.0;            // < 1: on
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double uniform = 0.0;          // sampling::philox_uniform(key, output length): the inverse-CDF draw
  float inv_temperature_f = 1.0f;  // float(1.0 / temperature): processed logprobs scale
  int32_t reserved2 = 0;
};

enum SampleStatus : int32_t {
  kSampleOk = 0,
  kSampleNonFinite = 1,  // the row holds NaN or +-Inf: not sampled (the engine fails that request)
  kSampleBadInput = 2,   // the description names a logits row, list or mask row outside the uploaded arrays
};

// The result of one row (the only thing that crosses back to the host).
struct SampleRowOut {
  int32_t token = -1;
  int32_t status = kSampleOk;
  float logprob = 0.0f;          // of token, when kSampleLogprobs
  int32_t num_top = 0;
  int32_t top_token[kSampleMaxTop] = {};
  float top_logprob[kSampleMaxTop] = {};
};

}  // namespace dsinfer::ops
