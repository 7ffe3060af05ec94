// The output-parser settings for a conversation's reply (deepseek-recipe's ParsingOptions from convert()):
// tool calls are parsed only when the prompt offered tools, a required / named tool_choice starts inside the
// tool_calls block the prompt opened, and a prefix continuation continues its reasoning or content as is.
#pragma once
#include "chat/chat_types.h"
#include "chat/output_parser.h"

namespace dsinfer::chat {

ParserOptions parser_options_for(const Conversation& conv, ChatFamily family = ChatFamily::kV4);

}  // namespace dsinfer::chat
