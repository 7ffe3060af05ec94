// OpenAI response objects for finished requests (chat.completion / text_completion) and the Batch API
// output record around them. Used by the public API (src/api/public_api.cpp).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace dsinfer::api {

// "chatcmpl-<id>" / "cmpl-<id>".
std::string response_id(const engine::RequestOutput& r);
// JSON text; strings that are not valid UTF-8 are written with U+FFFD (never throws).
std::string dump_json(const nlohmann::json& j);
nlohmann::json response_body(const engine::RequestOutput& r, const std::string& model_name, const tokenizer::Tokenizer* tok,
                             int64_t created_unix);

}  // namespace dsinfer::api
