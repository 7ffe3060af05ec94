// Strict tool calls (see tool_call_tag.h). Mirrors xgrammar's builtin "deepseek_v4" structural tag for tool_choice
// "forced" / "required", minus the opening calls tag our prompt already holds, with the tag names of the model's
// chat family (chat::tokens_for: V4.1 writes "<｜DSML｜ calls>", " invoke", " parameter").
#include "structured/tool_call_tag.h"

#include "structured/grammar_cache.h"

namespace dsinfer::structured {

namespace {

using ojson = nlohmann::ordered_json;

ojson invoke_tag(const std::string& name, const ojson& parameters, const chat::V4Tokens& t) {
  const std::string style = t.family == chat::ChatFamily::kV41 ? "deepseek_v4_1_xml" : "deepseek_xml";
  ojson content = {{"type", "json_schema"}, {"json_schema", parameters}, {"style", style},
                   {"max_whitespace_cnt", kMaxJsonWhitespace}};
  return ojson{{"type", "tag"},
               {"begin", "<" + t.dsml + t.invoke_tag + " name=\"" + name + "\">\n"},
               {"content", content},
               {"end", "</" + t.dsml + t.invoke_tag + ">\n"}};
}

}  // namespace

std::string tool_calls_spec(const std::vector<ToolSchema>& tools, bool single_call) {
  ojson list = ojson::array();
  for (const ToolSchema& t : tools) list.push_back(ojson{{"name", t.name}, {"parameters", t.parameters}});
  return ojson{{"tools", list}, {"single_call", single_call}}.dump();
}

Result<StructuredOutput> resolve_tool_calls(const StructuredOutput& so, chat::ChatFamily family) {
  if (so.kind != StructuredOutput::Kind::kToolCalls) return so;
  const ojson spec = ojson::parse(so.spec, nullptr, /*allow_exceptions=*/false);
  if (!spec.is_object() || !spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty() ||
      !spec.contains("single_call") || !spec["single_call"].is_boolean())
    return Status::errorf("{}: malformed tool-call constraint (expected {{\"tools\": [...], \"single_call\": bool}})", so.field);
  const chat::V4Tokens t = chat::tokens_for(family);
  const bool single = spec["single_call"].get<bool>();
  ojson tags = ojson::array();
  for (const ojson& tool : spec["tools"]) {
    if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string() || !tool.contains("parameters"))
      return Status::errorf("{}: malformed tool-call constraint (a tool without name or parameters)", so.field);
    tags.push_back(invoke_tag(tool["name"].get<std::string>(), tool["parameters"], t));
  }
  const ojson calls = single && tags.size() == 1
                          ? tags[0]
                          : ojson{{"type", "tags_with_separator"}, {"tags", tags}, {"separator", ""},
                                  {"at_least_one", true}, {"stop_after_first", single}};
  const ojson close = {{"type", "const_string"}, {"value", "</" + t.dsml + t.calls_tag + ">"}};
  StructuredOutput out = so;
  out.kind = StructuredOutput::Kind::kStructuralTag;
  out.spec = ojson{{"type", "structural_tag"}, {"format", {{"type", "sequence"}, {"elements", ojson::array({calls, close})}}}}.dump();
  return out;
}

}  // namespace dsinfer::structured
