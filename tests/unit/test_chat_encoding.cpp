// Parity of the DeepSeek-V4 chat encoding with deepseek-recipe 0.2.0: byte-identical prompts, identical special
// ranges and token ids for every conversation in tests/data/tokenizer/chat_goldens.jsonl; rejected requests are
// rejected here too, with a message.
#include <gtest/gtest.h>

#include "chat/chat_encoding.h"
#include "chat/chat_request.h"
#include "tests/unit/tokenizer_test_util.h"

namespace dsinfer::chat {
namespace {

std::vector<ojson> chat_goldens() {
  std::vector<ojson> out;
  for (const auto& l : tokenizer::testing::read_lines(tokenizer::testing::source_dir() + "/tests/data/tokenizer/chat_goldens.jsonl"))
    out.push_back(ojson::parse(l));
  return out;
}

TEST(ChatEncoding, PromptsMatchDeepseekRecipe) {
  auto goldens = chat_goldens();
  ASSERT_GE(goldens.size(), 50u);
  size_t rendered = 0, equal = 0, rejected = 0;
  for (const ojson& g : goldens) {
    const std::string name = g["name"];
    auto conv = parse_chat_request(g["request"]);
    if (g.contains("error")) {
      ++rejected;
      EXPECT_FALSE(conv.is_ok()) << name << ": deepseek-recipe rejects it (" << g["error"] << ") but we accept it";
      if (!conv.is_ok()) {
        EXPECT_FALSE(conv.status().message().empty());
      }
      continue;
    }
    ++rendered;
    ASSERT_TRUE(conv.is_ok()) << name << ": " << conv.status().message();
    RenderedPrompt p = render_v4_prompt(*conv);
    std::vector<std::pair<size_t, size_t>> want_special;
    for (const auto& r : g["special"]) want_special.emplace_back(r[0].get<size_t>(), r[1].get<size_t>());
    bool ok = p.prompt == g["prompt"].get<std::string>() && p.special_ranges == want_special;
    EXPECT_EQ(p.prompt, g["prompt"].get<std::string>()) << name;
    EXPECT_EQ(p.special_ranges, want_special) << name;
    if (ok) ++equal;
  }
  std::printf("[chat parity] %zu / %zu prompts byte-identical (+ special ranges); %zu malformed requests rejected\n",
              equal, rendered, rejected);
  EXPECT_EQ(equal, rendered);
}

TEST(ChatEncoding, TokenIdsMatchDeepseekRecipe) {
  std::string why;
  const tokenizer::Tokenizer* tok = tokenizer::testing::load_v4(&why);
  ASSERT_NE(tok, nullptr) << why;
  size_t n = 0, equal = 0;
  for (const ojson& g : chat_goldens()) {
    if (g.contains("error")) continue;
    auto conv = parse_chat_request(g["request"]);
    ASSERT_TRUE(conv.is_ok()) << conv.status().message();
    auto ids = encode_prompt(render_v4_prompt(*conv), *tok);
    ASSERT_TRUE(ids.is_ok()) << ids.status().message();
    ++n;
    if (*ids == g["ids"].get<std::vector<int32_t>>()) ++equal;
    else ADD_FAILURE() << g["name"] << ": token ids differ";
  }
  std::printf("[chat parity] %zu / %zu token-id sequences identical\n", equal, n);
  EXPECT_EQ(equal, n);
  EXPECT_GE(n, 50u);
}

TEST(ChatEncoding, MalformedRequestsNameTheProblem) {
  struct Case { const char* body; const char* needle; };
  const Case cases[] = {
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "unknown role \"wizard\""},
      {R"({"messages": []})", "empty"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
       "messages[1].tool_calls[0]: missing string \"id\""},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}, {"role": "tool", "tool_call_id": "a", "content": "r"}]})",
       "arguments is not valid JSON"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}, {"role": "tool", "tool_call_id": "a", "content": "r"}]})",
       "not an object"},
      {R"({"messages": [{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]})", "content[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"})", "reasoning_effort"},
      {R"({"messages": [{"role": "assistant", "content": "a", "prefix": true}, {"role": "user", "content": "x"}]})", "prefix"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [{"type": "function", "function": {"name": "f"}}], "thinking": {"type": "disabled"}})", "nope"},
  };
  for (const auto& c : cases) {
    auto r = parse_chat_request_text(c.body);
    ASSERT_FALSE(r.is_ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(parse_chat_request_text("{oops").is_ok());
}

}  // namespace
}  // namespace dsinfer::chat
