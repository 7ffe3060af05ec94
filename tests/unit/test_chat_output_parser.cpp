// Output parsing: reasoning / content / DSML tool calls agree with deepseek-recipe's StreamProcessor on the
// outputs in chat_outputs.jsonl for any chunking, and rendering then parsing tool calls round-trips.
#include <gtest/gtest.h>

#include <set>

#include "chat/chat_request.h"
#include "chat/output_parser.h"
#include "tests/unit/tokenizer_test_util.h"

namespace dsinfer::chat {
namespace {

struct Parsed {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const Parsed&) const = default;
};

ParserOptions options(bool thinking, bool starts_in_tool_calls) {
  ParserOptions o;
  o.thinking = thinking;
  o.starts_in_tool_calls = starts_in_tool_calls;
  return o;
}

Parsed run(const std::string& text, bool thinking, size_t chunk, Status* st = nullptr) {
  OutputParser p(options(thinking, false));
  Parsed out;
  auto take = [&](const ParseDelta& d) {
    out.content += d.content;
    out.reasoning += d.reasoning;
    for (const auto& c : d.tool_calls) out.calls.emplace_back(c.name, c.arguments);
  };
  for (size_t i = 0; i < text.size(); i += chunk) take(p.push(std::string_view(text).substr(i, chunk)));
  ParseDelta last;
  Status s = p.finish(last);
  take(last);
  if (st) *st = s;
  EXPECT_EQ(out.content, p.content());
  EXPECT_EQ(out.reasoning, p.reasoning());
  return out;
}

TEST(ChatOutputParser, MatchesDeepseekRecipeForAnyChunking) {
  // Deliberate divergences (docs/decisions.md): deepseek-recipe drops a stray "</think>" and an unfinished
  // "<｜DSML｜" from content, and pastes a non-JSON string="false" value into arguments unquoted (invalid JSON).
  const std::set<std::string> divergent = {"markers_as_text", "tool_call_non_json_false"};
  size_t n = 0, equal = 0;
  for (const auto& line : tokenizer::testing::read_lines(tokenizer::testing::source_dir() + "/tests/data/tokenizer/chat_outputs.jsonl")) {
    auto j = ojson::parse(line);
    const std::string name = j["name"];
    Parsed want{j["expected"]["content"], j["expected"]["reasoning_content"], {}};
    for (const auto& c : j["expected"]["tool_calls"]) want.calls.emplace_back(c["name"], c["arguments"]);
    for (size_t chunk : {size_t(1), size_t(3), size_t(7), size_t(1) << 20}) {
      Parsed got = run(j["output"], j["thinking"], chunk);
      if (divergent.count(name)) continue;
      ++n;
      if (got == want) ++equal;
      else ADD_FAILURE() << name << " chunk " << chunk << ": content " << ojson(got.content).dump() << " reasoning "
                         << ojson(got.reasoning).dump() << " calls " << got.calls.size();
    }
  }
  std::printf("[output parity] %zu / %zu (output, chunking) pairs equal to deepseek-recipe\n", equal, n);
  EXPECT_EQ(equal, n);
  EXPECT_GE(n, 30u);
}

TEST(ChatOutputParser, DivergentCasesAreValidJson) {
  std::string d = "｜DSML｜";
  Parsed p = run("<" + d + "tool_calls>\n<" + d + "invoke name=\"f\">\n<" + d +
                 "parameter name=\"q\" string=\"false\">not json</" + d + "parameter>\n</" + d + "invoke>\n</" + d +
                 "tool_calls>", false, 5);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].second, R"({"q": "not json"})");
  EXPECT_FALSE(ojson::parse(p.calls[0].second, nullptr, false).is_discarded());
}

TEST(ChatOutputParser, RenderThenParseRoundTrips) {
  size_t calls = 0;
  for (const auto& line : tokenizer::testing::read_lines(tokenizer::testing::source_dir() + "/tests/data/tokenizer/chat_goldens.jsonl")) {
    auto g = ojson::parse(line);
    if (g.contains("error")) continue;
    auto conv = parse_chat_request(g["request"]);
    ASSERT_TRUE(conv.is_ok());
    for (const ChatMessage& m : conv->messages) {
      if (m.role != Role::kAssistant) continue;
      // Reasoning that itself spells </think> (the injection conversation) is ambiguous by construction.
      if (m.reasoning.find("</think>") != std::string::npos) continue;
      // The assistant turn as the model would write it (thinking mode): reasoning</think>content\n\nDSML.
      RenderedPrompt r;
      r.prompt = m.reasoning + "</think>" + m.content;
      if (!m.tool_calls.empty()) {
        r.prompt += "\n\n";
        append_dsml_tool_calls(m.tool_calls, V4Tokens{}, r);
      }
      for (size_t chunk : {size_t(2), size_t(1) << 20}) {
        Status st;
        Parsed p = run(r.prompt, true, chunk, &st);
        ASSERT_TRUE(st.is_ok()) << st.message();
        std::string want_content = m.content;
        while (!want_content.empty() && want_content.front() == '\n') want_content.erase(0, 1);
        if (!m.tool_calls.empty())
          while (!want_content.empty() && want_content.back() == '\n') want_content.pop_back();
        EXPECT_EQ(p.content, want_content);
        ASSERT_EQ(p.calls.size(), m.tool_calls.size());
        for (size_t k = 0; k < p.calls.size(); ++k) {
          EXPECT_EQ(p.calls[k].first, m.tool_calls[k].name);
          EXPECT_EQ(ojson::parse(p.calls[k].second), m.tool_calls[k].arguments);
          ++calls;
        }
      }
    }
  }
  EXPECT_GT(calls, 10u);
}

TEST(ChatOutputParser, UnterminatedToolCallsIsAnError) {
  Status st;
  Parsed p = run("ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">", false, 4, &st);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("ended inside DSML tool call \"f\""), std::string::npos) << st.message();
  EXPECT_EQ(p.content, "ok");  // issue 36: no markup in content
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0], std::make_pair(std::string("f"), std::string("{}")));
}

// Issue 36: output cut off (max_tokens) anywhere inside a tool call: never DSML in content, the call whose name
// is complete comes back with valid JSON arguments holding what was parsed, for any chunking.
TEST(ChatOutputParser, CutOffToolCallIsReportedWithPartialArguments) {
  const std::string full = "Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                           "<｜DSML｜parameter name=\"city\" string=\"true\">Paris 巴黎</｜DSML｜parameter>\n"
                           "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
                           "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const size_t name_end = full.find("\">\n") + 2;
  size_t cut_calls = 0;
  for (size_t cut = 0; cut < full.size(); ++cut) {
    for (size_t chunk : {size_t(1), size_t(5), size_t(1) << 20}) {
      Status st;
      const Parsed p = run(full.substr(0, cut), false, chunk, &st);
      EXPECT_EQ(p.content.find("DSML"), std::string::npos) << cut << ": " << p.content;
      // Content is the text before the block; of a cut-off opening marker, only a piece short of the DSML token.
      EXPECT_TRUE(full.starts_with(p.content) && p.content.size() < std::string("Sure.\n\n<｜DSML｜").size())
          << cut << ": " << ojson(p.content).dump(-1, ' ', false, ojson::error_handler_t::replace);
      for (const auto& [name, args] : p.calls) {
        EXPECT_EQ(name, "get_weather") << cut;
        const ojson a = ojson::parse(args, nullptr, false);
        ASSERT_TRUE(a.is_object()) << cut << ": " << args;
        if (a.contains("city")) {
          EXPECT_EQ(std::string("Paris 巴黎").rfind(a["city"].get<std::string>(), 0), 0u) << args;
        }
      }
      if (cut > name_end) {
        EXPECT_EQ(p.calls.size(), 1u) << cut;
        EXPECT_FALSE(st.is_ok()) << cut;
        cut_calls += chunk == 1;
      }
    }
  }
  EXPECT_GT(cut_calls, 100u);
}

TEST(ChatOutputParser, StartsInToolCallsForRequiredChoice) {
  OutputParser p(options(false, true));
  ParseDelta d = p.push("<｜DSML｜invoke name=\"now\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "now");
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
  ParseDelta end;
  EXPECT_TRUE(p.finish(end).is_ok());
}


// Streaming: the tool-call pieces of every push, concatenated per call, give the completed calls exactly (id and
// name first, then the arguments), for any chunking; string values arrive before their parameter closes.
struct Streamed {
  std::vector<ToolCallDelta> calls;  // accumulated per index
  std::vector<ParsedToolCall> done;
};

Streamed stream(const std::string& text, bool thinking, size_t chunk, bool in_calls = false) {
  OutputParser p(options(thinking, in_calls));
  Streamed out;
  auto take = [&](const ParseDelta& d) {
    for (const ToolCallDelta& t : d.tool_call_deltas) {
      if (!t.name.empty()) {  // a call's first piece
        EXPECT_EQ(size_t(t.index), out.calls.size());
        out.calls.push_back(t);
        continue;
      }
      EXPECT_TRUE(t.id.empty());
      ASSERT_LT(size_t(t.index), out.calls.size());
      out.calls[size_t(t.index)].arguments += t.arguments;
    }
    for (const auto& c : d.tool_calls) out.done.push_back(c);
  };
  for (size_t i = 0; i < text.size(); i += chunk) take(p.push(std::string_view(text).substr(i, chunk)));
  ParseDelta last;
  (void)p.finish(last);
  take(last);
  return out;
}

TEST(ChatOutputParser, ToolCallPiecesConcatenateToTheCalls) {
  size_t calls = 0;
  for (const auto& line : tokenizer::testing::read_lines(tokenizer::testing::source_dir() + "/tests/data/tokenizer/chat_outputs.jsonl")) {
    auto j = ojson::parse(line);
    for (size_t chunk : {size_t(1), size_t(2), size_t(5), size_t(1) << 20}) {
      Streamed s = stream(j["output"], j["thinking"], chunk);
      ASSERT_EQ(s.calls.size(), s.done.size()) << j["name"];
      for (size_t k = 0; k < s.done.size(); ++k) {
        EXPECT_EQ(s.calls[k].id, s.done[k].id);
        EXPECT_EQ(s.calls[k].name, s.done[k].name);
        EXPECT_EQ(s.calls[k].arguments, s.done[k].arguments) << j["name"] << " chunk " << chunk;
        ++calls;
      }
    }
  }
  EXPECT_GE(calls, 12u);
}

TEST(ChatOutputParser, StringArgumentsStreamBeforeTheParameterCloses) {
  const std::string d = "｜DSML｜";
  OutputParser p(options(false, true));
  ParseDelta a = p.push("<" + d + "invoke name=\"search\">\n<" + d + "parameter name=\"q\" string=\"true\">hel");
  ASSERT_EQ(a.tool_call_deltas.size(), 1u);
  EXPECT_EQ(a.tool_call_deltas[0].name, "search");
  EXPECT_EQ(a.tool_call_deltas[0].id, "call_0");
  EXPECT_EQ(a.tool_call_deltas[0].arguments, "{\"q\": \"hel");
  ParseDelta b = p.push("lo \"w\"\xE5\xA4");  // a quote to escape, and half a character (held back)
  ASSERT_EQ(b.tool_call_deltas.size(), 1u);
  EXPECT_EQ(b.tool_call_deltas[0].arguments, "lo \\\"w\\\"");
  ParseDelta c = p.push("\xA9</" + d + "parameter>\n<" + d + "parameter name=\"k\" string=\"false\">[1,2]</" + d +
                        "parameter>\n</" + d + "invoke>\n</" + d + "tool_calls>");
  ASSERT_EQ(c.tool_calls.size(), 1u);
  // Non-string values are copied verbatim, as deepseek-recipe builds the arguments text.
  EXPECT_EQ(c.tool_calls[0].arguments, "{\"q\": \"hello \\\"w\\\"\xE5\xA4\xA9\", \"k\": [1,2]}");
  EXPECT_EQ(a.tool_call_deltas[0].arguments + b.tool_call_deltas[0].arguments + c.tool_call_deltas[0].arguments,
            c.tool_calls[0].arguments);
  ParseDelta end;
  EXPECT_TRUE(p.finish(end).is_ok());
}

TEST(ChatOutputParser, MalformedParameterIsSkippedWithAnError) {
  const std::string d = "｜DSML｜";
  const std::string text = "<" + d + "invoke name=\"f\">\n<" + d + "parameter name=\"a\">1</" + d + "parameter>\n<" + d +
                           "parameter name=\"b\" string=\"false\">2</" + d + "parameter>\n</" + d + "invoke>\n</" + d + "tool_calls>";
  for (size_t chunk : {size_t(1), size_t(1) << 20}) {
    OutputParser p(options(false, true));
    std::vector<ParsedToolCall> done;
    for (size_t i = 0; i < text.size(); i += chunk)
      for (auto& c : p.push(std::string_view(text).substr(i, chunk)).tool_calls) done.push_back(c);
    ParseDelta end;
    Status s = p.finish(end);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("string="), std::string::npos) << s.message();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].arguments, "{\"b\": 2}");
  }
}

}  // namespace
}  // namespace dsinfer::chat
