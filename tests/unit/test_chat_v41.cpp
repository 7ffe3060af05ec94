// DeepSeek-V4.1 chat encoding against goldens from SGLang's port of the V4.1 release encoder (tests/data/chat_v41/,
// tools/chat/gen_v41_goldens.py), through the request path: parse_batch_line -> render_chat_text with the V4.1
// encoding; V4.1 DSML output parsing (whole and streamed one byte at a time); `dsinfer render-chat --model` on the
// tiny-v41-a fixture (the encoding chosen from its config.json).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

#include "dsinfer/batch.h"
#include "dsinfer/chat.h"
#include "tests/unit/test_util.h"
#include "tests/unit/tokenizer_test_util.h"
#include "tests/build_paths.h"

namespace dsinfer {
namespace {

using ojson = nlohmann::ordered_json;
namespace tt = tokenizer::testing;

std::string data(const std::string& f) { return tt::source_dir() + "/tests/data/chat_v41/" + f; }

TEST(ChatV41, RequestPathRendersTheSglangGoldens) {
  const auto lines = tt::read_lines(data("requests.jsonl"));
  const auto expected = tt::read_lines(data("expected.jsonl"));
  ASSERT_EQ(lines.size(), expected.size());
  ASSERT_GE(lines.size(), 20u);
  size_t differs_from_v4 = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const ojson want = ojson::parse(expected[i]);
    BatchLine bl;
    std::string error;
    ASSERT_TRUE(parse_batch_line(lines[i], i + 1, &bl, &error)) << want["custom_id"] << ": " << error;
    ChatPrompt p;
    ASSERT_TRUE(render_chat_text(bl.request, &p, &error, ChatEncoding::kDeepSeekV41)) << error;
    EXPECT_EQ(p.text, want["prompt"].get<std::string>()) << want["custom_id"];
    for (const auto& [b, e] : p.special_ranges) ASSERT_TRUE(b < e && e <= p.text.size()) << want["custom_id"];
    ChatPrompt v4;  // the V4 encoding: the same only for plain chat-mode turns without a system message
    ASSERT_TRUE(render_chat_text(bl.request, &v4, &error));
    differs_from_v4 += v4.text != p.text;
  }
  EXPECT_GE(differs_from_v4, lines.size() - 4);
}

TEST(ChatV41, NumericReasoningEffortIsValidated) {
  for (const char* e : {"0", "101", "1.5", "-3", "true", "\"50\""}) {
    Request req;
    std::string error;
    const std::string body = std::string(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":)") + e + "}";
    EXPECT_FALSE(parse_request(body, Endpoint::kChatCompletions, &req, &error)) << e;
    EXPECT_NE(error.find("reasoning_effort"), std::string::npos) << e << ": " << error;
  }
  Request req;
  std::string error;
  ASSERT_TRUE(parse_request(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":7})", Endpoint::kChatCompletions, &req, &error)) << error;
  ChatPrompt p;
  ASSERT_TRUE(render_chat_text(req, &p, &error, ChatEncoding::kDeepSeekV41));
  EXPECT_NE(p.text.find("Reasoning Effort: 7 (range 1-100"), std::string::npos) << p.text;
}

void expect_message(const ChatOutput& o, const ojson& want, const std::string& name) {
  EXPECT_TRUE(o.error.empty()) << name << ": " << o.error;
  EXPECT_EQ(o.reasoning_content, want["reasoning_content"].get<std::string>()) << name;
  EXPECT_EQ(o.content, want["content"].get<std::string>()) << name;
  ASSERT_EQ(o.tool_calls.size(), want["tool_calls"].size()) << name;
  for (size_t k = 0; k < o.tool_calls.size(); ++k) {
    const ojson& f = want["tool_calls"][k]["function"];
    EXPECT_EQ(o.tool_calls[k].name, f["name"].get<std::string>()) << name;
    EXPECT_EQ(ojson::parse(o.tool_calls[k].arguments), ojson::parse(f["arguments"].get<std::string>())) << name;
  }
}

TEST(ChatV41, ParsesV41ToolCallsWholeAndStreamed) {
  const auto lines = tt::read_lines(data("outputs.jsonl"));
  const auto expected = tt::read_lines(data("outputs_expected.jsonl"));
  ASSERT_EQ(lines.size(), expected.size());
  size_t with_calls = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const ojson j = ojson::parse(lines[i]);
    const ojson want = ojson::parse(expected[i])["message"];
    const std::string name = j["custom_id"];
    Request req;
    std::string error;
    ASSERT_TRUE(parse_request(j["body"].dump(), Endpoint::kChatCompletions, &req, &error)) << error;
    std::string text = j["output"];
    const std::string eos = "<｜end▁of▁sentence｜>";  // the engine stops on EOS; it never reaches the parser
    if (text.size() >= eos.size() && text.compare(text.size() - eos.size(), eos.size(), eos) == 0) text.resize(text.size() - eos.size());
    expect_message(parse_chat_output(req, {text}, ChatEncoding::kDeepSeekV41), want, name);
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    expect_message(parse_chat_output(req, bytes, ChatEncoding::kDeepSeekV41), want, name + " (streamed)");
    with_calls += !want["tool_calls"].empty();
    if (!want["tool_calls"].empty()) {  // the V4 parser does not take V4.1 tags for tool calls
      EXPECT_TRUE(parse_chat_output(req, {text}).tool_calls.empty()) << name;
    }
  }
  EXPECT_GE(with_calls, 2u);
}

TEST(ChatV41, RenderChatCliPicksTheEncodingFromTheModelConfig) {
  const std::string model = dsinfer::test::own_fixture("tiny-v41-a");
  const std::string bin = DSINFER_BINARY;
  const std::string out = ::testing::TempDir() + "/v41_render.jsonl";
  const std::string cmd = bin + " render-chat --model " + model + " --input " + data("requests.jsonl") + " --output " + out + " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  const auto got = tt::read_lines(out);
  const auto expected = tt::read_lines(data("expected.jsonl"));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(ojson::parse(got[i])["prompt"], ojson::parse(expected[i])["prompt"]) << i;
}

}  // namespace
}  // namespace dsinfer
