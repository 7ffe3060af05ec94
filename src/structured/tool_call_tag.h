// Strict tool calls: the xgrammar structural tag that holds a forced DeepSeek-V4 DSML tool-call block to the
// tools' parameter schemas (xgrammar's "deepseek_xml" parameter style). It continues the prompt the chat
// encoding renders for a forced call, which already ends with "\n\n<｜DSML｜tool_calls>\n": one or more invoke
// blocks (one, of the named tool, for a named tool_choice), then "</｜DSML｜tool_calls>", then EOS.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsinfer::structured {

struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema object ({} = any parameters)
};

// single_call: exactly one invoke (named tool_choice); otherwise one or more, each of any listed tool.
std::string dsml_tool_calls_tag(const std::vector<ToolSchema>& tools, bool single_call);

}  // namespace dsinfer::structured
