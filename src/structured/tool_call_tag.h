// Strict tool calls: the xgrammar structural tag that holds a forced DSML tool-call block to the tools' parameter
// schemas. It continues the prompt the chat encoding renders for a forced call, which already ends with the
// opening tag ("\n\n<｜DSML｜tool_calls>\n" for V4, "<｜DSML｜ calls>" for V4.1): one or more invoke blocks (one,
// of the named tool, for a named tool_choice), then the closing tag, then EOS. Requests carry the model-independent
// form (StructuredOutput::Kind::kToolCalls); the engine resolves it with its model's chat family.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_encoding.h"
#include "core/status.h"
#include "dsinfer/request.h"

namespace dsinfer::structured {

struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema object ({} = any parameters)
};

// The kToolCalls spec of `tools`. single_call: exactly one invoke (named tool_choice); otherwise one or more, each
// of any listed tool.
std::string tool_calls_spec(const std::vector<ToolSchema>& tools, bool single_call);

// kToolCalls -> kStructuralTag in the family's DSML tags and xgrammar parameter style ("deepseek_xml" for V4,
// "deepseek_v4_1_xml" for V4.1); every other kind is returned unchanged.
Result<StructuredOutput> resolve_tool_calls(const StructuredOutput& so, chat::ChatFamily family);

}  // namespace dsinfer::structured
