// Chat Completions request validation and conversion: roles, content parts, tool calls / results pairing,
// thinking and reasoning-effort options, tool choice, response format.
#include "chat/chat_request.h"

#include <algorithm>
#include <set>

#include "io/json_limits.h"

namespace dsinfer::chat {
namespace {

std::string path_of(size_t i) { return fmt::format("messages[{}]", i); }

// Content: a string, or a list of {"type": "text", "text": ...} parts joined by "\n\n"; null only if allowed.
Result<std::string> content_text(const ojson& m, const std::string& where, bool null_ok) {
  if (!m.contains("content")) {
    if (null_ok) return std::string();
    return Status::errorf("{}: missing field \"content\"", where);
  }
  const ojson& c = m["content"];
  if (c.is_null()) {
    if (null_ok) return std::string();
    return Status::errorf("{}.content is null", where);
  }
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return Status::errorf("{}.content should be a string or a list of text parts", where);
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) {
    const ojson& p = c[k];
    if (!p.is_object() || !(p.contains("type") && p["type"] == "text") || !p.contains("text") || !p["text"].is_string())
      return Status::errorf("{}.content[{}] is not a {{\"type\": \"text\", \"text\": string}} part (only text is supported)",
                            where, k);
    if (k) out += "\n\n";
    out += p["text"].get<std::string>();
  }
  return out;
}

Result<ToolCall> parse_tool_call(const ojson& tc, const std::string& where) {
  if (!tc.is_object()) return Status::errorf("{} is not an object", where);
  ToolCall out;
  if (!tc.contains("id") || !tc["id"].is_string() || tc["id"].get<std::string>().empty())
    return Status::errorf("{}: missing or empty string \"id\"", where);
  out.id = tc["id"].get<std::string>();
  if (tc.contains("type") && tc["type"] != "function")
    return Status::errorf("{}.type must be \"function\", got {}", where, tc["type"].dump());
  if (!tc.contains("function") || !tc["function"].is_object()) return Status::errorf("{}: missing object \"function\"", where);
  const ojson& f = tc["function"];
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
    return Status::errorf("{}.function: missing or empty string \"name\"", where);
  out.name = f["name"].get<std::string>();
  if (!f.contains("arguments") || !f["arguments"].is_string())
    return Status::errorf("{}.function.arguments must be a string holding a JSON object", where);
  const std::string& args = f["arguments"].get_ref<const std::string&>();
  if (io::json_nesting_depth(args) > io::kMaxJsonDepth)
    return Status::errorf("{}.function.arguments is JSON nested deeper than {} levels", where, io::kMaxJsonDepth);
  ojson parsed = ojson::parse(args, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::errorf("{}.function.arguments is not valid JSON: {:?}", where, args.substr(0, 200));
  if (!parsed.is_object()) return Status::errorf("{}.function.arguments is JSON but not an object: {:?}", where, args.substr(0, 200));
  out.arguments = std::move(parsed);
  return out;
}

Result<ToolDefinition> parse_tool(const ojson& t, size_t k) {
  const std::string where = fmt::format("tools[{}]", k);
  if (!t.is_object() || !(t.contains("type") && t["type"] == "function") || !t.contains("function") ||
      !t["function"].is_object())
    return Status::errorf("{} must be {{\"type\": \"function\", \"function\": {{...}}}}", where);
  const ojson& f = t["function"];
  ToolDefinition d;
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
    return Status::errorf("{}.function: missing or empty string \"name\"", where);
  d.name = f["name"].get<std::string>();
  if (f.contains("description") && !f["description"].is_null()) {
    if (!f["description"].is_string()) return Status::errorf("{}.function.description is not a string", where);
    d.description = f["description"].get<std::string>();
  }
  if (f.contains("parameters") && !f["parameters"].is_null()) {
    if (!f["parameters"].is_object()) return Status::errorf("{}.function.parameters is not a JSON object", where);
    d.parameters = f["parameters"];
  }
  return d;
}

void lower(std::string& s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
}

}  // namespace

std::string dump_python_style(const ojson& v) {
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += ojson(it.key()).dump(-1, ' ', false, ojson::error_handler_t::replace);
      out += ": ";
      out += dump_python_style(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      out += dump_python_style(v[i]);
    }
    return out + "]";
  }
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

Result<Conversation> parse_chat_request_text(std::string_view text) {
  DSI_RETURN_IF_ERROR(io::check_json_depth(text, "chat request"));
  ojson body = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Status::error("chat request is not valid JSON");
  return parse_chat_request(body);
}

Result<Conversation> parse_chat_request(const ojson& body) {
  if (!body.is_object()) return Status::error("chat request: top level is not a JSON object");
  Conversation conv;
  // Options.
  if (body.contains("thinking") && !body["thinking"].is_null()) {
    const ojson& t = body["thinking"];
    std::string type = t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
    if (type == "enabled" || type == "adaptive") conv.thinking = true;
    else if (type == "disabled") conv.thinking = false;
    else return Status::errorf("thinking.type must be \"enabled\", \"adaptive\" or \"disabled\", got {}", t.dump());
  }
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    const ojson& e = body["reasoning_effort"];
    std::string s = e.is_string() ? e.get<std::string>() : "";
    if (s == "low" || s == "minimal" || s == "none") conv.effort = ReasoningEffort::kNone;
    else if (s == "medium" || s == "high" || s == "xhigh") conv.effort = ReasoningEffort::kHigh;
    else if (s == "max") conv.effort = ReasoningEffort::kMax;
    else return Status::errorf("reasoning_effort must be one of low, medium, high, xhigh, max; got {}", e.dump());
  }
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) return Status::error("tools is not an array");
    std::set<std::string> names;
    for (size_t k = 0; k < body["tools"].size(); ++k) {
      DSI_ASSIGN_OR_RETURN(ToolDefinition d, parse_tool(body["tools"][k], k));
      if (!names.insert(d.name).second) return Status::errorf("tools[{}]: tool name {:?} is not unique", k, d.name);
      conv.tools.push_back(std::move(d));
    }
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c == "auto") conv.tool_choice = ToolChoice::kAuto;
    else if (c == "none") conv.tool_choice = ToolChoice::kNone;
    else if (c == "required") conv.tool_choice = ToolChoice::kRequired;
    else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") && c["function"].is_object() &&
             c["function"].contains("name") && c["function"]["name"].is_string()) {
      conv.tool_choice = ToolChoice::kNamed;
      conv.named_tool = c["function"]["name"].get<std::string>();
      bool known = std::any_of(conv.tools.begin(), conv.tools.end(), [&](const auto& t) { return t.name == conv.named_tool; });
      if (!known) return Status::errorf("tool_choice names tool {:?}, which is not in tools", conv.named_tool);
    } else {
      return Status::errorf("tool_choice must be \"auto\", \"none\", \"required\" or a named function, got {}", c.dump());
    }
    if ((conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed) && conv.tools.empty())
      return Status::error("tool_choice requires a tool but tools is empty");
    if ((conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed) && conv.thinking)
      return Status::error("thinking mode does not support tool_choice \"required\" or a named function");
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const ojson& rf = body["response_format"];
    std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
    if (type == "text") conv.response_format = ResponseFormat::kText;
    else if (type == "json_object") conv.response_format = ResponseFormat::kJsonObject;
    else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
        return Status::error("response_format json_schema: missing json_schema.schema");
      conv.response_format = ResponseFormat::kJsonSchema;
      conv.response_schema = rf["json_schema"]["schema"];
    } else {
      return Status::errorf("response_format.type must be text, json_object or json_schema; got {}", rf.dump());
    }
  }

  // Messages.
  if (!body.contains("messages") || !body["messages"].is_array()) return Status::error("chat request: missing array \"messages\"");
  const ojson& msgs = body["messages"];
  if (msgs.empty()) return Status::error("chat request: \"messages\" is empty");
  std::vector<std::string> pending_ids;  // tool calls of the last assistant message still awaiting results
  std::vector<ChatMessage> tool_batch;   // results collected for them
  auto flush_tools = [&]() -> Status {
    if (pending_ids.empty()) return Status::ok();
    if (tool_batch.size() != pending_ids.size()) {
      std::string missing;
      for (const auto& id : pending_ids)
        if (std::none_of(tool_batch.begin(), tool_batch.end(), [&](const auto& t) { return t.tool_call_id == id; }))
          missing += (missing.empty() ? "" : ", ") + id;
      return Status::errorf("tool calls without a tool message answering them: {}", missing);
    }
    for (const auto& id : pending_ids)  // results in the order of the calls
      for (auto& t : tool_batch)
        if (t.tool_call_id == id) conv.messages.push_back(std::move(t));
    pending_ids.clear();
    tool_batch.clear();
    return Status::ok();
  };
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ojson& m = msgs[i];
    const std::string where = path_of(i);
    if (!m.is_object()) return Status::errorf("{} is not an object", where);
    if (!m.contains("role") || !m["role"].is_string()) return Status::errorf("{}: missing string \"role\"", where);
    const std::string role = m["role"].get<std::string>();
    ChatMessage msg;
    if (role == "tool") {
      msg.role = Role::kTool;
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        return Status::errorf("{}: a tool message needs a string \"tool_call_id\"", where);
      msg.tool_call_id = m["tool_call_id"].get<std::string>();
      DSI_ASSIGN_OR_RETURN(msg.content, content_text(m, where, false));
      bool expected = std::find(pending_ids.begin(), pending_ids.end(), msg.tool_call_id) != pending_ids.end();
      bool dup = std::any_of(tool_batch.begin(), tool_batch.end(), [&](const auto& t) { return t.tool_call_id == msg.tool_call_id; });
      if (!expected || dup)
        return Status::errorf("{}: tool message with tool_call_id {:?} does not answer a pending tool call of the preceding "
                              "assistant message", where, msg.tool_call_id);
      tool_batch.push_back(std::move(msg));
      continue;
    }
    DSI_RETURN_IF_ERROR(flush_tools());
    if (role == "system" || role == "developer") {
      DSI_ASSIGN_OR_RETURN(std::string c, content_text(m, where, false));
      if (conv.has_system) conv.system += "\n\n";
      conv.system += c;
      conv.has_system = true;
      continue;
    }
    if (role == "user") {
      msg.role = Role::kUser;
      DSI_ASSIGN_OR_RETURN(msg.content, content_text(m, where, false));
    } else if (role == "latest_reminder") {
      msg.role = Role::kLatestReminder;
      DSI_ASSIGN_OR_RETURN(msg.content, content_text(m, where, false));
    } else if (role == "assistant") {
      msg.role = Role::kAssistant;
      DSI_ASSIGN_OR_RETURN(msg.content, content_text(m, where, true));
      if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
        if (!m["reasoning_content"].is_string()) return Status::errorf("{}.reasoning_content is not a string", where);
        msg.reasoning = m["reasoning_content"].get<std::string>();
        msg.has_reasoning = true;
      }
      if (m.contains("prefix") && !m["prefix"].is_null()) {
        if (!m["prefix"].is_boolean()) return Status::errorf("{}.prefix is not a boolean", where);
        msg.prefix = m["prefix"].get<bool>();
        if (msg.prefix && i + 1 != msgs.size()) return Status::errorf("{}: only the last message may be a prefix", where);
      }
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array()) return Status::errorf("{}.tool_calls is not an array", where);
        for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
          DSI_ASSIGN_OR_RETURN(ToolCall tc, parse_tool_call(m["tool_calls"][k], fmt::format("{}.tool_calls[{}]", where, k)));
          if (std::find(pending_ids.begin(), pending_ids.end(), tc.id) != pending_ids.end())
            return Status::errorf("{}.tool_calls[{}]: duplicate id {:?}", where, k, tc.id);
          pending_ids.push_back(tc.id);
          msg.tool_calls.push_back(std::move(tc));
        }
      }
    } else {
      return Status::errorf("{}: unknown role {:?} (expected system, user, assistant, tool, latest_reminder)", where, role);
    }
    conv.messages.push_back(std::move(msg));
  }
  // Every tool call needs its result, also at the end of the conversation.
  DSI_RETURN_IF_ERROR(flush_tools());
  if (conv.messages.empty() && !conv.has_system) return Status::error("chat request: no messages after conversion");
  if (conv.response_format == ResponseFormat::kJsonObject) {
    std::string all = conv.system;
    for (const auto& m : conv.messages) all += m.content;
    lower(all);
    if (all.find("json") == std::string::npos)
      return Status::error("response_format json_object requires the word 'json' somewhere in the messages");
  }
  return conv;
}

}  // namespace dsinfer::chat
