// The DeepSeek-V4 chat template on its own (what `apply_chat_template` is elsewhere), for a chat Request parsed
// with parse_request(..., Endpoint::kChatCompletions, ...): the prompt text the engine feeds the model, its
// token ids, and the parsing of model output back into reasoning / content / tool calls. The engine runs
// exactly these steps for /v1/chat/completions, so a prompt rendered here is the prompt `generate` uses.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.h"
#include "dsinfer/request.h"

namespace dsinfer {

// The model's chat encoding; chat_encoding_of_model reads it from model_dir/config.json (model_type).
enum class ChatEncoding { kDeepSeekV4, kDeepSeekV41 };
bool chat_encoding_of_model(const std::string& model_dir, ChatEncoding* out, std::string* error);

// A model directory's chat defaults (model_dir/chat_defaults.json, e.g. {"thinking": {"type": "disabled"}}): the
// "thinking" / "reasoning_effort" a chat request gets when it sets neither (without the file: thinking on, effort
// high, as DeepSeek's API). The Engine applies them to every request it is given; this does the same for rendering
// on its own. False with *error for a bad file or a request the resulting mode rejects (tool_choice "required" or
// a named function in thinking mode).
bool apply_model_chat_defaults(const std::string& model_dir, Request* request, std::string* error);

struct ChatPrompt {
  std::string text;                                       // the rendered prompt
  std::vector<std::pair<size_t, size_t>> special_ranges;  // byte ranges of `text` that are one special token
  std::vector<int32_t> token_ids;                         // filled by ChatTemplate::render
};

struct ChatOutput {
  std::string reasoning_content, content;
  std::vector<ToolCallResult> tool_calls;  // ids "call_<index>"
  std::string error;                       // e.g. output ended inside a tool-call block; the rest is still filled
};

// Renders the prompt text and its special-token ranges (no tokenizer needed). False with *error for a request
// that is not a chat request.
bool render_chat_text(const Request& request, ChatPrompt* out, std::string* error,
                      ChatEncoding enc = ChatEncoding::kDeepSeekV4);

// Parses model output text (the text after the prompt) as the engine does for `request`, pushing `pieces` one
// after another as streamed chunks; {whole_text} for the whole output at once.
ChatOutput parse_chat_output(const Request& request, const std::vector<std::string>& pieces,
                             ChatEncoding enc = ChatEncoding::kDeepSeekV4);

class ChatTemplate {
 public:
  // tokenizer_json: a Hugging Face tokenizer.json holding the V4 template tokens. nullptr with *error on failure.
  static std::unique_ptr<ChatTemplate> load(const std::string& tokenizer_json, std::string* error,
                                            ChatEncoding enc = ChatEncoding::kDeepSeekV4);
  ~ChatTemplate();

  // Prompt text, special ranges and token ids (template tokens by spelling, all other text as plain text).
  bool render(const Request& request, ChatPrompt* out, std::string* error) const;
  // Output token ids, detokenized one token at a time (special tokens such as EOS skipped) and parsed as the
  // engine does. False with *error for an id outside the vocabulary.
  bool parse_output_ids(const Request& request, const std::vector<int32_t>& ids, ChatOutput* out, std::string* error) const;

 private:
  ChatTemplate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
