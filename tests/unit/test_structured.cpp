// Structured outputs, pieces: request fields -> StructuredOutput (every source, conflicts and errors naming the
// field), the grammar cache (compile once, LRU, compile errors), the per-sequence matcher (</think> gate,
// rollback, termination), the sampler's bitmask hook under greedy / temperature / top-p / logit_bias, and the
// strict tool-call tag against the chat encoding's own DSML rendering. End to end: test_structured_engine.cpp.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>
#include <xgrammar/xgrammar.h>

#include "chat/chat_encoding.h"
#include "chat/chat_types.h"
#include "dsinfer/request.h"
#include "sampling/sampler.h"
#include "structured/grammar_cache.h"
#include "structured/seq_matcher.h"
#include "structured/tool_call_tag.h"
#include "test_util.h"

using dsinfer::Endpoint;
using dsinfer::Request;
using Kind = dsinfer::StructuredOutput::Kind;
namespace st = dsinfer::structured;

namespace {

Request parse_ok(const std::string& body, Endpoint ep) {
  Request r;
  std::string err;
  EXPECT_TRUE(dsinfer::parse_request(body, ep, &r, &err)) << err << "\n" << body;
  return r;
}

std::string parse_err(const std::string& body, Endpoint ep) {
  Request r;
  std::string err;
  EXPECT_FALSE(dsinfer::parse_request(body, ep, &r, &err)) << body;
  return err;
}

const dsinfer::tokenizer::Tokenizer& small_tokenizer() {
  static std::unique_ptr<dsinfer::tokenizer::Tokenizer> tok = [] {
    auto t = dsinfer::tokenizer::Tokenizer::from_file(dsinfer::test::source_dir() + "/models/dsv4-small/tokenizer.json");
    EXPECT_TRUE(t.is_ok()) << t.status().message();
    return std::move(t).value();
  }();
  return *tok;
}

constexpr int64_t kVocab = 3072;  // models/dsv4-small config.json
constexpr int32_t kEos = 1;

st::GrammarCache& cache() {
  static std::unique_ptr<st::GrammarCache> c = [] {
    auto r = st::GrammarCache::create(small_tokenizer(), kVocab, kEos, /*capacity=*/4);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return std::move(r).value();
  }();
  return *c;
}

dsinfer::StructuredOutput regex(const std::string& rx) {
  dsinfer::StructuredOutput so;
  so.kind = Kind::kRegex;
  so.spec = rx;
  so.field = "guided_regex";
  return so;
}

std::vector<int32_t> encode(const std::string& s) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(small_tokenizer().encode(s, ids).is_ok());
  return ids;
}

bool allowed(const std::vector<int32_t>& mask, int32_t t) { return (uint32_t(mask[size_t(t) / 32]) >> (t % 32)) & 1u; }

}  // namespace

TEST(StructuredRequest, EveryFieldBecomesOneSpec) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "json please"}])";
  Request r = parse_ok(R"({)" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}, "strict": true}}})", Endpoint::kChatCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(r.structured.field, "response_format.json_schema.schema");
  EXPECT_EQ(nlohmann::json::parse(r.structured.spec)["properties"]["a"]["type"], "integer");
  r = parse_ok(R"({"prompt": "x", "response_format": {"type": "json_object"}})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kJsonObject);
  r = parse_ok(R"({"prompt": "x", "response_format": {"type": "text"}})", Endpoint::kCompletions);
  EXPECT_FALSE(r.structured.active());
  r = parse_ok(R"({"prompt": "x", "structured_outputs": {"regex": "[a-z]+", "disable_any_whitespace": true}})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kRegex);
  EXPECT_EQ(r.structured.spec, "[a-z]+");
  EXPECT_FALSE(r.structured.any_whitespace);
  r = parse_ok(R"({"prompt": "x", "structured_outputs": {"choice": ["a", "b\"c"]}})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kChoice);
  EXPECT_EQ(r.structured.choices, (std::vector<std::string>{"a", "b\"c"}));
  r = parse_ok(R"({"prompt": "x", "guided_json": "{\"type\": \"integer\"}"})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(r.structured.field, "guided_json");
  r = parse_ok(R"({"prompt": "x", "guided_grammar": "root ::= \"a\""})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kGrammar);
  r = parse_ok(R"({"prompt": "x", "guided_choice": ["yes", "no"], "guided_decoding_backend": "xgrammar"})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kChoice);
  r = parse_ok(R"({"prompt": "x", "structured_outputs": {"json_object": true}})", Endpoint::kCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kJsonObject);
}

TEST(StructuredRequest, ConflictsAndBadValuesNameTheField) {
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["b"]})", Endpoint::kCompletions)
                .find("'guided_regex' and 'guided_choice' both constrain"), std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}})",
                      Endpoint::kCompletions).find("'response_format' and 'structured_outputs'"), std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})", Endpoint::kCompletions)
                .find("sets both regex and choice"), std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "structured_outputs": {"regexp": "a"}})", Endpoint::kCompletions)
                .find("'structured_outputs.regexp' is not a known"), std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "structured_outputs": {}})", Endpoint::kCompletions).find("needs one of"), std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_choice": []})", Endpoint::kCompletions).find("'guided_choice' must be a non-empty"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_choice": ["a", 3]})", Endpoint::kCompletions).find("'guided_choice'[1]"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_json": "{not json"})", Endpoint::kCompletions).find("'guided_json' is a string but not valid JSON"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_json": 42})", Endpoint::kCompletions).find("'guided_json' must be a JSON Schema"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_regex": 5})", Endpoint::kCompletions).find("'guided_regex' must be a non-empty string"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "guided_whitespace_pattern": " "})", Endpoint::kCompletions).find("not supported"),
            std::string::npos);
  EXPECT_NE(parse_err(R"({"prompt": "x", "response_format": {"type": "xml"}})", Endpoint::kCompletions).find("response_format.type"),
            std::string::npos);
}

TEST(StructuredRequest, StrictForcedToolCallsBecomeAToolCallConstraint) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
      {"type": "function", "function": {"name": "g", "strict": true, "parameters": {"type": "object", "properties": {}}}}])";
  const std::string head = R"({"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}, )";
  Request r = parse_ok(head + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})", Endpoint::kChatCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kToolCalls);
  EXPECT_EQ(r.structured.field, "tools");
  EXPECT_NE(r.structured.spec.find(R"("single_call":true)"), std::string::npos) << r.structured.spec;
  // The engine resolves it with its model's chat family: V4 and V4.1 DSML tags and parameter styles.
  auto v4 = st::resolve_tool_calls(r.structured, dsinfer::chat::ChatFamily::kV4);
  ASSERT_TRUE(v4.is_ok()) << v4.status().message();
  EXPECT_EQ(v4->kind, Kind::kStructuralTag);
  EXPECT_NE(v4->spec.find("<｜DSML｜invoke name=\\\"f\\\">"), std::string::npos) << v4->spec;
  EXPECT_NE(v4->spec.find("</｜DSML｜tool_calls>"), std::string::npos) << v4->spec;
  EXPECT_NE(v4->spec.find(R"("style":"deepseek_xml")"), std::string::npos) << v4->spec;
  auto v41 = st::resolve_tool_calls(r.structured, dsinfer::chat::ChatFamily::kV41);
  ASSERT_TRUE(v41.is_ok()) << v41.status().message();
  EXPECT_NE(v41->spec.find("<｜DSML｜ invoke name=\\\"f\\\">"), std::string::npos) << v41->spec;
  EXPECT_NE(v41->spec.find("</｜DSML｜ calls>"), std::string::npos) << v41->spec;
  EXPECT_NE(v41->spec.find(R"("style":"deepseek_v4_1_xml")"), std::string::npos) << v41->spec;
  EXPECT_TRUE(cache().get(*v4).is_ok());
  EXPECT_TRUE(cache().get(*v41).is_ok());
  EXPECT_FALSE(cache().get(r.structured).is_ok());  // unresolved: a clear error, never a V4 default
  dsinfer::StructuredOutput bad = r.structured;
  bad.spec = R"({"tools": [{"name": 3}], "single_call": false})";
  EXPECT_FALSE(st::resolve_tool_calls(bad, dsinfer::chat::ChatFamily::kV4).is_ok());
  // "required" over strict tools constrains too; "auto" does not.
  r = parse_ok(head + tools + R"(, "tool_choice": "required"})", Endpoint::kChatCompletions);
  EXPECT_EQ(r.structured.kind, Kind::kToolCalls);
  r = parse_ok(head + tools + R"(, "tool_choice": "auto"})", Endpoint::kChatCompletions);
  EXPECT_FALSE(r.structured.active());
  // Strict and non-strict tools in one request are rejected, as deepseek-recipe does.
  const std::string mixed = R"("tools": [
      {"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object", "properties": {}}}},
      {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}])";
  EXPECT_NE(parse_err(head + mixed + R"(, "tool_choice": "required"})", Endpoint::kChatCompletions).find("cannot be mixed"),
            std::string::npos);
  EXPECT_NE(parse_err(head + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}, "guided_regex": "a"})",
                      Endpoint::kChatCompletions).find("cannot be combined with 'guided_regex'"), std::string::npos);
}

TEST(StructuredGrammar, CompiledOnceLruAndErrors) {
  st::GrammarCache& c = cache();
  const int64_t compiles = c.compiles();
  ASSERT_TRUE(c.get(regex("[0-9]{4}")).is_ok());
  ASSERT_TRUE(c.get(regex("[0-9]{4}")).is_ok());
  EXPECT_EQ(c.compiles(), compiles + 1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.get(regex("[a-z]{" + std::to_string(i + 1) + "}")).is_ok());
  EXPECT_EQ(c.size(), 4u);  // capacity 4: the oldest were evicted
  ASSERT_TRUE(c.get(regex("[0-9]{4}")).is_ok());
  EXPECT_EQ(c.compiles(), compiles + 7);  // evicted, compiled again

  auto bad = c.get(regex("([a-z"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("guided_regex: invalid regex"), std::string::npos) << bad.status().message();
  dsinfer::StructuredOutput so;
  so.kind = Kind::kJsonSchema;
  so.field = "response_format.json_schema.schema";
  so.spec = R"({"type": "object", "properties": {"a": {"type": "nonsense"}}})";
  bad = c.get(so);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("response_format.json_schema.schema: invalid json schema"), std::string::npos);
  so.kind = Kind::kGrammar;
  so.field = "guided_grammar";
  so.spec = "root ::= undefined_rule";
  EXPECT_FALSE(c.get(so).is_ok());
}

// The cache's byte budget, the source-size limit (checked before compiling) and constraints whose language is
// empty (refused at compile time, naming the field).
TEST(StructuredGrammar, ByteBoundSourceLimitAndEmptyLanguage) {
  auto r = st::GrammarCache::create(small_tokenizer(), kVocab, kEos, /*capacity=*/100, /*capacity_bytes=*/1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  st::GrammarCache& c = **r;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.get(regex("[a-z]{" + std::to_string(i + 1) + "}")).is_ok());
  EXPECT_EQ(c.size(), 1u);  // each grammar is over the 1-byte budget: only the newest stays
  EXPECT_GT(c.stats().bytes, 0u);
  EXPECT_GT(c.stats().compile_seconds, 0.0);
  const int64_t compiles = c.compiles();
  auto big = c.get(regex(std::string(st::kMaxGrammarSourceBytes + 1, 'a')));
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("guided_regex: the regex is"), std::string::npos) << big.status().message();
  EXPECT_EQ(c.compiles(), compiles);  // refused before compiling
  auto empty = c.get(regex("[^\\s\\S]"));
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("admits no output"), std::string::npos) << empty.status().message();
  dsinfer::StructuredOutput so;
  so.kind = Kind::kGrammar;
  so.field = "guided_grammar";
  so.spec = "root ::= root";
  empty = c.get(so);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("guided_grammar: the grammar admits no output"), std::string::npos)
      << empty.status().message();
  EXPECT_TRUE(c.get(regex("a?")).is_ok());  // matches the empty output: a stop token may come first
}

TEST(StructuredGrammar, VocabularyHidesControlTokens) {
  const auto v = st::grammar_vocabulary(small_tokenizer(), kVocab);
  ASSERT_EQ(v.size(), size_t(kVocab));
  const auto id = [](const char* s) { return *small_tokenizer().token_to_id(s); };
  EXPECT_EQ(v[size_t(id("</think>"))], "");
  EXPECT_EQ(v[size_t(id("<｜User｜>"))], "");
  EXPECT_EQ(v[size_t(id("｜DSML｜"))], "｜DSML｜");
  EXPECT_EQ(v[size_t(encode("{")[0])], "{");
}

TEST(StructuredMatcher, ThinkingGateTerminationAndRollback) {
  auto g = cache().get(regex("[0-9]{2}"));
  ASSERT_TRUE(g.is_ok());
  st::SequenceMatcher m(*g, small_tokenizer(), {kEos}, /*wait_for_think_end=*/true);
  EXPECT_FALSE(m.constrained());
  for (int32_t t : encode("some reasoning, not digits")) EXPECT_TRUE(m.accept(t));
  EXPECT_FALSE(m.constrained());
  // "</think>" spelled by plain-text tokens (not the added token) opens the gate too.
  std::vector<int32_t> think_end;
  ASSERT_TRUE(small_tokenizer().encode("</think>", think_end, dsinfer::tokenizer::EncodeMode::kPlainText).is_ok());
  ASSERT_GT(think_end.size(), 1u);
  for (int32_t t : think_end) m.accept(t);
  EXPECT_TRUE(m.constrained());
  const int64_t at_gate = m.num_tokens();
  std::vector<int32_t> mask(size_t(dsinfer::sampling::bitmask_words(kVocab)));
  m.fill_bitmask(mask);
  EXPECT_TRUE(allowed(mask, encode("4")[0]));
  EXPECT_FALSE(allowed(mask, encode("a")[0]));
  EXPECT_FALSE(allowed(mask, kEos));
  EXPECT_TRUE(m.accept(encode("4")[0]));
  EXPECT_TRUE(m.accept(encode("2")[0]));
  EXPECT_TRUE(m.completed());
  m.fill_bitmask(mask);
  for (int32_t t = 0; t < kVocab; ++t) EXPECT_EQ(allowed(mask, t), t == kEos) << t;
  EXPECT_TRUE(m.accept(kEos));
  EXPECT_TRUE(m.terminated());
  EXPECT_FALSE(m.constrained());
  // Roll back EOS and one digit: constrained again, digits allowed.
  ASSERT_TRUE(m.rollback(2).is_ok());
  EXPECT_TRUE(m.constrained());
  EXPECT_FALSE(m.terminated());
  m.fill_bitmask(mask);
  EXPECT_TRUE(allowed(mask, encode("7")[0]));
  // A rejected token latches "violated" (unconstrained) until rolled back.
  EXPECT_FALSE(m.accept(encode("x")[0]));
  EXPECT_TRUE(m.violated());
  EXPECT_FALSE(m.constrained());
  ASSERT_TRUE(m.rollback(1).is_ok());
  EXPECT_FALSE(m.violated());
  EXPECT_TRUE(m.constrained());
  // Back across the gate: the reasoning again; the same tokens reopen it.
  ASSERT_TRUE(m.rollback(m.num_tokens() - at_gate + 1).is_ok());
  EXPECT_FALSE(m.started());
  EXPECT_TRUE(m.accept(*small_tokenizer().token_to_id("</think>")));
  EXPECT_TRUE(m.constrained());
  EXPECT_FALSE(m.rollback(m.num_tokens() + 1).is_ok());
}

TEST(StructuredSampler, MaskHookUnderEveryMode) {
  using namespace dsinfer::sampling;
  const int64_t V = 100;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; ++i) logits[size_t(i)] = float(i % 17) * 0.3f;
  logits[50] = 20.0f;  // the model's favourite, disallowed below
  TokenBitmask bm;
  bm.reset(1, V);
  std::fill(bm.words.begin(), bm.words.end(), 0);
  const std::set<int32_t> ok = {3, 7, 64, 99};
  for (int32_t t : ok) bm.words[size_t(t / 32)] |= int32_t(1u << (t % 32));
  bm.active[0] = 1;
  ASSERT_TRUE(bm.any_active());
  Sampler s;
  dsinfer::SamplingParams p;
  p.temperature = 0;
  p.logit_bias[50] = 100;  // a bias cannot bring back a masked token
  p.logprobs = true;
  p.top_logprobs = 3;
  SampleInput in;
  in.logits = logits;
  in.params = &p;
  in.token_bitmask = bm.row_if_active(0);
  SampleResult r = s.sample(in);
  EXPECT_EQ(r.token, 99);  // argmax over the allowed tokens (99 % 17 = 14 is the largest)
  EXPECT_TRUE(std::isfinite(r.logprob));
  for (const auto& t : r.top) EXPECT_TRUE(ok.count(t.token)) << t.token;  // raw logprobs of the masked logits
  for (double temp : {0.7, 1.0, 2.5}) {
    p.temperature = temp;
    p.top_p = temp > 2 ? 0.5 : 1.0;
    for (uint64_t seed = 0; seed < 100; ++seed) {
      in.rng = {seed, 1};
      EXPECT_TRUE(ok.count(s.sample(in).token));
    }
  }
  std::vector<float> row = logits;
  apply_token_bitmask(row, bm.row_if_active(0));
  for (int64_t i = 0; i < V; ++i) EXPECT_EQ(std::isinf(row[size_t(i)]), !ok.count(int32_t(i))) << i;
  bm.active[0] = 0;
  EXPECT_TRUE(bm.row_if_active(0).empty());
}

TEST(StructuredToolCall, TagAcceptsTheChatEncodingsDsmlCall) {
  // For V4 and V4.1: the grammar accepts exactly the call block the family's chat encoding renders.
  nlohmann::ordered_json params = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]})");
  dsinfer::StructuredOutput so;
  so.kind = Kind::kToolCalls;
  so.field = "tools";
  so.spec = st::tool_calls_spec({{"get_weather", params}}, /*single_call=*/true);
  for (const auto family : {dsinfer::chat::ChatFamily::kV4, dsinfer::chat::ChatFamily::kV41}) {
    SCOPED_TRACE(family == dsinfer::chat::ChatFamily::kV4 ? "V4" : "V4.1");
    auto resolved = st::resolve_tool_calls(so, family);
    ASSERT_TRUE(resolved.is_ok()) << resolved.status().message();
    auto g = cache().get(*resolved);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    // What the chat encoding renders for the same call in an assistant turn.
    dsinfer::chat::Conversation conv;
    dsinfer::chat::ChatMessage u, a;
    u.content = "weather?";
    a.role = dsinfer::chat::Role::kAssistant;
    a.tool_calls.push_back({"call_1", "get_weather", nlohmann::ordered_json::parse(R"({"city": "Paris", "days": 3})")});
    conv.thinking = false;
    conv.messages = {u, a};
    const std::string prompt = dsinfer::chat::render_prompt(conv, family).prompt;
    const dsinfer::chat::V4Tokens t = dsinfer::chat::tokens_for(family);
    const std::string open = "<" + t.dsml + t.calls_tag + ">\n", close = "</" + t.dsml + t.calls_tag + ">";
    const size_t b = prompt.find(open), e = prompt.find(close);
    ASSERT_NE(b, std::string::npos) << prompt;
    ASSERT_NE(e, std::string::npos) << prompt;
    const std::string block = prompt.substr(b + open.size(), e + close.size() - b - open.size());
    st::SequenceMatcher m(*g, small_tokenizer(), {kEos}, false);
    ASSERT_TRUE(m.matcher().AcceptString(block)) << block;
    EXPECT_TRUE(m.completed());
    st::SequenceMatcher bad(*g, small_tokenizer(), {kEos}, false);
    const std::string days9 = block.substr(0, block.find(">3<") + 1) + "9";  // days out of [1, 7]
    EXPECT_FALSE(bad.matcher().AcceptString(days9)) << days9;
  }
}
