// DeepSeek-V4 prompt rendering (deepseek-recipe DeepseekV4Encoding): BOS, reasoning-effort preamble, system +
// tools + response format, <｜User｜> / <｜latest_reminder｜> / <｜Assistant｜> turns, <think> / </think>,
// DSML tool calls, <tool_result> blocks, EOS. Template control tokens become explicit special tokens; all
// message text, tool schemas and call arguments are plain text (no control-token injection).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "chat/chat_types.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::chat {

// Spellings of the V4 template tokens (looked up in the tokenizer by spelling, never by id).
struct V4Tokens {
  std::string bos = "<｜begin▁of▁sentence｜>";
  std::string eos = "<｜end▁of▁sentence｜>";
  std::string user = "<｜User｜>";
  std::string assistant = "<｜Assistant｜>";
  std::string latest_reminder = "<｜latest_reminder｜>";
  std::string think_start = "<think>";
  std::string think_end = "</think>";
  std::string dsml = "｜DSML｜";
};

struct RenderedPrompt {
  std::string prompt;
  std::vector<std::pair<size_t, size_t>> special_ranges;  // byte ranges of `prompt` holding one special token
};

RenderedPrompt render_v4_prompt(const Conversation& conv, const V4Tokens& tokens = {});

// Token ids of a rendered prompt: special ranges by token_to_id (error if the tokenizer lacks one), the text
// between them in EncodeMode::kPlainText.
Result<std::vector<int32_t>> encode_prompt(const RenderedPrompt& p, const tokenizer::Tokenizer& tok);

// The DSML block of one assistant message's tool calls (without the leading "\n\n"), as plain/special
// segments appended to `out`. Shared with tests that round-trip the output parser.
void append_dsml_tool_calls(const std::vector<ToolCall>& calls, const V4Tokens& t, RenderedPrompt& out);

}  // namespace dsinfer::chat
