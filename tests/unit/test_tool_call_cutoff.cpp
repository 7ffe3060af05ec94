// Issue 36: a strict tool call cut off by max_tokens, on the shipped model through `dsinfer generate` and `dsinfer
// serve` (streaming and not). Before the fix the answer was `tool_calls: []` with the raw DSML markup in content;
// now it is finish_reason "length", no markup anywhere in content, and the call (once its name is complete) with
// valid JSON arguments holding what was parsed, plus a parse_error saying the call was cut short.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_test_util.h"
#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "test_server_util.h"

namespace dsinfer::test {
namespace {

using json = nlohmann::json;

const std::string kModel = source_dir() + "/models/dsv4-small";

// A strict tool forced by tool_choice "required": the output starts inside the tool_calls block.
json body(int max_tokens, bool stream) {
  json b = json::parse(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
      "required": ["city", "unit"], "additionalProperties": false}}}],
    "tool_choice": "required", "thinking": {"type": "disabled"}, "temperature": 0})");
  b["max_tokens"] = max_tokens;
  if (stream) b["stream"] = true;
  return b;
}

// The checks every cut-off answer must pass; returns the number of tool calls.
size_t check_choice(const json& ch, int max_tokens) {
  EXPECT_EQ(ch["finish_reason"], "length") << ch.dump();
  const json& m = ch["message"];
  const std::string content = m["content"].is_string() ? m["content"].get<std::string>() : "";
  EXPECT_EQ(content.find("DSML"), std::string::npos) << max_tokens << ": " << content;
  EXPECT_EQ(content.find("<｜"), std::string::npos) << max_tokens << ": " << content;
  EXPECT_TRUE(ch.contains("parse_error")) << ch.dump();
  if (!m.contains("tool_calls")) return 0;
  for (const json& c : m["tool_calls"]) {
    EXPECT_EQ(c["function"]["name"], "get_weather");
    const json args = json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(args.is_object()) << c.dump();
  }
  return m["tool_calls"].size();
}

const std::vector<int> kMaxTokens = {12, 30, 60};

TEST(ToolCallCutoff, GenerateReportsTheCutCallNotTheMarkup) {
  ScratchDir d("cutoff_generate");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  {
    std::ofstream f(in);
    for (int n : kMaxTokens)
      f << json{{"custom_id", std::to_string(n)}, {"url", "/v1/chat/completions"}, {"body", body(n, false)}}.dump()
        << "\n";
  }
  const CliResult r = run_cli(d, "generate --model " + kModel + " --input " + in + " --output " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  size_t calls = 0;
  for (const json& rec : read_jsonl(out))
    calls += check_choice(rec["response"]["body"]["choices"][0], std::stoi(rec["custom_id"].get<std::string>()));
  EXPECT_GE(calls, 1u) << "no answer got as far as the call's name: raise the max_tokens values";
}

TEST(ToolCallCutoff, ServeStreamingAndNotAgree) {
  EngineOptions o;
  o.model_dir = kModel;
  o.max_model_len = 1024;
  std::string err;
  auto e = Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  server::ServerOptions so;
  so.port = 0;
  server::Server s(std::move(e), so);
  ASSERT_TRUE(s.start(&err)) << err;
  size_t calls = 0;
  for (int n : kMaxTokens) {
    const HttpResponse plain = request(s.port(), "POST", "/v1/chat/completions", body(n, false).dump());
    ASSERT_EQ(plain.status, 200) << plain.body;
    const json ch = json::parse(plain.body)["choices"][0];
    calls += check_choice(ch, n);
    const HttpResponse streamed = request(s.port(), "POST", "/v1/chat/completions", body(n, true).dump());
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const json folded = fold_stream(sse_data(streamed.body), true)["choices"][0];
    check_choice(folded, n);
    EXPECT_EQ(folded["message"].value("tool_calls", json::array()).size(),
              ch["message"].value("tool_calls", json::array()).size());
    for (size_t k = 0; k < ch["message"].value("tool_calls", json::array()).size(); ++k)
      EXPECT_EQ(folded["message"]["tool_calls"][k]["function"], ch["message"]["tool_calls"][k]["function"]) << n;
    EXPECT_EQ(folded["message"]["content"], ch["message"]["content"]) << n;
  }
  EXPECT_GE(calls, 1u);
  s.stop();
}

}  // namespace
}  // namespace dsinfer::test
