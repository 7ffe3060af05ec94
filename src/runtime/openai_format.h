// OpenAI response objects for finished requests (chat.completion / text_completion) and the Batch API
// output record around them. Shared by `dsinfer generate` and, later, the server.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"

namespace dsinfer::runtime {

nlohmann::json response_body(const RequestOutput& r, const std::string& model_name, const tokenizer::Tokenizer* tok,
                             int64_t created_unix);
nlohmann::json batch_success_record(const std::string& line_id, const nlohmann::json& custom_id, const nlohmann::json& body);
nlohmann::json batch_error_record(const std::string& line_id, const nlohmann::json& custom_id, const std::string& code,
                                  const std::string& message);

}  // namespace dsinfer::runtime
