// OpenAI response objects for finished requests (chat.completion / text_completion) and the Batch API
// output record around them. Used by the public API (src/api/public_api.cpp).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace dsinfer::api {

// Token logprobs in the public form (include/dsinfer/engine.h).
std::vector<TokenLogprob> public_logprobs(const std::vector<sampling::SampleResult>& lps);
// The "logprobs" object of a chat choice / a completions choice (text_offset continues from *text_offset,
// which is advanced: streamed chunks carry offsets into the whole text).
nlohmann::json chat_logprobs(const std::vector<TokenLogprob>& lps, const tokenizer::Tokenizer* tok);
nlohmann::json completion_logprobs(const std::vector<TokenLogprob>& lps, const tokenizer::Tokenizer* tok, size_t* text_offset);
// "chatcmpl-<id>" / "cmpl-<id>".
std::string response_id(const engine::RequestOutput& r);
// JSON text; strings that are not valid UTF-8 are written with U+FFFD (never throws).
std::string dump_json(const nlohmann::json& j);
nlohmann::json response_body(const engine::RequestOutput& r, const std::string& model_name, const tokenizer::Tokenizer* tok,
                             int64_t created_unix);

}  // namespace dsinfer::api
