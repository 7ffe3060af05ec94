// SamplingParams validation (vLLM ranges, messages naming the parameter and value) and OpenAI body parsing.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "sampling/sampling_params.h"

using namespace dsinfer::sampling;
using json = nlohmann::ordered_json;

namespace {
std::string error_of(const SamplingParams& p, int64_t vocab = 0) {
  auto s = dsinfer::sampling::validate(p, vocab);
  return s.is_ok() ? "" : s.message();
}
}  // namespace

TEST(SamplingParams, DefaultsAreValid) { EXPECT_EQ(error_of(SamplingParams{}), ""); }

TEST(SamplingParams, RangeTable) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    const char* must_contain;  // parameter name and offending value
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5; }, "temperature must be a finite number >= 0, got -0.5"},
      {[](SamplingParams& p) { p.top_p = 0.0; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.min_p = 1.1; }, "min_p must be in [0, 1], got 1.1"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3; }, "frequency_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty must be > 0, got 0"},
      {[](SamplingParams& p) { p.logit_bias[7] = 101; }, "logit_bias[7] must be in [-100, 100], got 101"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be at least 1, got 0"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens must be >= 0, got -1"},
      {[](SamplingParams& p) { p.max_tokens = 3; p.min_tokens = 4; }, "min_tokens (4) must be <= max_tokens (3)"},
      {[](SamplingParams& p) { p.stop = {"a", ""}; }, "stop[1] is an empty string"},
      {[](SamplingParams& p) { p.top_logprobs = 21; p.logprobs = true; }, "top_logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.top_logprobs = 2; }, "top_logprobs = 2 needs logprobs = true"},
      {[](SamplingParams& p) { p.n = 0; }, "n must be at least 1, got 0"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SamplingParams p;
    cases[i].set(p);
    std::string e = error_of(p);
    EXPECT_NE(e.find(cases[i].must_contain), std::string::npos) << "case " << i << ": '" << e << "'";
  }
  // Values at the edges of the ranges are accepted.
  SamplingParams edge;
  edge.temperature = 0;
  edge.top_p = 1;
  edge.top_k = -1;
  edge.min_p = 1;
  edge.presence_penalty = -2;
  edge.frequency_penalty = 2;
  edge.logit_bias[0] = -100;
  edge.max_tokens = 1;
  edge.min_tokens = 1;
  edge.logprobs = true;
  edge.top_logprobs = 20;
  EXPECT_EQ(error_of(edge), "");
}

TEST(SamplingParams, TokenIdsCheckedAgainstVocab) {
  SamplingParams p;
  p.stop_token_ids = {1, 50};
  EXPECT_EQ(error_of(p), "");  // no vocabulary known: only sign checked
  EXPECT_NE(error_of(p, 50).find("stop_token_ids[1] = 50 is outside the vocabulary [0, 50)"), std::string::npos);
  SamplingParams q;
  q.logit_bias[99] = 1;
  EXPECT_NE(error_of(q, 64).find("logit_bias token id 99"), std::string::npos);
}

TEST(SamplingParams, ParsesOpenAIChatBody) {
  json body = json::parse(R"({
    "model": "x", "messages": [{"role": "user", "content": "hi"}], "stream": true,
    "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5,
    "frequency_penalty": -0.25, "repetition_penalty": 1.1, "logit_bias": {"17": -100, "3": 2.5},
    "seed": 1234, "max_completion_tokens": 64, "min_tokens": 2, "stop": ["\n\n", "END"],
    "stop_token_ids": [5, 6], "ignore_eos": true, "logprobs": true, "top_logprobs": 5, "n": 3 })");
  auto r = parse_sampling_params(body);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const SamplingParams& p = *r;
  EXPECT_DOUBLE_EQ(p.temperature, 0.7);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_DOUBLE_EQ(p.min_p, 0.05);
  EXPECT_DOUBLE_EQ(p.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(p.frequency_penalty, -0.25);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.1);
  ASSERT_EQ(p.logit_bias.size(), 2u);
  EXPECT_DOUBLE_EQ(p.logit_bias.at(17), -100);
  EXPECT_DOUBLE_EQ(p.logit_bias.at(3), 2.5);
  ASSERT_TRUE(p.seed.has_value());
  EXPECT_EQ(*p.seed, 1234u);
  ASSERT_TRUE(p.max_tokens.has_value());
  EXPECT_EQ(*p.max_tokens, 64);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 5);
  EXPECT_EQ(p.n, 3);
}

TEST(SamplingParams, ParsesCompletionsForms) {
  auto r = parse_sampling_params(json::parse(R"({"prompt": "x", "logprobs": 3, "stop": "###", "max_tokens": 16.0,
                                                 "temperature": null})"));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(r->stop, std::vector<std::string>{"###"});
  EXPECT_EQ(*r->max_tokens, 16);
  EXPECT_DOUBLE_EQ(r->temperature, 1.0);  // null = not given
  EXPECT_FALSE(r->seed.has_value());
}

TEST(SamplingParams, ParseErrorsNameFieldAndValue) {
  struct Case {
    const char* body;
    const char* must_contain;
  };
  const std::vector<Case> cases = {
      {R"({"temperature": "hot"})", "'temperature' must be a number, found string \"hot\""},
      {R"({"max_tokens": 2.5})", "'max_tokens' must be an integer, found number 2.5"},
      {R"({"ignore_eos": 1})", "'ignore_eos' must be true or false"},
      {R"({"stop": 7})", "'stop' must be a string or a list of strings, found number 7"},
      {R"({"stop": ["a", 3]})", "'stop[1]' must be a string"},
      {R"({"stop_token_ids": [1, "2"]})", "'stop_token_ids[1]' must be an integer"},
      {R"({"logit_bias": {"abc": 1}})", "'logit_bias' key 'abc' is not a token id"},
      {R"({"logit_bias": {"5": "x"}})", "'logit_bias[5]' must be a number"},
      {R"({"logprobs": "yes"})", "'logprobs' must be a boolean or an integer"},
      {R"({"max_tokens": 5, "max_completion_tokens": 6})", "max_tokens (5) and max_completion_tokens (6) disagree"},
      {R"({"top_p": 0})", "top_p must be in (0, 1], got 0"},  // parsed, then validated
      {R"([1, 2])", "request body must be a JSON object"},
  };
  for (const auto& c : cases) {
    auto r = parse_sampling_params(json::parse(c.body));
    ASSERT_FALSE(r.is_ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.must_contain), std::string::npos)
        << c.body << " -> " << r.status().message();
  }
}
