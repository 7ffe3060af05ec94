// include/dsinfer/chat.h on top of src/chat (render_v4_prompt, encode_prompt, OutputParser) and the tokenizer.
#include "dsinfer/chat.h"

#include "chat/chat_defaults.h"
#include "chat/chat_encoding.h"
#include "chat/chat_options.h"
#include "chat/output_parser.h"
#include "chat/parser_options.h"
#include "io/config.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {
namespace {

bool chat_conversation(const Request& r, std::string* error) {
  if (!(r.endpoint == Endpoint::kChatCompletions && r.conversation)) {
    if (error) *error = "not a chat request (a /v1/chat/completions body with 'messages' is needed)";
    return false;
  }
  // Model-independent rendering: thinking as parsed (DeepSeek's API default where the request left it open, unless
  // apply_model_chat_defaults ran), under the API's tool_choice rule.
  if (Status s = chat::check_thinking_tool_choice(*r.conversation); !s) {
    if (error) *error = s.message();
    return false;
  }
  return true;
}

void collect(const chat::ParseDelta& d, ChatOutput& out) {
  out.reasoning_content += d.reasoning;
  out.content += d.content;
  for (const chat::ParsedToolCall& c : d.tool_calls) out.tool_calls.push_back({c.id, c.name, c.arguments});
}

chat::ChatFamily family(ChatEncoding e) { return e == ChatEncoding::kDeepSeekV41 ? chat::ChatFamily::kV41 : chat::ChatFamily::kV4; }

}  // namespace

bool chat_encoding_of_model(const std::string& model_dir, ChatEncoding* out, std::string* error) {
  auto mc = io::load_model_config(model_dir);
  if (!mc) {
    if (error) *error = mc.status().message();
    return false;
  }
  *out = chat::chat_family(*mc) == chat::ChatFamily::kV41 ? ChatEncoding::kDeepSeekV41 : ChatEncoding::kDeepSeekV4;
  return true;
}

bool apply_model_chat_defaults(const std::string& model_dir, Request* request, std::string* error) {
  if (!request->conversation) return true;
  auto d = chat::load_chat_defaults(model_dir);
  Status s = d.status();
  chat::Conversation conv = *request->conversation;
  if (s) s = chat::apply_chat_defaults(*d, conv);
  if (!s) {
    if (error) *error = s.message();
    return false;
  }
  request->conversation = std::make_shared<const chat::Conversation>(std::move(conv));
  return true;
}

bool render_chat_text(const Request& request, ChatPrompt* out, std::string* error, ChatEncoding enc) {
  if (!chat_conversation(request, error)) return false;
  chat::RenderedPrompt p = chat::render_prompt(*request.conversation, family(enc));
  out->text = std::move(p.prompt);
  out->special_ranges = std::move(p.special_ranges);
  out->token_ids.clear();
  return true;
}

ChatOutput parse_chat_output(const Request& request, const std::vector<std::string>& pieces, ChatEncoding enc) {
  ChatOutput out;
  if (!chat_conversation(request, &out.error)) return out;
  chat::OutputParser parser(chat::parser_options_for(*request.conversation, family(enc)));
  for (const std::string& p : pieces) collect(parser.push(p), out);
  chat::ParseDelta last;
  Status s = parser.finish(last);
  collect(last, out);
  if (!s) out.error = s.message();
  return out;
}

struct ChatTemplate::Impl {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  chat::ChatFamily family = chat::ChatFamily::kV4;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::load(const std::string& tokenizer_json, std::string* error, ChatEncoding enc) {
  auto tok = tokenizer::Tokenizer::from_file(tokenizer_json);
  if (!tok) {
    if (error) *error = tok.status().message();
    return nullptr;
  }
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->impl_->tok = std::move(tok).value();
  t->impl_->family = family(enc);
  return t;
}

bool ChatTemplate::render(const Request& request, ChatPrompt* out, std::string* error) const {
  if (!chat_conversation(request, error)) return false;
  chat::RenderedPrompt p = chat::render_prompt(*request.conversation, impl_->family);
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
  chat::OutputParser parser(chat::parser_options_for(*request.conversation, impl_->family));
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
