// DeepSeek-V4 prompt rendering (deepseek-recipe DeepseekV4Encoding): BOS, reasoning-effort preamble, system +
// tools + response format, <｜User｜> / <｜latest_reminder｜> / <｜Assistant｜> turns, <think> / </think>,
// DSML tool calls, <tool_result> blocks, EOS. Template control tokens become explicit special tokens; all
// message text, tool schemas and call arguments are plain text (no control-token injection).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "chat/chat_json.h"
#include "chat/chat_types.h"
#include "io/config.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::chat {

// Which chat encoding a model speaks; chosen from the model config only (chat_family), never per request.
enum class ChatFamily { kV4, kV41 };

// Spellings of the template tokens (looked up in the tokenizer by spelling, never by id) and the DSML tag names
// after the DSML token (V4: "tool_calls" / "invoke" / "parameter"; V4.1 the same with a leading space, " calls").
struct V4Tokens {
  ChatFamily family = ChatFamily::kV4;
  std::string bos = "<｜begin▁of▁sentence｜>";
  std::string eos = "<｜end▁of▁sentence｜>";
  std::string user = "<｜User｜>";
  std::string assistant = "<｜Assistant｜>";
  std::string latest_reminder = "<｜latest_reminder｜>";
  std::string think_start = "<think>";
  std::string think_end = "</think>";
  std::string dsml = "｜DSML｜";
  std::string system = "<｜System｜>";  // V4.1 only
  std::string calls_tag = "tool_calls";
  std::string invoke_tag = "invoke";
  std::string param_tag = "parameter";
  JsonNumbers numbers = JsonNumbers::kSerde;  // how tool schemas, call arguments and response schemas print numbers
};

V4Tokens tokens_for(ChatFamily f);
inline ChatFamily chat_family(const io::ModelConfig& mc) { return mc.is_v41() ? ChatFamily::kV41 : ChatFamily::kV4; }

struct RenderedPrompt {
  std::string prompt;
  std::vector<std::pair<size_t, size_t>> special_ranges;  // byte ranges of `prompt` holding one special token
};

RenderedPrompt render_v4_prompt(const Conversation& conv, const V4Tokens& tokens = {});
// DeepSeek-V4.1 (chat_encoding_v41.cpp): <｜System｜>, numeric reasoning effort, system messages in place,
// " calls" DSML tags, tool results merged into user turns in call order.
RenderedPrompt render_v41_prompt(const Conversation& conv, const V4Tokens& tokens = tokens_for(ChatFamily::kV41));
// The prompt of `conv` in the family's encoding (the one place that dispatches on it).
RenderedPrompt render_prompt(const Conversation& conv, ChatFamily family);

// The tools section of the system prompt ("## Tools ... tool calls.\n"), as both families render it.
void append_tools_prompt(const std::vector<ToolDefinition>& tools, const V4Tokens& t, RenderedPrompt& out);

// Token ids of a rendered prompt: special ranges by token_to_id (error if the tokenizer lacks one), the text
// between them in EncodeMode::kPlainText.
Result<std::vector<int32_t>> encode_prompt(const RenderedPrompt& p, const tokenizer::Tokenizer& tok);

// The DSML block of one assistant message's tool calls (without the leading "\n\n"), as plain/special
// segments appended to `out`. Shared with tests that round-trip the output parser.
void append_dsml_tool_calls(const std::vector<ToolCall>& calls, const V4Tokens& t, RenderedPrompt& out);

}  // namespace dsinfer::chat
