// Validation of SamplingParams (include/dsinfer/sampling_params.h) against vLLM's ranges and parsing from an
// OpenAI request body (completions or chat form).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "dsinfer/sampling_params.h"

namespace dsinfer::sampling {

using ::dsinfer::kGreedyTemperature;
using ::dsinfer::kMaxTopLogprobs;
using ::dsinfer::SamplingParams;

// Checks every range; vocab_size > 0 also checks token ids (logit_bias keys, stop_token_ids). The message
// names the parameter and the offending value.
Status validate(const SamplingParams& p, int64_t vocab_size = 0);

// Reads the sampling fields of an OpenAI completions / chat-completions request body. Fields that are not
// sampling controls (model, messages, stream, ...) are ignored; a sampling field of the wrong JSON type is an
// error naming the field and what was found. Accepted aliases: max_completion_tokens (= max_tokens),
// logprobs as an integer (completions API: = logprobs true + top_logprobs N), stop as a string or list.
// The result is validated (without a vocabulary size).
Result<SamplingParams> parse_sampling_params(const nlohmann::ordered_json& body);

}  // namespace dsinfer::sampling
