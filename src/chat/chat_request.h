// OpenAI Chat Completions request JSON -> validated Conversation (the conversion step of deepseek-recipe's
// ChatCompletionRequest.convert). Every malformed input is a Status naming the JSON path that is wrong.
#pragma once
#include <string_view>

#include "core/status.h"
#include "chat/chat_json.h"
#include "chat/chat_types.h"

namespace dsinfer::chat {

Result<Conversation> parse_chat_request(const ojson& body);
Result<Conversation> parse_chat_request_text(std::string_view json_text);


}  // namespace dsinfer::chat
