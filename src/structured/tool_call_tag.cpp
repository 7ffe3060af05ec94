// dsml_tool_calls_tag (see tool_call_tag.h). Mirrors xgrammar's builtin "deepseek_v4" structural tag for
// tool_choice "forced" / "required", minus the "\n\n<｜DSML｜tool_calls>\n" opening our prompt already holds.
#include "structured/tool_call_tag.h"

#include "structured/grammar_cache.h"

namespace dsinfer::structured {

namespace {

using ojson = nlohmann::ordered_json;

const std::string kDsml = "｜DSML｜";

ojson invoke_tag(const ToolSchema& t) {
  ojson content = {{"type", "json_schema"}, {"json_schema", t.parameters}, {"style", "deepseek_xml"},
                   {"max_whitespace_cnt", kMaxJsonWhitespace}};
  return ojson{{"type", "tag"},
               {"begin", "<" + kDsml + "invoke name=\"" + t.name + "\">\n"},
               {"content", content},
               {"end", "</" + kDsml + "invoke>\n"}};
}

}  // namespace

std::string dsml_tool_calls_tag(const std::vector<ToolSchema>& tools, bool single_call) {
  ojson calls;
  if (single_call && tools.size() == 1) {
    calls = invoke_tag(tools[0]);
  } else {
    ojson tags = ojson::array();
    for (const ToolSchema& t : tools) tags.push_back(invoke_tag(t));
    calls = ojson{{"type", "tags_with_separator"}, {"tags", tags}, {"separator", ""}, {"at_least_one", true},
                  {"stop_after_first", single_call}};
  }
  ojson format = {{"type", "sequence"},
                  {"elements", ojson::array({calls, ojson{{"type", "const_string"}, {"value", "</" + kDsml + "tool_calls>"}}})}};
  return ojson{{"type", "structural_tag"}, {"format", format}}.dump();
}

}  // namespace dsinfer::structured
