// Structured outputs under speculative decoding. Pieces: a grammar-violating draft is rejected exactly at its
// position (greedy and sampled verification against a real xgrammar matcher), the correction token lies inside
// the grammar, and the matcher is left as it was (tentative advance + rollback). End to end on the shipped model
// (models/dsv4-small, CPU, through the public API): greedy constrained output with DSpark and with MTP-1 equals
// non-speculative constrained output token for token (JSON schemas, json_object, regex, choice, EBNF, thinking
// mode, n > 1); sampled constrained outputs under DSpark are all valid.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "dsinfer/engine.h"
#include "sampling/spec_sampling.h"
#include "structured/structured_decoding.h"
#include "test_util.h"

using nlohmann::json;
namespace st = dsinfer::structured;
namespace sm = dsinfer::sampling;

namespace {

constexpr int64_t kVocab = 3072;  // models/dsv4-small config.json
constexpr int32_t kEos = 1;

const dsinfer::tokenizer::Tokenizer& small_tokenizer() {
  static std::unique_ptr<dsinfer::tokenizer::Tokenizer> tok = [] {
    auto t = dsinfer::tokenizer::Tokenizer::from_file(dsinfer::test::source_dir() + "/models/dsv4-small/tokenizer.json");
    EXPECT_TRUE(t.is_ok()) << t.status().message();
    return std::move(t).value();
  }();
  return *tok;
}

st::Grammar regex_grammar(const std::string& rx) {
  static std::unique_ptr<st::GrammarCache> cache = [] {
    auto r = st::GrammarCache::create(small_tokenizer(), kVocab, kEos, /*capacity=*/4);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return std::move(r).value();
  }();
  dsinfer::StructuredOutput so;
  so.kind = dsinfer::StructuredOutput::Kind::kRegex;
  so.spec = rx;
  so.field = "guided_regex";
  auto g = cache->get(so);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return *g;
}

bool allowed(std::span<const int32_t> mask, int32_t t) { return (uint32_t(mask[size_t(t) / 32]) >> (t % 32)) & 1u; }

// Verification of drafts = valid[0..pos) + a token the grammar forbids at pos + valid[pos+1..]: the target
// logits favour every draft (40) over the valid token (20), so only the mask can reject the bad one.
struct ViolationCase {
  std::vector<int32_t> valid, drafts;
  size_t pos = 2;
  std::vector<float> logits;  // [drafts + 1, vocab]
  std::vector<double> q;      // one-hot at each draft
  st::SequenceMatcher matcher{regex_grammar("[0-9]{3}-[0-9]{4}"), small_tokenizer(), {kEos}, false};

  ViolationCase() {
    EXPECT_TRUE(small_tokenizer().encode("123-4567", valid).is_ok());
    drafts = valid;
    std::vector<int32_t> before(valid.begin(), valid.begin() + int64_t(pos));
    st::TentativeMatcher tm(&matcher, kVocab);
    for (int32_t t : before) tm.push(t);
    const std::span<const int32_t> m = tm.mask();
    int32_t bad = 2;  // a plain token (not EOS) the grammar forbids here
    while (bad < kVocab && allowed(m, bad)) ++bad;
    drafts[pos] = bad;
    logits.assign((drafts.size() + 1) * size_t(kVocab), 0.0f);
    q.assign(drafts.size() * size_t(kVocab), 0.0);
    for (size_t k = 0; k <= drafts.size(); ++k) {
      if (k < drafts.size()) {
        logits[k * size_t(kVocab) + size_t(drafts[k])] = 40.0f;
        q[k * size_t(kVocab) + size_t(drafts[k])] = 1.0;
      }
      if (k < valid.size() && valid[k] != drafts[k]) logits[k * size_t(kVocab) + size_t(valid[k])] = 20.0f;
    }
  }

  std::vector<sm::SampleResult> verify(const dsinfer::SamplingParams& p, uint64_t seed, bool masked) {
    sm::VerifyInput vi;
    vi.logits = logits;
    vi.drafts = drafts;
    vi.draft_probs = q;
    vi.params = &p;
    vi.rng = {seed, 0};
    vi.eos_token_id = kEos;
    st::TentativeMatcher tm(&matcher, kVocab);
    if (masked) {
      vi.row_mask = [&](size_t k) {
        if (k > 0) tm.push(drafts[k - 1]);
        return tm.mask();
      };
    }
    sm::Sampler sampler;
    std::vector<sm::SampleResult> out;
    sm::verify_drafts(vi, sampler, sm::LogprobsMode::Raw, out);
    return out;
  }
};

TEST(StructuredSpec, GrammarViolatingDraftIsRejectedAtItsPosition) {
  ViolationCase c;
  ASSERT_GE(c.valid.size(), 4u) << "the case needs a multi-token valid output";
  dsinfer::SamplingParams greedy;
  greedy.temperature = 0;
  // Without the mask every draft is the target's argmax: all accepted plus a bonus token.
  EXPECT_EQ(c.verify(greedy, 1, false).size(), c.drafts.size() + 1);
  const auto out = c.verify(greedy, 1, true);
  ASSERT_EQ(out.size(), c.pos + 1);  // drafts before pos accepted, then the correction
  for (size_t k = 0; k < c.pos; ++k) EXPECT_EQ(out[k].token, c.drafts[k]);
  EXPECT_EQ(out[c.pos].token, c.valid[c.pos]);  // the grammar's best token, not the favoured bad draft
  EXPECT_EQ(c.matcher.num_tokens(), 0);         // the tentative advance was rolled back

  dsinfer::SamplingParams sampled;
  sampled.temperature = 1.0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto s = c.verify(sampled, seed, true);
    ASSERT_EQ(s.size(), c.pos + 1) << "seed " << seed;
    for (size_t k = 0; k < c.pos; ++k) EXPECT_EQ(s[k].token, c.drafts[k]);
    // The correction is drawn from the masked target: inside the grammar.
    st::TentativeMatcher tm(&c.matcher, kVocab);
    for (size_t k = 0; k < c.pos; ++k) tm.push(c.drafts[k]);
    EXPECT_TRUE(allowed(tm.mask(), s[c.pos].token)) << "seed " << seed << " token " << s[c.pos].token;
  }
  EXPECT_EQ(c.matcher.num_tokens(), 0);
}

TEST(StructuredSpec, TentativeMatcherRollsBackAcrossTermination) {
  st::SequenceMatcher m(regex_grammar("[0-9]{3}-[0-9]{4}"), small_tokenizer(), {kEos}, false);
  std::vector<int32_t> ids;
  ASSERT_TRUE(small_tokenizer().encode("123-4567", ids).is_ok());
  std::vector<int32_t> before(size_t((kVocab + 31) / 32)), after(before.size());
  m.fill_bitmask(before);
  {
    st::TentativeMatcher tm(&m, kVocab);
    for (int32_t t : ids) tm.push(t);
    const auto end = tm.mask();
    ASSERT_FALSE(end.empty());
    EXPECT_TRUE(allowed(end, kEos));
    tm.push(kEos);
    EXPECT_TRUE(m.terminated());
    EXPECT_TRUE(tm.mask().empty());  // nothing left to constrain
    EXPECT_FALSE(m.violated());
  }
  EXPECT_EQ(m.num_tokens(), 0);
  EXPECT_FALSE(m.terminated());
  m.fill_bitmask(after);
  EXPECT_EQ(before, after);
}

// ---- end to end ----

dsinfer::EngineOptions options(const std::string& spec) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 1024;
  o.seed = 7;
  o.speculative = spec;
  o.speculative_cost_model = "off";  // every draft verified (the cpu fallback verifies none for greedy requests)
  return o;
}

json chat_body(const std::string& content, json extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"thinking", {{"type", "disabled"}}}, {"max_tokens", 120}};
  b.update(extra);
  return b;
}

json completion_body(const std::string& prompt, json extra) {
  json b = {{"prompt", prompt}, {"max_tokens", 120}};
  b.update(extra);
  return b;
}

const json& person_schema() {
  static const json s = json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 99}, "tags": {"type": "array", "items": {"type": "string",
      "enum": ["a", "b"]}, "minItems": 1, "maxItems": 2}}, "required": ["name", "age", "tags"]})");
  return s;
}

struct Outcome {
  std::map<std::string, std::vector<dsinfer::Completion>> by_case;
  dsinfer::SpeculativeMetrics metrics;
};

Outcome run(const std::string& spec, const std::map<std::string, json>& bodies) {
  Outcome out;
  std::string err;
  auto e = dsinfer::Engine::create(options(spec), &err);
  EXPECT_TRUE(e) << err;
  if (!e) return out;
  std::map<uint64_t, std::string> name_of;
  for (const auto& [name, b] : bodies) {
    const uint64_t id = e->submit(b.dump(), &err);
    EXPECT_NE(id, 0u) << name << ": " << err;
    name_of[id] = name;
  }
  std::vector<dsinfer::RequestResult> results;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  for (auto& r : results) {
    EXPECT_TRUE(r.error.empty()) << name_of[r.id] << ": " << r.error;
    out.by_case[name_of[r.id]] = std::move(r.completions);
  }
  out.metrics = e->speculative_metrics();
  return out;
}

std::map<std::string, json> greedy_cases() {
  const json pt = json::parse(R"({"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "integer",
      "minimum": -50, "maximum": 50}})");
  return {
      {"schema-chat", chat_body("A person as JSON.", {{"response_format", {{"type", "json_schema"},
          {"json_schema", {{"name", "p"}, {"schema", person_schema()}, {"strict", true}}}}}, {"temperature", 0}})},
      {"schema-completion-n2", completion_body("JSON:", {{"guided_json", person_schema()}, {"temperature", 0}, {"n", 2},
                                                            {"max_tokens", 300}})},
      {"array", completion_body("def f(x):\n    return [", {{"guided_json", pt}, {"temperature", 0}})},
      {"json-object", chat_body("Any JSON object.", {{"response_format", {{"type", "json_object"}}}, {"temperature", 0},
                                                     {"max_tokens", 60}})},
      {"regex", completion_body("Phone:", {{"guided_regex", "[0-9]{3}-[0-9]{4}"}, {"temperature", 0}})},
      {"choice", completion_body("Pick:", {{"guided_choice", {"north", "south", "east"}}, {"temperature", 0}})},
      {"ebnf", completion_body("Sum:", {{"guided_grammar", "root ::= num (\"+\" num){1,2}\nnum ::= [1-9] [0-9]?"},
                                        {"temperature", 0}})},
      {"stop", completion_body("Id:", {{"guided_regex", "[a-z]{2};[a-z]{2}"}, {"stop", {";"}}, {"temperature", 0}})},
      // logit_bias on </think> (id 3029) makes the tiny model close its reasoning after a few tokens.
      {"thinking", chat_body("A person as JSON.", {{"thinking", {{"type", "enabled"}}}, {"guided_json", person_schema()},
          {"logit_bias", {{"3029", 16}}}, {"temperature", 0}})},
  };
}

void expect_same(const Outcome& plain, const Outcome& spec, const std::string& method) {
  ASSERT_EQ(plain.by_case.size(), spec.by_case.size());
  for (const auto& [name, cs] : plain.by_case) {
    const auto it = spec.by_case.find(name);
    ASSERT_NE(it, spec.by_case.end()) << name;
    ASSERT_EQ(cs.size(), it->second.size()) << name;
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_EQ(cs[i].token_ids, it->second[i].token_ids) << method << " " << name << " #" << i << ": " << cs[i].text
                                                          << " vs " << it->second[i].text;
      EXPECT_EQ(cs[i].finish_reason, it->second[i].finish_reason) << method << " " << name;
      EXPECT_EQ(cs[i].reasoning, it->second[i].reasoning) << method << " " << name;
    }
  }
  EXPECT_GT(spec.metrics.drafted_tokens, 0) << method;
  EXPECT_GT(spec.metrics.accepted_tokens, 0) << method;  // the drafts did take part
}

TEST(StructuredSpec, GreedyConstrainedOutputWithDsparkAndMtp1EqualsPlain) {
  const auto bodies = greedy_cases();
  const Outcome plain = run("off", bodies);
  // The plain run is itself valid (so equality below means valid outputs, not equal garbage).
  ASSERT_EQ(plain.by_case.size(), bodies.size());
  for (const auto& [name, cs] : plain.by_case)
    for (const auto& c : cs) {
      EXPECT_EQ(c.finish_reason, "stop") << name << ": " << c.text;
      if (name.rfind("schema", 0) == 0 || name == "thinking" || name == "array" || name == "json-object") {
        EXPECT_TRUE(json::accept(c.text)) << name << ": " << c.text;
      }
    }
  EXPECT_FALSE(plain.by_case.at("thinking")[0].reasoning.empty());
  expect_same(plain, run("dspark", bodies), "dspark");
  expect_same(plain, run("mtp1", bodies), "mtp1");
}

TEST(StructuredSpec, SampledConstrainedOutputsUnderDsparkAreValid) {
  const json pt = json::parse(R"({"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer",
      "minimum": -5, "maximum": 5}})");
  const std::map<std::string, json> bodies = {
      {"schema", completion_body("JSON:", {{"guided_json", person_schema()}, {"temperature", 0.9}, {"seed", 3}, {"n", 3}})},
      {"point", chat_body("Two numbers.", {{"structured_outputs", {{"json", pt}}}, {"temperature", 1.0}, {"seed", 5}, {"n", 2}})},
      {"regex", completion_body("Phone:", {{"guided_regex", "[0-9]{3}-[0-9]{4}"}, {"temperature", 1.2}, {"seed", 2}, {"n", 3}})},
      {"choice", completion_body("Color:", {{"guided_choice", {"red", "green", "blue", "cyan"}}, {"temperature", 2.0},
                                            {"seed", 11}, {"n", 6}})},
      {"thinking", chat_body("A person as JSON.", {{"thinking", {{"type", "enabled"}}}, {"guided_json", person_schema()},
          {"logit_bias", {{"3029", 16}}}, {"temperature", 0.8}, {"seed", 4}, {"n", 2},
          // sampled reasoning + grammar-allowed whitespace can outrun 120 tokens (the retrained drafter's draws did)
          {"max_tokens", 400}})},
  };
  const Outcome o = run("dspark", bodies);
  ASSERT_EQ(o.by_case.size(), bodies.size());
  EXPECT_GT(o.metrics.accepted_tokens, 0);
  std::set<std::string> colors;
  for (const auto& [name, cs] : o.by_case) {
    for (const auto& c : cs) {
      SCOPED_TRACE(name + ": " + c.text);
      EXPECT_EQ(c.finish_reason, "stop");
      if (name == "schema" || name == "thinking") {
        const json v = json::parse(c.text, nullptr, false);
        ASSERT_TRUE(v.is_object());
        EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 12);
        EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 0 && v["age"] <= 99);
        ASSERT_TRUE(v["tags"].is_array());
        EXPECT_TRUE(v["tags"].size() >= 1 && v["tags"].size() <= 2);
        for (const json& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b");
        EXPECT_EQ(v.size(), 3u);
      } else if (name == "point") {
        const json v = json::parse(c.text, nullptr, false);
        ASSERT_TRUE(v.is_array());
        ASSERT_EQ(v.size(), 2u);
        for (const json& x : v) EXPECT_TRUE(x.is_number_integer() && x >= -5 && x <= 5);
      } else if (name == "regex") {
        EXPECT_TRUE(std::regex_match(c.text, std::regex("[0-9]{3}-[0-9]{4}")));
      } else if (name == "choice") {
        EXPECT_TRUE(c.text == "red" || c.text == "green" || c.text == "blue" || c.text == "cyan");
        colors.insert(c.text);
      }
    }
  }
  EXPECT_GE(colors.size(), 2u);
}

}  // namespace
