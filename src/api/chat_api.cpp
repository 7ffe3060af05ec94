// include/dsinfer/chat.h on top of src/chat (render_v4_prompt, encode_prompt, OutputParser) and the tokenizer.
#include "dsinfer/chat.h"

#include "chat/chat_encoding.h"
#include "chat/output_parser.h"
#include "chat/parser_options.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {
namespace {

bool chat_conversation(const Request& r, std::string* error) {
  if (r.endpoint == Endpoint::kChatCompletions && r.conversation) return true;
  if (error) *error = "not a chat request (a /v1/chat/completions body with 'messages' is needed)";
  return false;
}

void collect(const chat::ParseDelta& d, ChatOutput& out) {
  out.reasoning_content += d.reasoning;
  out.content += d.content;
  for (const chat::ParsedToolCall& c : d.tool_calls) out.tool_calls.push_back({c.id, c.name, c.arguments});
}

}  // namespace

bool render_chat_text(const Request& request, ChatPrompt* out, std::string* error) {
  if (!chat_conversation(request, error)) return false;
  chat::RenderedPrompt p = chat::render_v4_prompt(*request.conversation);
  out->text = std::move(p.prompt);
  out->special_ranges = std::move(p.special_ranges);
  out->token_ids.clear();
  return true;
}

ChatOutput parse_chat_output(const Request& request, const std::vector<std::string>& pieces) {
  ChatOutput out;
  if (!chat_conversation(request, &out.error)) return out;
  chat::OutputParser parser(chat::parser_options_for(*request.conversation));
  for (const std::string& p : pieces) collect(parser.push(p), out);
  chat::ParseDelta last;
  Status s = parser.finish(last);
  collect(last, out);
  if (!s) out.error = s.message();
  return out;
}

struct ChatTemplate::Impl {
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::load(const std::string& tokenizer_json, std::string* error) {
  auto tok = tokenizer::Tokenizer::from_file(tokenizer_json);
  if (!tok) {
    if (error) *error = tok.status().message();
    return nullptr;
  }
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->impl_->tok = std::move(tok).value();
  return t;
}

bool ChatTemplate::render(const Request& request, ChatPrompt* out, std::string* error) const {
  if (!chat_conversation(request, error)) return false;
  chat::RenderedPrompt p = chat::render_v4_prompt(*request.conversation);
  auto ids = chat::encode_prompt(p, *impl_->tok);
  if (!ids) {
    if (error) *error = ids.status().message();
    return false;
  }
  out->text = std::move(p.prompt);
  out->special_ranges = std::move(p.special_ranges);
  out->token_ids = std::move(ids).value();
  return true;
}

bool ChatTemplate::parse_output_ids(const Request& request, const std::vector<int32_t>& ids, ChatOutput* out,
                                    std::string* error) const {
  if (!chat_conversation(request, error)) return false;
  *out = ChatOutput();
  const int64_t vocab = int64_t(impl_->tok->vocab_size());
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab) {
      if (error) *error = fmt::format("output token id [{}] = {} is outside the vocabulary (0..{})", i, ids[i], vocab - 1);
      return false;
    }
  chat::OutputParser parser(chat::parser_options_for(*request.conversation));
  tokenizer::StreamDecoder dec(*impl_->tok, /*skip_special_tokens=*/true);
  for (int32_t id : ids) {
    std::string delta;
    if (Status s = dec.push(id, delta); !s) {
      if (error) *error = s.message();
      return false;
    }
    collect(parser.push(delta), *out);
  }
  std::string tail;
  dec.finish(tail);
  chat::ParseDelta last = parser.push(tail);
  Status s = parser.finish(last);
  collect(last, *out);
  if (!s) out->error = s.message();
  return true;
}

}  // namespace dsinfer
