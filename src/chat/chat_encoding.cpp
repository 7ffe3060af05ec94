// V4 prompt layout; strings below are the DeepSeek-V4 template texts (as deepseek-recipe 0.2.0 renders them).
#include "chat/chat_encoding.h"

#include "chat/chat_request.h"

namespace dsinfer::chat {
namespace {

constexpr const char* kEffortHigh =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking and "
    "comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against "
    "all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire deliberation "
    "process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure "
    "absolutely no assumption is left unchecked.\n\n";
constexpr const char* kEffortMax =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\nYou MUST reason with the "
    "utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most "
    "fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any "
    "surface symptom.\nDo not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";
constexpr const char* kJsonObject =
    "You are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.";
constexpr const char* kJsonSchema = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

struct Builder {
  RenderedPrompt& out;
  void plain(std::string_view s) { out.prompt += s; }
  void special(std::string_view s) {
    out.special_ranges.emplace_back(out.prompt.size(), out.prompt.size() + s.size());
    out.prompt += s;
  }
  // Template text in which every occurrence of the given spellings is a special token.
  void templ(std::string_view s, const std::vector<std::string_view>& specials) {
    size_t i = 0;
    while (i < s.size()) {
      size_t best = std::string_view::npos, best_len = 0;
      for (auto sp : specials) {
        size_t f = s.find(sp, i);
        if (f < best || (f == best && sp.size() > best_len)) best = f, best_len = sp.size();
      }
      if (best == std::string_view::npos) break;
      plain(s.substr(i, best - i));
      special(s.substr(best, best_len));
      i = best + best_len;
    }
    plain(s.substr(i));
  }
};

std::string tools_head(const V4Tokens& t) {
  const std::string d = t.dsml;
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<" + d + "tool_calls>\" block like the following:\n\n<" + d + "tool_calls>\n<" + d +
         "invoke name=\"$TOOL_NAME\">\n<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
         "$PARAMETER_VALUE</" + d + "parameter>\n...\n</" + d + "invoke>\n<" + d + "invoke name=\"$TOOL_NAME2\">\n...\n</" +
         d + "invoke>\n</" + d + "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. "
         "For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
         "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by " + t.think_start + "), you MUST output your "
         "complete reasoning inside " + t.think_start + "..." + t.think_end + " BEFORE any tool calls or final "
         "response.\n\nOtherwise, output directly after " + t.think_end + " with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n";
}

}  // namespace

void append_dsml_tool_calls(const std::vector<ToolCall>& calls, const V4Tokens& t, RenderedPrompt& out) {
  Builder b{out};
  b.plain("<"); b.special(t.dsml); b.plain("tool_calls>\n");
  for (const ToolCall& c : calls) {
    b.plain("<"); b.special(t.dsml); b.plain("invoke name=\"" + c.name + "\">\n");
    for (auto it = c.arguments.begin(); it != c.arguments.end(); ++it) {
      const bool is_str = it.value().is_string();
      b.plain("<"); b.special(t.dsml);
      b.plain("parameter name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">");
      b.plain(is_str ? it.value().get<std::string>() : dump_python_style(it.value()));
      b.plain("</"); b.special(t.dsml); b.plain("parameter>\n");
    }
    b.plain("</"); b.special(t.dsml); b.plain("invoke>\n");
  }
  b.plain("</"); b.special(t.dsml); b.plain("tool_calls>");
}

RenderedPrompt render_v4_prompt(const Conversation& conv, const V4Tokens& t) {
  RenderedPrompt out;
  Builder b{out};
  const bool tools_shown = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  // Earlier reasoning is kept only in thinking mode with tools (agentic loops need it); otherwise every
  // historical assistant turn is rendered as "</think>content".
  const bool keep_reasoning = conv.thinking && tools_shown;

  b.special(t.bos);
  if (conv.thinking && conv.effort == ReasoningEffort::kHigh) b.plain(kEffortHigh);
  if (conv.thinking && conv.effort == ReasoningEffort::kMax) b.plain(kEffortMax);
  b.plain(conv.system);
  if (tools_shown) {
    b.plain("\n\n");
    b.templ(tools_head(t), {t.dsml, t.think_start, t.think_end});
    bool first = true;
    for (const ToolDefinition& d : conv.tools) {
      if (conv.tool_choice == ToolChoice::kNamed && d.name != conv.named_tool) continue;
      ojson schema = ojson::object();
      schema["name"] = d.name;
      schema["description"] = d.description;
      schema["parameters"] = d.parameters;
      if (!first) b.plain("\n");
      first = false;
      b.plain(dump_python_style(schema));
    }
    b.plain("\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
  }
  if (conv.response_format == ResponseFormat::kJsonObject) {
    b.plain("\n\n");
    b.plain(kJsonObject);
  } else if (conv.response_format == ResponseFormat::kJsonSchema) {
    b.plain("\n\n");
    b.plain(kJsonSchema);
    b.plain(dump_python_style(conv.response_schema));
  }

  // Consecutive user / tool messages form one user turn, parts joined by "\n\n".
  bool in_user_turn = false;
  bool ends_with_prefix = false;
  for (const ChatMessage& m : conv.messages) {
    switch (m.role) {
      case Role::kUser:
      case Role::kTool:
        if (in_user_turn) b.plain("\n\n");
        else b.special(t.user);
        in_user_turn = true;
        if (m.role == Role::kTool) b.plain("<tool_result>" + m.content + "</tool_result>");
        else b.plain(m.content);
        break;
      case Role::kLatestReminder:
        b.special(t.latest_reminder);
        b.plain(m.content);
        in_user_turn = false;
        break;
      case Role::kAssistant: {
        in_user_turn = false;
        b.special(t.assistant);
        // The continued (prefix) turn always shows its reasoning in thinking mode.
        if (keep_reasoning || (m.prefix && conv.thinking)) {
          b.special(t.think_start);
          b.plain(m.reasoning);
          if (!(m.prefix && m.content.empty() && m.tool_calls.empty())) b.special(t.think_end);
        } else {
          b.special(t.think_end);
        }
        b.plain(m.content);
        if (!m.tool_calls.empty()) {
          b.plain("\n\n");
          append_dsml_tool_calls(m.tool_calls, t, out);
        }
        if (m.prefix) ends_with_prefix = true;
        else b.special(t.eos);
        break;
      }
      case Role::kSystem:
        break;  // merged into conv.system by the request parser
    }
  }
  if (!ends_with_prefix) {
    b.special(t.assistant);
    b.special(conv.thinking ? t.think_start : t.think_end);
    if (conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed) {
      b.plain("\n\n<");
      b.special(t.dsml);
      b.plain("tool_calls>\n");
    }
  }
  return out;
}

Result<std::vector<int32_t>> encode_prompt(const RenderedPrompt& p, const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  std::string_view s = p.prompt;
  for (const auto& [b, e] : p.special_ranges) {
    DSI_RETURN_IF_ERROR(tok.encode(s.substr(pos, b - pos), ids, tokenizer::EncodeMode::kPlainText));
    auto id = tok.token_to_id(s.substr(b, e - b));
    if (!id) return Status::errorf("encode_prompt: the tokenizer has no token {:?}", s.substr(b, e - b));
    ids.push_back(*id);
    pos = e;
  }
  DSI_RETURN_IF_ERROR(tok.encode(s.substr(pos), ids, tokenizer::EncodeMode::kPlainText));
  return ids;
}

}  // namespace dsinfer::chat
