// The request-level options of a Chat Completions body (thinking, reasoning_effort, tools, tool_choice,
// response_format), read and checked as deepseek-recipe 0.2.0 does; used by chat_request.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "chat/chat_types.h"

namespace dsinfer::chat {

// A declared tool before its schema is checked (tool_choice "none" skips the check).
struct ToolDecl {
  std::string name;
  std::string description;
  ojson parameters;  // null when absent
  bool strict = false;
};

// A response_format object, read once for chat and completions (src/api/request.cpp maps it to structured outputs).
struct ResponseFormatSpec {
  ResponseFormat format = ResponseFormat::kText;
  ojson schema;         // json_schema: the schema as written
  bool strict = false;  // json_schema.strict
  std::string regex;    // regex (deepseek-recipe's extension)
};
Result<ResponseFormatSpec> parse_response_format(const ojson& rf);

struct RequestOptions {
  std::vector<ToolDecl> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named_tool;
  bool has_response_format = false;  // any response_format, "text" included
  ResponseFormatSpec response;
};

// Sets conv.thinking and conv.effort: an explicit "thinking" decides the mode, else reasoning_effort "none"
// disables it and any other effort enables it; the default is on with high effort (DeepSeek's API), which a model
// directory's chat defaults replace (chat_defaults.h). conv.thinking_given says whether the body set either field.
Status parse_thinking(const ojson& body, Conversation& conv);

// DeepSeek's API rule: thinking mode takes tool_choice "auto" or "none" only; "required" or a named function is an
// error (the hosted API answers 400) unless thinking is disabled.
Status check_thinking_tool_choice(const Conversation& conv);

// Reads tools (names checked: 1-128 bytes of [A-Za-z0-9_-]), tool_choice and response_format.
Result<RequestOptions> parse_request_options(const ojson& body);

// Resolves tools against tool_choice (schemas checked / strict ones normalised, named tool kept alone) and
// the response format's schema, and the combination rules; fills conv.tools, tool_choice, response_*.
Status apply_request_options(const RequestOptions& o, Conversation& conv);

}  // namespace dsinfer::chat
