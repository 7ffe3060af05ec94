// V4 prompt layout; strings below are the DeepSeek-V4 template texts (as deepseek-recipe 0.2.0 renders them).
#include "chat/chat_encoding.h"

#include <algorithm>

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
        if (f < best || (f == best && sp.size() > best_len)) {
          best = f;
          best_len = sp.size();
        }
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
  const std::string &d = t.dsml, &c = t.calls_tag, &i = t.invoke_tag, &p = t.param_tag;
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<" + d + c + ">\" block like the following:\n\n<" + d + c + ">\n<" + d + i +
         " name=\"$TOOL_NAME\">\n<" + d + p + " name=\"$PARAMETER_NAME\" string=\"true|false\">"
         "$PARAMETER_VALUE</" + d + p + ">\n...\n</" + d + i + ">\n<" + d + i + " name=\"$TOOL_NAME2\">\n...\n</" +
         d + i + ">\n</" + d + c + ">\n\nString parameters should be specified as is and set `string=\"true\"`. "
         "For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
         "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by " + t.think_start + "), you MUST output your "
         "complete reasoning inside " + t.think_start + "..." + t.think_end + " BEFORE any tool calls or final "
         "response.\n\nOtherwise, output directly after " + t.think_end + " with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n";
}

// Assistant content and reasoning: the grounding tokens (<｜ref｜> ... <｜/polygon｜>) are special tokens there,
// every other spelling is plain text.
void assistant_text(Builder& b, std::string_view s) {
  static constexpr std::string_view kGrounding[] = {"<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>",
                                                    "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>"};
  size_t i = 0;
  while (i < s.size()) {
    size_t best = std::string_view::npos, len = 0;
    for (std::string_view g : kGrounding) {
      size_t f = s.find(g, i);
      if (f < best) {
        best = f;
        len = g.size();
      }
    }
    if (best == std::string_view::npos) break;
    b.plain(s.substr(i, best - i));
    b.special(s.substr(best, len));
    i = best + len;
  }
  b.plain(s.substr(i));
}

void render_assistant(const ChatMessage& m, const V4Tokens& t, bool thinking, bool keep_reasoning, bool last, RenderedPrompt& out) {
  Builder b{out};
  b.special(t.assistant);
  // Reasoning is shown with the tool prompt, and always for the continued (prefix) turn in thinking mode.
  if (thinking && (keep_reasoning || m.prefix)) {
    b.special(t.think_start);
    assistant_text(b, m.reasoning);
  }
  if (!thinking || !m.prefix || !m.content.empty()) b.special(t.think_end);
  assistant_text(b, m.content);
  if (!m.tool_calls.empty()) {
    std::vector<ToolCall> calls = m.tool_calls;  // rendered in id order, as are their results
    std::stable_sort(calls.begin(), calls.end(), [](const ToolCall& a, const ToolCall& c) { return a.id < c.id; });
    b.plain("\n\n");
    append_dsml_tool_calls(calls, t, out);
  }
  if (!last || !m.prefix) b.special(t.eos);
}

// Consecutive user messages are one user turn (non-empty contents joined by "\n\n"); tool results form a user
// turn of <tool_result> blocks in tool_call_id order, and a user message right after them joins that turn.
void render_messages(const Conversation& conv, const V4Tokens& t, bool keep_reasoning, RenderedPrompt& out) {
  Builder b{out};
  std::vector<const ChatMessage*> order;
  for (const ChatMessage& m : conv.messages) order.push_back(&m);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t n = order[i]->role == Role::kAssistant ? order[i]->tool_calls.size() : 0;
    if (n && i + n < order.size() + 1)
      std::stable_sort(order.begin() + long(i) + 1, order.begin() + long(std::min(order.size(), i + 1 + n)),
                       [](const ChatMessage* a, const ChatMessage* c) { return a->tool_call_id < c->tool_call_id; });
  }
  Role prev = Role::kSystem;
  bool user_nonempty = false;  // the user turn being merged has content so far
  for (size_t i = 0; i < order.size(); ++i) {
    const ChatMessage& m = *order[i];
    switch (m.role) {
      case Role::kUser:
        if (prev == Role::kUser) {
          if (!m.content.empty() && user_nonempty) b.plain("\n\n");
          user_nonempty = user_nonempty || !m.content.empty();
        } else {
          if (prev == Role::kTool) b.plain("\n\n");
          else b.special(t.user);
          user_nonempty = !m.content.empty();
        }
        b.plain(m.content);
        break;
      case Role::kTool:
        if (prev == Role::kTool) b.plain("\n\n");
        else b.special(t.user);
        b.plain("<tool_result>" + m.content + "</tool_result>");
        break;
      case Role::kLatestReminder:
        b.special(t.latest_reminder);
        b.plain(m.content);
        break;
      case Role::kAssistant:
        render_assistant(m, t, conv.thinking, keep_reasoning, i + 1 == order.size(), out);
        break;
      case Role::kSystem:
        break;  // merged into conv.system by the request parser
    }
    prev = m.role;
  }
}

}  // namespace

void append_dsml_tool_calls(const std::vector<ToolCall>& calls, const V4Tokens& t, RenderedPrompt& out) {
  Builder b{out};
  b.plain("<"); b.special(t.dsml); b.plain(t.calls_tag + ">\n");
  for (const ToolCall& c : calls) {
    b.plain("<"); b.special(t.dsml); b.plain(t.invoke_tag + " name=\"" + c.name + "\">\n");
    // V4.1 joins the parameters with "\n" and closes with "\n</invoke>": an argument-less call has a blank line.
    if (t.family == ChatFamily::kV41 && c.arguments.empty()) b.plain("\n");
    for (auto it = c.arguments.begin(); it != c.arguments.end(); ++it) {
      const bool is_str = it.value().is_string();
      b.plain("<"); b.special(t.dsml);
      b.plain(t.param_tag + " name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">");
      b.plain(is_str ? it.value().get<std::string>() : dump_python_style(it.value(), t.numbers));
      b.plain("</"); b.special(t.dsml); b.plain(t.param_tag + ">\n");
    }
    b.plain("</"); b.special(t.dsml); b.plain(t.invoke_tag + ">\n");
  }
  b.plain("</"); b.special(t.dsml); b.plain(t.calls_tag + ">");
}

V4Tokens tokens_for(ChatFamily f) {
  V4Tokens t;
  t.family = f;
  if (f == ChatFamily::kV41) {
    t.calls_tag = " calls";
    t.invoke_tag = " invoke";
    t.param_tag = " parameter";
    t.numbers = JsonNumbers::kPython;
  }
  return t;
}

RenderedPrompt render_prompt(const Conversation& conv, ChatFamily family) {
  return family == ChatFamily::kV41 ? render_v41_prompt(conv) : render_v4_prompt(conv);
}

void append_tools_prompt(const std::vector<ToolDefinition>& tools, const V4Tokens& t, RenderedPrompt& out) {
  Builder b{out};
  b.templ(tools_head(t), {t.dsml, t.think_start, t.think_end});
  for (const ToolDefinition& d : tools) {
    ojson schema = ojson::object();
    schema["name"] = d.name;
    schema["description"] = d.description;
    schema["parameters"] = d.parameters;
    b.plain(dump_python_style(schema, t.numbers));
    b.plain("\n");
  }
  b.plain("\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
}

RenderedPrompt render_v4_prompt(const Conversation& conv, const V4Tokens& t) {
  RenderedPrompt out;
  Builder b{out};
  const bool tools_shown = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  // Earlier reasoning is kept only with the tool prompt (agentic loops need it); otherwise every historical
  // assistant turn is rendered as "</think>content".
  const bool keep_reasoning = conv.thinking && tools_shown;

  b.special(t.bos);
  if (conv.thinking && conv.effort == ReasoningEffort::kHigh) b.plain(kEffortHigh);
  if (conv.thinking && conv.effort == ReasoningEffort::kMax) b.plain(kEffortMax);
  b.plain(conv.system);
  if (tools_shown) {
    b.plain("\n\n");
    append_tools_prompt(conv.tools, t, out);
  }
  if (conv.response_format == ResponseFormat::kJsonObject) {
    b.plain("\n\n");
    b.plain(kJsonObject);
  } else if (conv.response_format == ResponseFormat::kJsonSchema) {
    b.plain("\n\n");
    b.plain(kJsonSchema);
    b.plain(dump_python_style(conv.response_schema, t.numbers));
  }
  render_messages(conv, t, keep_reasoning, out);
  if (conv.messages.empty() || !conv.messages.back().prefix) {
    b.special(t.assistant);
    b.special(conv.thinking ? t.think_start : t.think_end);
  }
  if ((conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed) && tools_shown) {
    b.plain("\n\n<");
    b.special(t.dsml);
    b.plain("tool_calls>\n");
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
