// Fuzz target: an OpenAI chat-completions body -> Request -> V4 prompt -> token ids (the shipped tokenizer);
// the same bytes are also fed to the chat output parser as model output, in two pieces.
#include <cstdint>
#include <string>

#include "chat/chat_encoding.h"
#include "chat/chat_types.h"
#include "chat/output_parser.h"
#include "dsinfer/request.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Request r;
  std::string err;
  if (parse_request(text, Endpoint::kChatCompletions, &r, &err) && r.conversation) {
    const chat::RenderedPrompt p = chat::render_v4_prompt(*r.conversation);
    (void)chat::encode_prompt(p, fuzz::shipped_tokenizer());
  }
  for (bool thinking : {false, true}) {
    chat::ParserOptions po;
    po.thinking = thinking;
    po.starts_in_tool_calls = size % 2;
    chat::OutputParser parser(po);
    chat::ParseDelta d = parser.push(text.substr(0, size / 2));
    chat::ParseDelta d2 = parser.push(text.substr(size / 2));
    (void)parser.finish(d2);
  }
  return 0;
}
