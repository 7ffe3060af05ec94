// Chat request options (see chat_options.h). Messages name the JSON path and the bad value.
#include "chat/chat_options.h"

#include <algorithm>
#include <set>

#include "chat/chat_schema.h"

namespace dsinfer::chat {
namespace {

bool given(const ojson& o, const char* key) { return o.contains(key) && !o[key].is_null(); }

Result<std::string> optional_string(const ojson& o, const char* key, const std::string& where) {
  if (!given(o, key)) return std::string();
  if (!o[key].is_string()) return Status::errorf("{}.{} must be a string, got {}", where, key, o[key].dump());
  return o[key].get<std::string>();
}

Status check_tool_name(const std::string& name, const std::string& where) {
  if (name.empty()) return Status::errorf("{}.name is empty", where);
  if (name.size() > 128) return Status::errorf("{}.name is {} bytes long (at most 128)", where, name.size());
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return Status::errorf("{}.name {:?} does not match ^[a-zA-Z0-9_-]+$", where, name);
  return Status::ok();
}

Result<ToolDecl> parse_tool(const ojson& t, size_t k) {
  const std::string where = fmt::format("tools[{}]", k);
  if (!t.is_object()) return Status::errorf("{} must be an object", where);
  if (!t.contains("type") || t["type"] != "function")
    return Status::errorf("{}.type must be \"function\", got {}", where, t.contains("type") ? t["type"].dump() : "nothing");
  if (!t.contains("function") || !t["function"].is_object()) return Status::errorf("{}: missing object \"function\"", where);
  const ojson& f = t["function"];
  ToolDecl d;
  if (!f.contains("name") || !f["name"].is_string()) return Status::errorf("{}.function: missing string \"name\"", where);
  d.name = f["name"].get<std::string>();
  DSI_RETURN_IF_ERROR(check_tool_name(d.name, where + ".function"));
  DSI_ASSIGN_OR_RETURN(d.description, optional_string(f, "description", where + ".function"));
  if (given(f, "parameters")) d.parameters = f["parameters"];
  if (given(f, "strict")) {
    if (!f["strict"].is_boolean()) return Status::errorf("{}.function.strict must be a boolean, got {}", where, f["strict"].dump());
    d.strict = f["strict"].get<bool>();
  }
  return d;
}

Status parse_tool_choice(const ojson& body, RequestOptions& o) {
  if (!given(body, "tool_choice")) return Status::ok();
  const ojson& c = body["tool_choice"];
  if (c == "auto") o.choice = ToolChoice::kAuto;
  else if (c == "none") o.choice = ToolChoice::kNone;
  else if (c == "required") o.choice = ToolChoice::kRequired;
  else if (c.is_object() && c.contains("type")) {
    if (c["type"] != "function") return Status::errorf("tool_choice.type must be \"function\", got {}", c["type"].dump());
    if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") || !c["function"]["name"].is_string())
      return Status::error("tool_choice: a named choice needs {\"function\": {\"name\": string}}");
    o.choice = ToolChoice::kNamed;
    o.named_tool = c["function"]["name"].get<std::string>();
  } else {
    return Status::errorf("tool_choice must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", ...}}, got {}", c.dump());
  }
  return Status::ok();
}

}  // namespace

Result<ResponseFormatSpec> parse_response_format(const ojson& rf) {
  const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
  ResponseFormatSpec r;
  if (type == "text") {
    r.format = ResponseFormat::kText;
  } else if (type == "json_object") {
    r.format = ResponseFormat::kJsonObject;
  } else if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) return Status::error("response_format: missing object \"json_schema\"");
    const ojson& js = rf["json_schema"];
    if (!js.contains("schema")) return Status::error("response_format.json_schema: missing field \"schema\"");
    DSI_ASSIGN_OR_RETURN(std::string name, optional_string(js, "name", "response_format.json_schema"));
    (void)name;
    if (given(js, "strict")) {
      if (!js["strict"].is_boolean()) return Status::errorf("response_format.json_schema.strict must be a boolean, got {}", js["strict"].dump());
      r.strict = js["strict"].get<bool>();
    }
    r.format = ResponseFormat::kJsonSchema;
    r.schema = js["schema"];
  } else if (type == "regex") {
    if (!rf.contains("regex") || !rf["regex"].is_string()) return Status::error("response_format: missing string \"regex\"");
    r.format = ResponseFormat::kRegex;
    r.regex = rf["regex"].get<std::string>();
  } else {
    return Status::errorf("response_format.type must be text, json_object, json_schema or regex; got {}", rf.dump().substr(0, 200));
  }
  return r;
}

namespace {

Result<ojson> tool_parameters(const ToolDecl& d, size_t k) {
  const std::string where = fmt::format("tools[{}].function.parameters", k);
  if (d.strict) {
    ojson schema = d.parameters;
    if (schema.is_null()) schema = ojson::parse(R"({"type": "object", "properties": {}, "additionalProperties": false, "required": []})");
    return normalize_strict_schema(schema, /*allow_empty_object=*/true, where);
  }
  if (d.parameters.is_null()) return ojson::object();
  DSI_RETURN_IF_ERROR(validate_json_schema(d.parameters, where));
  if (!(d.parameters.is_object() && d.parameters.contains("type") && d.parameters["type"] == "object"))
    return Status::errorf("{} must be a JSON Schema of \"type\": \"object\", got \"type\": {}", where,
                          d.parameters.is_object() && d.parameters.contains("type") ? d.parameters["type"].dump() : "null");
  return d.parameters;
}

}  // namespace

Status check_thinking_tool_choice(const Conversation& conv) {
  if (conv.thinking && !conv.tools.empty() &&
      (conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed))
    return Status::field_error(
        "tool_choice",
        "thinking mode does not support tool_choice \"required\" or a named function (DeepSeek's API "
        "rule); send \"thinking\": {\"type\": \"disabled\"} to force a tool call");
  return Status::ok();
}

Status parse_thinking(const ojson& body, Conversation& conv) {
  conv.thinking_given = given(body, "thinking") || given(body, "reasoning_effort");
  int explicit_mode = -1;  // -1: not given
  if (given(body, "thinking")) {
    const ojson& t = body["thinking"];
    const std::string type = t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
    if (type == "enabled" || type == "adaptive") explicit_mode = 1;
    else if (type == "disabled") explicit_mode = 0;
    else
      return Status::field_errorf("thinking", "thinking.type must be \"enabled\", \"adaptive\" or \"disabled\", got {}",
                                  t.dump());
    if (given(t, "budget_tokens") && !t["budget_tokens"].is_number_unsigned())
      return Status::field_errorf("thinking", "thinking.budget_tokens must be a non-negative integer, got {}",
                                  t["budget_tokens"].dump());
  }
  std::string effort;
  if (given(body, "reasoning_effort")) {
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"};
    const ojson& e = body["reasoning_effort"];
    // V4.1 also takes a number 1-100 (its prompt states the effort numerically).
    if (e.is_number_integer() && e.get<int64_t>() >= 1 && e.get<int64_t>() <= 100) {
      conv.effort_budget = int(e.get<int64_t>());
      conv.thinking = explicit_mode != 0;
      conv.effort = conv.effort_budget <= 25 ? ReasoningEffort::kLow : conv.effort_budget >= 100 ? ReasoningEffort::kMax : ReasoningEffort::kHigh;
      return Status::ok();
    }
    if (!e.is_string() || !kEfforts.count(e.get<std::string>()))
      return Status::field_errorf("reasoning_effort",
                                  "reasoning_effort must be one of none, minimal, low, medium, high, xhigh, ultra, max "
                                  "or an integer 1-100; got {}",
                                  e.dump());
    effort = e.get<std::string>();
  }
  conv.thinking = explicit_mode >= 0 ? explicit_mode == 1 : effort != "none";
  if (effort == "minimal" || effort == "low") conv.effort = ReasoningEffort::kLow;
  else if (effort == "ultra" || effort == "max") conv.effort = ReasoningEffort::kMax;
  else conv.effort = ReasoningEffort::kHigh;  // none (with thinking on), medium, high, xhigh, unset
  // V4.1's numbers for the names (low / high / xhigh / max = 25 / 50 / 75 / 100; V4's aliases alike).
  conv.effort_budget = conv.effort == ReasoningEffort::kLow ? 25 : conv.effort == ReasoningEffort::kMax ? 100 : effort == "xhigh" ? 75 : 50;
  return Status::ok();
}

Result<RequestOptions> parse_request_options(const ojson& body) {
  RequestOptions o;
  if (given(body, "tools")) {
    if (!body["tools"].is_array()) return Status::field_error("tools", "tools must be an array");
    for (size_t k = 0; k < body["tools"].size(); ++k) {
      Result<ToolDecl> d = parse_tool(body["tools"][k], k);
      if (!d) return d.status().with_field("tools");
      o.tools.push_back(std::move(d).value());
    }
  }
  DSI_RETURN_IF_ERROR(parse_tool_choice(body, o).with_field("tool_choice"));
  if (given(body, "response_format")) {
    o.has_response_format = true;
    Result<ResponseFormatSpec> rf = parse_response_format(body["response_format"]);
    if (!rf) return rf.status().with_field("response_format");
    o.response = std::move(rf).value();
  }
  return o;
}

Status apply_request_options(const RequestOptions& o, Conversation& conv) {
  conv.tool_choice = o.choice;
  if (o.choice != ToolChoice::kNone && !o.tools.empty()) {
    std::set<std::string> names;
    for (size_t k = 0; k < o.tools.size(); ++k) {
      const ToolDecl& d = o.tools[k];
      if (!names.insert(d.name).second)
        return Status::field_errorf("tools", "tools[{}]: tool name {:?} is not unique", k, d.name);
      Result<ojson> params = tool_parameters(d, k);
      if (!params) return params.status().with_field("tools");
      conv.tools.push_back(ToolDefinition{d.name, d.description, std::move(params).value(), d.strict});
    }
    if (o.choice == ToolChoice::kNamed) {
      if (!names.count(o.named_tool))
        return Status::field_errorf("tool_choice", "tool_choice names tool {:?}, which is not in tools", o.named_tool);
      conv.named_tool = o.named_tool;
      std::erase_if(conv.tools, [&](const ToolDefinition& t) { return t.name != o.named_tool; });
    }
    // Without "thinking" / "reasoning_effort" the mode is the model's default, checked where it is applied.
    if (conv.thinking_given) DSI_RETURN_IF_ERROR(check_thinking_tool_choice(conv));  // about tool_choice
  } else if (o.choice != ToolChoice::kNone) {
    conv.tool_choice = ToolChoice::kAuto;  // "required" / named without tools: nothing to require
  }
  const ResponseFormatSpec& rf = o.response;
  conv.response_format = rf.format;
  conv.response_regex = rf.regex;
  if (rf.format == ResponseFormat::kJsonSchema) {
    if (rf.strict) {
      DSI_RETURN_IF_ERROR(
          normalize_strict_schema(rf.schema, /*allow_empty_object=*/false, "response_format.json_schema.schema")
              .status()
              .with_field("response_format"));
    } else {
      DSI_RETURN_IF_ERROR(
          validate_json_schema(rf.schema, "response_format.json_schema.schema").with_field("response_format"));
    }
    conv.response_schema = rf.schema;  // rendered as written, also when strict
  }
  if (!conv.tools.empty() && conv.tool_choice != ToolChoice::kNone) {
    const bool any_strict = std::any_of(conv.tools.begin(), conv.tools.end(), [](const auto& t) { return t.strict; });
    const bool all_strict = std::all_of(conv.tools.begin(), conv.tools.end(), [](const auto& t) { return t.strict; });
    if (any_strict && !all_strict)
      return Status::field_error("tools", "tools: strict and non-strict tools cannot be mixed in one request");
    if (any_strict && o.has_response_format)
      return Status::field_error("response_format", "response_format cannot be used with strict tools");
  }
  return Status::ok();
}

}  // namespace dsinfer::chat
