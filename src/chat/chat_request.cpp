// Chat Completions request -> Conversation, following deepseek-recipe 0.2.0's ChatCompletionRequest
// deserialisation and convert(): roles, content parts, tool calls and their results, prefix continuation,
// then the request options (chat_options.cpp) and the rules that combine them.
#include "chat/chat_request.h"

#include <algorithm>
#include <set>

#include "chat/chat_options.h"
#include "io/json_limits.h"
#include "io/json_parse.h"

namespace dsinfer::chat {
namespace {

constexpr const char* kUnsupportedImage = "[Unsupported Image]";  // V4 takes no image input

bool given(const ojson& o, const char* key) { return o.contains(key) && !o[key].is_null(); }

Status check_image_part(const ojson& p, const std::string& where) {
  if (p["type"] == "image_url") {
    if (!p.contains("image_url") || !p["image_url"].is_object() || !p["image_url"].contains("url") || !p["image_url"]["url"].is_string())
      return Status::errorf("{}: an image_url part needs {{\"image_url\": {{\"url\": string}}}}", where);
    const ojson& img = p["image_url"];
    static const std::set<std::string> kDetail = {"low", "high", "original", "auto"};
    if (given(img, "detail") && !(img["detail"].is_string() && kDetail.count(img["detail"].get<std::string>())))
      return Status::errorf("{}.image_url.detail must be low, high, original or auto, got {}", where, img["detail"].dump());
    return Status::ok();
  }
  for (const char* k : {"file_id", "file_data", "filename"})
    if (given(p, k) && !p[k].is_string()) return Status::errorf("{}.{} must be a string", where, k);
  return Status::ok();
}

// Content: a string, or a list of text / image_url / file parts joined by "\n\n" (images become a
// placeholder text: DeepSeek-V4 takes no image input). *present is false for an absent or null content.
Status content_text(const ojson& m, const std::string& where, std::string& out, bool* present) {
  out.clear();
  *present = given(m, "content");
  if (!*present) return Status::errorf("{}: missing \"content\" (a string or a list of parts)", where);
  const ojson& c = m["content"];
  if (c.is_string()) {
    out = c.get<std::string>();
    return Status::ok();
  }
  if (!c.is_array()) return Status::errorf("{}.content should be a string or a list of parts, got {}", where, c.type_name());
  for (size_t k = 0; k < c.size(); ++k) {
    const ojson& p = c[k];
    const std::string pw = fmt::format("{}.content[{}]", where, k);
    const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
    if (k) out += "\n\n";
    if (type == "text") {
      if (!p.contains("text") || !p["text"].is_string()) return Status::errorf("{}: a text part needs a string \"text\"", pw);
      out += p["text"].get<std::string>();
    } else if (type == "image_url" || type == "file") {
      DSI_RETURN_IF_ERROR(check_image_part(p, pw));
      out += kUnsupportedImage;
    } else {
      return Status::errorf("{} is not a text, image_url or file part: {}", pw, p.dump().substr(0, 200));
    }
  }
  return Status::ok();
}

Status required_content(const ojson& m, const std::string& where, std::string& out) {
  bool present = false;
  return content_text(m, where, out, &present);
}

Status optional_name(const ojson& m, const std::string& where) {
  if (given(m, "name") && !m["name"].is_string()) return Status::errorf("{}.name must be a string", where);
  return Status::ok();
}

// An Anthropic billing header at the start of a system message is dropped, up to the first newline or
// "You are" (deepseek-recipe strips it the same way).
std::string strip_billing_header(std::string s) {
  if (s.rfind("x-anthropic-billing-header", 0) != 0) return s;
  size_t start = std::min(s.find('\n'), s.find("You are"));
  if (start == std::string::npos) return "";
  start = s.find_first_not_of(" \t\n\r\f\v", start);
  return start == std::string::npos ? "" : s.substr(start);
}

Result<ToolCall> parse_tool_call(const ojson& tc, const std::string& where) {
  if (!tc.is_object()) return Status::errorf("{} is not an object", where);
  ToolCall out;
  if (!tc.contains("id") || !tc["id"].is_string()) return Status::errorf("{}: missing string \"id\"", where);
  out.id = tc["id"].get<std::string>();
  if (!tc.contains("type") || tc["type"] != "function")
    return Status::errorf("{}.type must be \"function\", got {}", where, tc.contains("type") ? tc["type"].dump() : "nothing");
  if (!tc.contains("function") || !tc["function"].is_object()) return Status::errorf("{}: missing object \"function\"", where);
  const ojson& f = tc["function"];
  if (!f.contains("name") || !f["name"].is_string()) return Status::errorf("{}.function: missing string \"name\"", where);
  out.name = f["name"].get<std::string>();
  if (!f.contains("arguments") || !f["arguments"].is_string())
    return Status::errorf("{}.function.arguments must be a string holding a JSON object", where);
  const std::string& args = f["arguments"].get_ref<const std::string&>();
  Result<ojson> arguments = io::parse_json(args, where + ".function.arguments");  // linear in the keys
  if (!arguments) {
    if (io::json_nesting_depth(args) > io::kMaxJsonDepth) return arguments.status();
    return Status::errorf("{}.function.arguments is not valid JSON: {:?}", where, args.substr(0, 200));
  }
  ojson parsed = std::move(arguments).value();
  if (!parsed.is_object()) return Status::errorf("{}.function.arguments is JSON but not an object: {:?}", where, args.substr(0, 200));
  out.arguments = std::move(parsed);
  return out;
}

struct MessageState {
  Conversation& conv;
  size_t count = 0;           // messages after conversion (non-empty systems included)
  long prefix_index = -1;     // converted index of the first prefix message
  bool tool_context = false;  // an assistant message with tool_calls, or a tool message
  bool mentions_json = false;  // some content holds "json" (ASCII case-insensitive), for json_object
  void saw(const std::string& content) {
    for (size_t i = 0; !mentions_json && i + 4 <= content.size(); ++i) {
      std::string w = content.substr(i, 4);
      std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      mentions_json = w == "json";
    }
  }
};

// One assistant message and the tool messages answering its calls (they must follow it, one per call).
Status parse_assistant(const ojson& msgs, size_t& i, MessageState& st) {
  const ojson& m = msgs[i];
  const std::string where = fmt::format("messages[{}]", i);
  ChatMessage msg;
  msg.role = Role::kAssistant;
  DSI_RETURN_IF_ERROR(optional_name(m, where));
  bool has_content = false;
  Status cs = content_text(m, where, msg.content, &has_content);
  if (has_content && !cs) return cs;
  if (!has_content && !given(m, "tool_calls")) return Status::errorf("{}: an assistant message needs content or tool_calls", where);
  if (given(m, "reasoning_content")) {
    if (!m["reasoning_content"].is_string()) return Status::errorf("{}.reasoning_content must be a string", where);
    msg.reasoning = m["reasoning_content"].get<std::string>();
    msg.has_reasoning = true;
  }
  if (given(m, "prefix")) {
    if (!m["prefix"].is_boolean()) return Status::errorf("{}.prefix must be a boolean", where);
    msg.prefix = m["prefix"].get<bool>();
  }
  if (msg.prefix && st.prefix_index < 0) st.prefix_index = long(st.count);
  std::vector<ChatMessage> results;
  if (given(m, "tool_calls")) {
    const ojson& calls = m["tool_calls"];
    if (!calls.is_array()) return Status::errorf("{}.tool_calls must be an array", where);
    if (calls.empty()) return Status::errorf("{}.tool_calls is empty (give at least one call, or leave it out)", where);
    std::set<std::string> ids;
    for (size_t k = 0; k < calls.size(); ++k) {
      DSI_ASSIGN_OR_RETURN(ToolCall tc, parse_tool_call(calls[k], fmt::format("{}.tool_calls[{}]", where, k)));
      if (!ids.insert(tc.id).second) return Status::errorf("{}.tool_calls[{}]: duplicate id {:?}", where, k, tc.id);
      msg.tool_calls.push_back(std::move(tc));
    }
    st.tool_context = true;
    std::set<std::string> answered;
    for (size_t k = 0; k < calls.size(); ++k) {
      const size_t j = i + 1 + k;
      const std::string rw = fmt::format("messages[{}]", j);
      if (j >= msgs.size() || !msgs[j].is_object() || msgs[j].value("role", "") != "tool")
        return Status::errorf("{}: its {} tool calls must be followed by one tool message each; {} is not a tool message",
                              where, calls.size(), j >= msgs.size() ? "the end of messages" : rw);
      const ojson& t = msgs[j];
      if (!t.contains("tool_call_id") || !t["tool_call_id"].is_string()) return Status::errorf("{}: missing string \"tool_call_id\"", rw);
      ChatMessage r;
      r.role = Role::kTool;
      r.tool_call_id = t["tool_call_id"].get<std::string>();
      if (!ids.count(r.tool_call_id))
        return Status::errorf("{}: tool_call_id {:?} answers no tool call of {}", rw, r.tool_call_id, where);
      if (!answered.insert(r.tool_call_id).second) return Status::errorf("{}: tool_call_id {:?} is answered twice", rw, r.tool_call_id);
      DSI_RETURN_IF_ERROR(required_content(t, rw, r.content));
      results.push_back(std::move(r));
    }
    i += calls.size();
  }
  st.saw(msg.content);
  st.conv.messages.push_back(std::move(msg));
  ++st.count;
  for (auto& r : results) {
    st.saw(r.content);
    st.conv.messages.push_back(std::move(r));
    ++st.count;
  }
  return Status::ok();
}

Status parse_messages(const ojson& body, MessageState& st) {
  if (!body.contains("messages") || !body["messages"].is_array()) return Status::error("chat request: missing array \"messages\"");
  const ojson& msgs = body["messages"];
  if (msgs.empty()) return Status::error("chat request: \"messages\" is empty");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ojson& m = msgs[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return Status::errorf("{} is not an object", where);
    if (!m.contains("role") || !m["role"].is_string()) return Status::errorf("{}: missing string \"role\"", where);
    const std::string role = m["role"].get<std::string>();
    if (role == "assistant") {
      DSI_RETURN_IF_ERROR(parse_assistant(msgs, i, st));
      continue;
    }
    ChatMessage msg;
    if (role == "system" || role == "user") DSI_RETURN_IF_ERROR(optional_name(m, where));
    if (role == "system") {
      std::string c;
      DSI_RETURN_IF_ERROR(required_content(m, where, c));
      c = strip_billing_header(std::move(c));
      if (c.empty()) continue;  // empty system messages are dropped
      if (st.conv.has_system) st.conv.system += "\n\n";
      st.conv.system += c;
      st.conv.has_system = true;
      st.conv.system_messages.push_back({st.conv.messages.size(), c});
      st.saw(c);
      ++st.count;
      continue;
    }
    if (role == "user") {
      msg.role = Role::kUser;
      DSI_RETURN_IF_ERROR(required_content(m, where, msg.content));
    } else if (role == "latest_reminder") {
      msg.role = Role::kLatestReminder;
      if (!m.contains("content") || !m["content"].is_string()) return Status::errorf("{}: a latest_reminder needs a string \"content\"", where);
      msg.content = m["content"].get<std::string>();
    } else if (role == "tool") {
      return Status::errorf("{}: a tool message must answer a tool call of the assistant message right before it", where);
    } else {
      return Status::errorf("{}: unknown role {:?} (expected system, user, assistant, tool, latest_reminder)", where, role);
    }
    st.saw(msg.content);
    st.conv.messages.push_back(std::move(msg));
    ++st.count;
  }
  return Status::ok();
}

}  // namespace

Result<Conversation> parse_chat_request_text(std::string_view text) {
  DSI_ASSIGN_OR_RETURN(const ojson body, io::parse_json(text, "chat request"));
  return parse_chat_request(body);
}

Result<Conversation> parse_chat_request(const ojson& body) {
  if (!body.is_object()) return Status::error("chat request: top level is not a JSON object");
  Conversation conv;
  DSI_RETURN_IF_ERROR(parse_thinking(body, conv));
  DSI_ASSIGN_OR_RETURN(RequestOptions opts, parse_request_options(body));
  MessageState st{conv};
  DSI_RETURN_IF_ERROR(parse_messages(body, st).with_field("messages"));
  if (!conv.thinking)
    for (ChatMessage& m : conv.messages) m.reasoning.clear(), m.has_reasoning = false;  // not rendered without thinking
  const bool prefix = st.prefix_index >= 0;
  if (prefix && size_t(st.prefix_index) + 1 != st.count)
    return Status::field_error("messages",
                               "messages: only the last message may be an assistant message with \"prefix\": true");
  if (opts.response.format == ResponseFormat::kJsonObject && !st.mentions_json)
    return Status::field_error("response_format",
                               "response_format json_object requires the word 'json' in some message");
  DSI_RETURN_IF_ERROR(apply_request_options(opts, conv));
  if (prefix && opts.response.format == ResponseFormat::kJsonObject)
    return Status::field_error(
        "response_format", "response_format json_object cannot be used with a prefix (continued) assistant message");
  if (prefix && (st.tool_context || !opts.tools.empty()))
    return Status::field_error("tools",
                               "tools and tool calls cannot be used with a prefix (continued) assistant message");
  return conv;
}

}  // namespace dsinfer::chat
