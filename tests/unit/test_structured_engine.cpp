// Structured outputs end to end on the shipped model (models/dsv4-small, CPU): JSON schemas through chat and
// completions, greedy and sampled with n > 1, regex, choice and EBNF, a stop string, thinking mode (the grammar
// starts after </think>) and a bad schema as a clear error. Outputs are parsed with nlohmann and checked by hand;
// the 50-schema jsonschema validation is tests/python/structured_outputs_test.py.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <regex>

#include <nlohmann/json.hpp>

#include "dsinfer/engine.h"
#include "structured/grammar_cache.h"
#include "test_util.h"

using nlohmann::json;

namespace {

struct Run {
  std::unique_ptr<dsinfer::Engine> engine;
  std::vector<std::pair<uint64_t, std::string>> ids;  // request id, case name
  std::map<uint64_t, dsinfer::RequestResult> results;
};

std::unique_ptr<dsinfer::Engine> small_engine() {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 1024;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  return e;
}

json chat_body(const std::string& content, json extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"thinking", {{"type", "disabled"}}}, {"max_tokens", 300}};
  b.update(extra);
  return b;
}

json completion_body(const std::string& prompt, json extra) {
  json b = {{"prompt", prompt}, {"max_tokens", 300}};
  b.update(extra);
  return b;
}

}  // namespace

TEST(StructuredEngine, SchemasRegexChoiceGrammarStopAndThinking) {
  auto e = small_engine();
  ASSERT_TRUE(e);
  const json person = json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 99}, "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
      "minItems": 1, "maxItems": 2}}, "required": ["name", "age", "tags"]})");
  const json point = json::parse(R"({"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer",
      "minimum": -5, "maximum": 5}})");
  std::map<std::string, json> bodies = {
      {"person-chat-greedy", chat_body("A person as JSON.", {{"response_format", {{"type", "json_schema"},
          {"json_schema", {{"name", "p"}, {"schema", person}, {"strict", true}}}}}, {"temperature", 0}})},
      {"person-completion-sampled-n2", completion_body("JSON:", {{"guided_json", person}, {"temperature", 0.9}, {"seed", 3}, {"n", 2}})},
      {"point-chat-sampled", chat_body("Two numbers.", {{"structured_outputs", {{"json", point}}}, {"temperature", 1.0}, {"seed", 5}})},
      {"regex", completion_body("Phone:", {{"guided_regex", "[0-9]{3}-[0-9]{4}"}, {"temperature", 0}})},
      {"choice-n3", completion_body("Pick:", {{"guided_choice", {"north", "south", "east"}}, {"temperature", 1.5}, {"seed", 9}, {"n", 3}})},
      {"ebnf", completion_body("Sum:", {{"guided_grammar", "root ::= num (\"+\" num){1,2}\nnum ::= [1-9] [0-9]?"}, {"temperature", 0}})},
      {"stop", completion_body("Id:", {{"guided_regex", "[a-z]{2};[a-z]{2}"}, {"stop", {";"}}, {"temperature", 0}})},
      // logit_bias on </think> (id 3029) makes the tiny model close its reasoning after a few tokens.
      {"thinking", chat_body("A person as JSON.", {{"thinking", {{"type", "enabled"}}}, {"guided_json", person},
          {"logit_bias", {{"3029", 16}}}, {"temperature", 0}})},
  };
  std::map<uint64_t, std::string> name_of;
  std::string err;
  for (const auto& [name, b] : bodies) {
    const uint64_t id = e->submit(b.dump(), &err);
    ASSERT_NE(id, 0u) << name << ": " << err;
    name_of[id] = name;
  }
  // A schema xgrammar cannot compile is refused at submit, naming the field.
  EXPECT_EQ(e->submit(completion_body("x", {{"guided_json", {{"type", "strnig"}}}}).dump(), &err), 0u);
  EXPECT_NE(err.find("guided_json: invalid json schema"), std::string::npos) << err;
  std::vector<dsinfer::RequestResult> results;
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), bodies.size());
  std::set<std::string> choices;
  for (const dsinfer::RequestResult& r : results) {
    const std::string& name = name_of[r.id];
    for (const dsinfer::Completion& c : r.completions) {
      SCOPED_TRACE(name + ": " + c.text);
      EXPECT_EQ(c.finish_reason, "stop");
      if (name.rfind("person", 0) == 0 || name == "thinking") {
        const json v = json::parse(c.text);
        ASSERT_TRUE(v.is_object());
        EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 12);
        EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 0 && v["age"] <= 99);
        ASSERT_TRUE(v["tags"].is_array());
        EXPECT_TRUE(v["tags"].size() >= 1 && v["tags"].size() <= 2);
        for (const json& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b");
        EXPECT_EQ(v.size(), 3u);
        if (name == "thinking") {
          EXPECT_FALSE(c.reasoning.empty());  // the reasoning itself was not constrained
        }
      } else if (name == "point-chat-sampled") {
        const json v = json::parse(c.text);
        ASSERT_TRUE(v.is_array());
        ASSERT_EQ(v.size(), 2u);
        for (const json& x : v) EXPECT_TRUE(x.is_number_integer() && x >= -5 && x <= 5);
      } else if (name == "regex") {
        EXPECT_TRUE(std::regex_match(c.text, std::regex("[0-9]{3}-[0-9]{4}")));
      } else if (name == "choice-n3") {
        EXPECT_TRUE(c.text == "north" || c.text == "south" || c.text == "east");
        choices.insert(c.text);
      } else if (name == "ebnf") {
        EXPECT_TRUE(std::regex_match(c.text, std::regex("[1-9][0-9]?(\\+[1-9][0-9]?){1,2}")));
      } else if (name == "stop") {
        EXPECT_TRUE(std::regex_match(c.text, std::regex("[a-z]{2}")));  // cut at the stop string
      }
    }
  }
}

TEST(StructuredEngine, SampledChoicesDifferAcrossSeeds) {
  // n > 1 with sampling: every sample is constrained on its own (its own matcher, its own RNG stream).
  auto e = small_engine();
  ASSERT_TRUE(e);
  std::string err;
  ASSERT_NE(e->submit(completion_body("Color:", {{"guided_choice", {"red", "green", "blue", "cyan"}}, {"temperature", 2.0},
                                                 {"seed", 11}, {"n", 8}}).dump(), &err), 0u) << err;
  std::vector<dsinfer::RequestResult> results;
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), 1u);
  std::set<std::string> seen;
  for (const auto& c : results[0].completions) {
    EXPECT_EQ(c.finish_reason, "stop");
    EXPECT_TRUE(c.text == "red" || c.text == "green" || c.text == "blue" || c.text == "cyan") << c.text;
    seen.insert(c.text);
  }
  EXPECT_GE(seen.size(), 2u);
}

// Issue 36: a grammar compiling on the engine's compile pool (Engine::prepare_async, what `dsinfer generate` and the
// server use) holds only its own request. The compile of the "held" constraint is stopped by the test hook until the
// test releases it, so the ordering below is deterministic: while it is held, plain requests and another constrained
// request (its grammar compiles on a second worker) run to completion; then the held one compiles and finishes.
TEST(StructuredEngine, AGrammarOnThePoolHoldsOnlyItsOwnRequest) {
  auto e = small_engine();
  ASSERT_TRUE(e);
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  dsinfer::structured::set_compile_hook_for_testing([&](const dsinfer::StructuredOutput& so) {
    if (so.choices.empty() || so.choices[0].rfind("HELD", 0) != 0) return;
    entered.set_value();
    released.wait();
  });
  struct Unhook {
    ~Unhook() { dsinfer::structured::set_compile_hook_for_testing(nullptr); }
  } unhook;
  auto request = [](const json& body) {
    dsinfer::Request r;
    std::string err;
    EXPECT_TRUE(dsinfer::parse_request(body.dump(), dsinfer::Endpoint::kCompletions, &r, &err)) << err;
    return r;
  };
  const auto choice = [](std::vector<std::string> c) {
    return json{{"structured_outputs", {{"choice", c}}}, {"temperature", 0}, {"max_tokens", 8}};
  };
  const dsinfer::Request held = request(completion_body("Answer:", choice({"HELD yes", "HELD no"})));
  const dsinfer::Request other = request(completion_body("Colour:", choice({"red", "blue"})));
  std::shared_future<dsinfer::PrepareResult> held_ready = e->prepare_async(held);
  entered.get_future().wait();  // the held grammar is compiling (and stays so until released)
  ASSERT_TRUE(e->prepare_async(other).get().ok);  // another grammar compiles meanwhile, on another worker
  std::string err;
  std::vector<uint64_t> small;
  for (int i = 0; i < 3; ++i)
    small.push_back(e->submit(request(completion_body("def f" + std::to_string(i) + "(x):",
                                                      {{"max_tokens", 6}, {"temperature", 0}})), &err));
  small.push_back(e->submit(other, &err));
  for (uint64_t id : small) ASSERT_NE(id, 0u) << err;
  std::vector<dsinfer::RequestResult> results;
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), small.size());  // every small request finished ...
  // ... while the held one is still compiling
  EXPECT_NE(held_ready.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  for (const dsinfer::RequestResult& r : results) EXPECT_FALSE(r.completions[0].finish_reason.empty());
  for (const dsinfer::RequestResult& r : results) {
    if (r.id != small.back()) continue;
    const std::string colour = r.completions[0].text;
    EXPECT_TRUE(colour == "red" || colour == "blue") << colour;
  }
  release.set_value();
  const dsinfer::PrepareResult pr = held_ready.get();
  ASSERT_TRUE(pr.ok) << pr.error;
  ASSERT_NE(e->submit(held, &err), 0u) << err;  // compiled: submit finds it in the cache
  results.clear();
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), 1u);
  const std::string answer = results[0].completions[0].text;
  EXPECT_TRUE(answer == "HELD yes" || answer == "HELD no") << answer;
  // A request without a constraint is ready at once; a bad constraint's error comes back through the future.
  const auto now = std::chrono::seconds(0);
  EXPECT_EQ(e->prepare_async(request(completion_body("x", json::object()))).wait_for(now), std::future_status::ready);
  const json bad_regex = {{"structured_outputs", {{"regex", "(["}}}};
  const dsinfer::PrepareResult bad = e->prepare_async(request(completion_body("x", bad_regex))).get();
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.error_param, "structured_outputs") << bad.error;
}
