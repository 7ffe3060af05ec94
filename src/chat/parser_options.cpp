// See parser_options.h.
#include "chat/parser_options.h"

namespace dsinfer::chat {

ParserOptions parser_options_for(const Conversation& conv, ChatFamily family) {
  ParserOptions po;
  po.tokens = tokens_for(family);
  const bool tools = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  po.parse_tool_calls = tools;
  po.starts_in_tool_calls = tools && (conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed);
  po.thinking = conv.thinking;
  const ChatMessage* last = conv.messages.empty() ? nullptr : &conv.messages.back();
  if (conv.thinking && last && last->role == Role::kAssistant && last->prefix) {
    if (!last->content.empty()) {  // the answer goes on: no reasoning, newlines kept
      po.thinking = false;
      po.keep_leading_newlines = true;
    } else if (!last->reasoning.empty()) {  // the reasoning goes on
      po.keep_leading_newlines = true;
    }
  }
  return po;
}

}  // namespace dsinfer::chat
