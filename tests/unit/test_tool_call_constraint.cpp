// Strict forced tool calls end to end through the public Engine API (CPU) on the shipped V4 model: the grammar the
// engine builds uses the model family's DSML tags, so the family's output parser finds every call (named and
// "required" tool_choice), with arguments inside the schemas. Greedy: the model decides what the grammar leaves
// open. (No V4.1 model with a BPE tokenizer exists here - the tiny-v41 fixtures have a WordLevel one - so V4.1 is
// covered a level lower: StructuredToolCall.TagAcceptsTheChatEncodingsDsmlCall, ChatV41.ParsesV41ToolCalls*.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dsinfer/engine.h"
#include "test_util.h"

using nlohmann::json;

namespace {

void expect_constrained_calls(const std::string& model_dir) {
  dsinfer::EngineOptions o;
  o.model_dir = model_dir;
  o.max_model_len = 1024;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  const json city = json::parse(R"({"type": "object", "properties": {"city": {"type": "string", "enum": ["paris", "rome"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["city", "days"], "additionalProperties": false})");
  const json tools = {{{"type", "function"}, {"function", {{"name", "book"}, {"strict", true}, {"parameters", city}}}},
                      {{"type", "function"}, {"function", {{"name", "cancel"}, {"strict", true}, {"parameters",
                          json::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})")}}}}};
  const auto body = [&](json choice) {
    return json{{"messages", {{{"role", "user"}, {"content", "Book a trip."}}}}, {"thinking", {{"type", "disabled"}}},
                {"tools", tools}, {"tool_choice", choice}, {"temperature", 0}, {"max_tokens", 400}}.dump();
  };
  const uint64_t named = e->submit(body({{"type", "function"}, {"function", {{"name", "book"}}}}), &err);
  ASSERT_NE(named, 0u) << err;
  const uint64_t required = e->submit(body("required"), &err);
  ASSERT_NE(required, 0u) << err;
  std::vector<dsinfer::RequestResult> results;
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), 2u);
  for (const dsinfer::RequestResult& r : results) {
    ASSERT_EQ(r.completions.size(), 1u);
    const dsinfer::Completion& c = r.completions[0];
    SCOPED_TRACE(model_dir + (r.id == named ? " named: " : " required: ") + c.text);
    EXPECT_EQ(c.finish_reason, "tool_calls");
    ASSERT_GE(c.tool_calls.size(), 1u);
    if (r.id == named) {
      ASSERT_EQ(c.tool_calls.size(), 1u);
    }
    for (const dsinfer::ToolCallResult& call : c.tool_calls) {
      const json args = json::parse(call.arguments);
      if (call.name == "book") {
        EXPECT_TRUE(args["city"] == "paris" || args["city"] == "rome") << call.arguments;
        EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 9) << call.arguments;
        EXPECT_EQ(args.size(), 2u);
      } else {
        EXPECT_EQ(call.name, "cancel");
        EXPECT_TRUE(r.id == required);
        EXPECT_TRUE(args["ok"].is_boolean()) << call.arguments;
      }
    }
  }
}

}  // namespace

TEST(ToolCallConstraint, V4ModelCallsParseWithinTheSchemas) {
  expect_constrained_calls(dsinfer::test::source_dir() + "/models/dsv4-small");
}
