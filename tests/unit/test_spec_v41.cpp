// DSpark speculative decoding on DeepSeek-V4.1 (CPU reference engine): tiny-v41-b with a one-stage drafter of random
// weights in the V4.1 layout (tests/unit/v41_model_util.h). Lossless: greedy output with DSpark equals greedy output
// without it, token for token, alone and in mixed batches with chunked prefill, and under the confidence schedule;
// the drafter really drafts (proposals counted) and its confidence head reaches the schedule (fewer verified tokens
// with a budget). A random drafter is rarely right, so acceptance is reported, not asserted.
#include <gtest/gtest.h>

#include <map>

#include "api/request.h"
#include "engine/engine.h"
#include "test_util.h"
#include "v41_model_util.h"

using namespace dsinfer;

namespace {

struct SpecRun {
  std::vector<std::vector<int32_t>> tokens;
  SpeculativeMetrics metrics;
};

const test::ScratchDir& model_dir() {
  static const test::ScratchDir dir("v41_spec_model");
  static const std::string ok = test::write_v41_with_drafter(test::own_fixture("tiny-v41-b"), dir.path, 11);
  EXPECT_FALSE(ok.empty()) << "could not write the V4.1 model with a drafter";
  return dir;
}

EngineOptions options(const std::string& spec, int32_t max_seqs, int64_t budget_tokens) {
  static const test::ScratchDir tok_dir("v41_spec_tok");
  static const std::string tok = test::byte_tokenizer(tok_dir.path);
  EngineOptions o;
  o.model_dir = model_dir().str();
  o.tokenizer_path = tok;
  o.numerics = "hf";
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = budget_tokens;
  o.max_model_len = 96;
  o.seed = 5;
  o.speculative = spec;
  o.speculative_cost_model = "off";  // every draft verified (up to the budget): these tests exercise verification
  return o;
}

std::vector<nlohmann::json> bodies() {
  std::vector<nlohmann::json> out;
  for (int i = 0; i < 6; ++i) {
    nlohmann::json prompt = nlohmann::json::array();
    for (int k = 0; k < 3 + (i * 13) % 40; ++k) prompt.push_back(3 + (i * 41 + k * 17) % 500);
    out.push_back({{"prompt", prompt}, {"max_tokens", 10 + i % 4}, {"temperature", 0.0}, {"ignore_eos", true}});
  }
  return out;
}

SpecRun run(const EngineOptions& o, const std::vector<nlohmann::json>& reqs) {
  SpecRun rr;
  auto e = engine::Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return rr;
  std::map<scheduler::RequestId, size_t> idx;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request r;
    EXPECT_TRUE(api::parse_request_body(nlohmann::ordered_json::parse(reqs[i].dump()), std::nullopt, r).is_ok());
    auto id = (*e)->add(r);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    idx[*id] = i;
  }
  rr.tokens.resize(reqs.size());
  for (int guard = 0; (*e)->has_unfinished() && guard < 10000; ++guard) {
    const Status s = (*e)->step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    for (auto& r : (*e)->take_finished()) rr.tokens[idx[r.id]] = r.choices.at(0).token_ids;
  }
  rr.metrics = (*e)->speculative_metrics();
  return rr;
}

}  // namespace

TEST(V41Spec, DsparkGreedyEqualsPlainAloneAndInMixedBatches) {
  const auto reqs = bodies();
  const SpecRun plain = run(options("off", 6, 4096), reqs);
  const SpecRun mixed = run(options("dspark", 6, 24), reqs);  // chunked prefill mixed with verify blocks
  ASSERT_EQ(plain.tokens.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(mixed.tokens[i], plain.tokens[i]) << "request " << i << " (mixed)";
    EXPECT_EQ(plain.tokens[i].size(), size_t(reqs[i]["max_tokens"].get<int>()));
    const SpecRun alone = run(options("dspark", 1, 4096), {reqs[i]});
    EXPECT_EQ(alone.tokens.at(0), plain.tokens[i]) << "request " << i << " (alone)";
  }
  EXPECT_EQ(mixed.metrics.method, "dspark");
  EXPECT_GT(mixed.metrics.drafted_tokens, 0);
  std::printf("V4.1 DSpark (random drafter): %lld drafted, %lld accepted, mean accepted length %.3f\n",
              (long long)mixed.metrics.drafted_tokens, (long long)mixed.metrics.accepted_tokens,
              mixed.metrics.mean_accepted_length());
}

TEST(V41Spec, ConfidenceScheduleKeepsGreedyOutputAndVerifiesFewerTokens) {
  const auto reqs = bodies();
  const SpecRun plain = run(options("off", 6, 4096), reqs);
  EngineOptions o = options("dspark", 6, 4096);
  const SpecRun all = run(o, reqs);
  o.speculative_budget = 6;
  o.speculative_min_survival = 0.2;
  const SpecRun sched = run(o, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(all.tokens[i], plain.tokens[i]) << "request " << i;
    EXPECT_EQ(sched.tokens[i], plain.tokens[i]) << "request " << i << " (scheduled)";
  }
  EXPECT_LT(sched.metrics.verified_tokens, all.metrics.verified_tokens);
}

TEST(V41Spec, Mtp1IsRefusedByName) {
  const auto e = engine::Engine::create(options("mtp1", 2, 4096));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("no MTP-1 drafter"), std::string::npos) << e.status().message();
}
