// DeepSeek-V4.1 prompt layout (the V4.1 release encoder, as SGLang's encoding_dsv41.py ports it): every system
// message in place behind <｜System｜> (one at index 0 also hosts the reasoning effort and the tools), a mid-
// conversation system message opens the assistant turn like a user message, consecutive user messages and tool
// results form one user turn (<tool_result> blocks in call order), tool calls in the " calls" DSML form.
#include <algorithm>

#include "chat/chat_encoding.h"
#include "chat/chat_json.h"

namespace dsinfer::chat {
namespace {

constexpr const char* kJsonObjectFormat = R"({"type": "json_object"})";
constexpr const char* kJsonSchema = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

enum class Kind { kSystem, kUser, kAssistant, kReminder };

struct Block {
  bool tool = false;
  size_t order = 0;  // the answered call's index in the latest assistant message with tool calls
  std::string text;
};

struct Unit {
  Kind kind = Kind::kUser;
  std::vector<Block> blocks;         // user: text and tool-result blocks, joined by "\n\n"
  std::string text;                  // system / latest_reminder content
  const ChatMessage* msg = nullptr;  // assistant
  bool hosts_tools = false;          // the system message at index 0 carries tools / response format
};

Unit unit(Kind k, std::string text = {}) {
  Unit x;
  x.kind = k;
  x.text = std::move(text);
  return x;
}

std::vector<Unit> build_units(const Conversation& conv) {
  std::vector<Unit> u;
  std::vector<std::string> last_calls;
  size_t s = 0;
  auto systems_before = [&](size_t i) {
    for (; s < conv.system_messages.size() && conv.system_messages[s].before <= i; ++s)
      u.push_back(unit(Kind::kSystem, conv.system_messages[s].content));
  };
  for (size_t i = 0; i < conv.messages.size(); ++i) {
    systems_before(i);
    const ChatMessage& m = conv.messages[i];
    const bool user_open = !u.empty() && u.back().kind == Kind::kUser;
    if (m.role == Role::kUser || m.role == Role::kTool) {
      if (!user_open) u.push_back(unit(Kind::kUser));
      Block b{m.role == Role::kTool, 0, m.role == Role::kTool ? "<tool_result>" + m.content + "</tool_result>" : m.content};
      if (b.tool) b.order = size_t(std::find(last_calls.begin(), last_calls.end(), m.tool_call_id) - last_calls.begin());
      u.back().blocks.push_back(std::move(b));
    } else if (m.role == Role::kAssistant) {
      if (!m.tool_calls.empty()) {
        last_calls.clear();
        for (const ToolCall& c : m.tool_calls) last_calls.push_back(c.id);
      }
      Unit a = unit(Kind::kAssistant);
      a.msg = &m;
      u.push_back(std::move(a));
    } else if (m.role == Role::kLatestReminder) {
      u.push_back(unit(Kind::kReminder, m.content));
    }
  }
  systems_before(conv.messages.size());
  // Tool results in call order, text blocks where they were.
  for (Unit& x : u) {
    std::vector<Block> tools;
    for (const Block& b : x.blocks) if (b.tool) tools.push_back(b);
    std::stable_sort(tools.begin(), tools.end(), [](const Block& a, const Block& b) { return a.order < b.order; });
    size_t k = 0;
    for (Block& b : x.blocks) if (b.tool) b = tools[k++];
  }
  return u;
}

struct Out {
  RenderedPrompt& r;
  void plain(std::string_view s) { r.prompt += s; }
  void special(std::string_view s) {
    r.special_ranges.emplace_back(r.prompt.size(), r.prompt.size() + s.size());
    r.prompt += s;
  }
};

void render_system(const Conversation& conv, const Unit& x, size_t idx, const V4Tokens& t, RenderedPrompt& r) {
  Out o{r};
  if (idx > 0) o.special(t.system);
  o.plain(x.text);
  if (!x.hosts_tools) return;
  if (!conv.tools.empty() && conv.tool_choice != ToolChoice::kNone) {
    o.plain("\n\n");
    append_tools_prompt(conv.tools, t, r);
  }
  // The release encoder has one response-format text: the schema it is given; for json_object that is the
  // response_format object itself (deepseek-recipe's V4.1 encoding passes {"type": "json_object"}).
  if (conv.response_format == ResponseFormat::kJsonObject)
    o.plain("\n\n" + std::string(kJsonSchema) + kJsonObjectFormat);
  if (conv.response_format == ResponseFormat::kJsonSchema)
    o.plain("\n\n" + std::string(kJsonSchema) + dump_python_style(conv.response_schema, t.numbers));
}

void render_assistant(const ChatMessage& m, bool show_reasoning, bool last, const V4Tokens& t, RenderedPrompt& r) {
  Out o{r};
  const bool continues_reasoning = m.prefix && last && m.content.empty() && m.tool_calls.empty();
  if (show_reasoning) {
    o.plain(m.reasoning);
    if (!continues_reasoning) o.special(t.think_end);
  }
  o.plain(m.content);
  if (!m.tool_calls.empty()) {
    o.plain("\n\n");
    append_dsml_tool_calls(m.tool_calls, t, r);  // in call order (V4 sorts by id)
  }
  if (!(m.prefix && last)) o.special(t.eos);
}

}  // namespace

RenderedPrompt render_v41_prompt(const Conversation& conv, const V4Tokens& t) {
  RenderedPrompt r;
  Out o{r};
  std::vector<Unit> u = build_units(conv);
  const bool tools_shown = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  const bool format_shown = conv.response_format == ResponseFormat::kJsonObject || conv.response_format == ResponseFormat::kJsonSchema;
  if (tools_shown || format_shown) {
    if (u.empty() || u[0].kind != Kind::kSystem) u.insert(u.begin(), unit(Kind::kSystem));
    u[0].hosts_tools = true;
  }
  // Earlier reasoning is dropped (and those turns get "</think>") unless tools are shown.
  const bool drop = !tools_shown;
  size_t last_user = SIZE_MAX;
  for (size_t i = u.size(); i-- > 0 && last_user == SIZE_MAX;)
    if (u[i].kind == Kind::kUser || (u[i].kind == Kind::kSystem && i > 0)) last_user = i;
  const bool has_user = last_user != SIZE_MAX;
  o.special(t.bos);
  for (size_t i = 0; i < u.size(); ++i) {
    const Unit& x = u[i];
    if (i == 0 && (conv.thinking || x.kind == Kind::kSystem)) o.special(t.system);
    if (i == 0 && conv.thinking)
      o.plain(fmt::format("Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                          conv.effort_budget));
    if (x.kind == Kind::kSystem) {
      render_system(conv, x, i, t, r);
    } else if (x.kind == Kind::kUser) {
      o.special(t.user);
      for (size_t k = 0; k < x.blocks.size(); ++k) o.plain((k ? "\n\n" : "") + x.blocks[k].text);
    } else if (x.kind == Kind::kReminder) {
      o.special(t.latest_reminder);
      o.plain(x.text);
    } else {
      const bool show = conv.thinking && (!drop || !has_user || i > last_user);
      render_assistant(*x.msg, show, i + 1 == u.size(), t, r);
    }
    if (i + 1 < u.size() && u[i + 1].kind != Kind::kAssistant && u[i + 1].kind != Kind::kReminder) continue;
    if (x.kind == Kind::kUser || (x.kind == Kind::kSystem && i > 0)) {
      o.special(t.assistant);
      o.special(conv.thinking && (!drop || i >= last_user) ? t.think_start : t.think_end);
    }
  }
  if ((conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed) && tools_shown) {
    o.plain("\n\n<");
    o.special(t.dsml);
    o.plain(t.calls_tag + ">\n");
  }
  return r;
}

}  // namespace dsinfer::chat
