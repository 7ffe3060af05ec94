// The engine end to end on the CPU backend (tiny random model): many mixed requests in one run give exactly
// the tokens each gives alone (greedy and seeded sampling), whatever the chunking, batch and preemption.
#include <gtest/gtest.h>

#include <map>

#include "api/request.h"
#include "engine/engine.h"
#include "test_util.h"

using namespace dsinfer;
using nlohmann::json;

namespace {

EngineOptions config(int32_t max_seqs, int64_t budget_tokens, double state_gb = 0) {
  EngineOptions c;
  c.model_dir = test::own_fixture("tiny-v4-c");
  c.numerics = "official";
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget_tokens;
  c.max_model_len = 96;
  c.seed = 42;
  c.state_memory_gb = state_gb;
  return c;
}

// The request path of every edge: body -> typed Request (api::parse_request_body) -> Engine::add.
Result<scheduler::RequestId> add(engine::Engine& e, const json& body) {
  Request r;
  DSI_RETURN_IF_ERROR(api::parse_request_body(nlohmann::ordered_json::parse(body.dump()), std::nullopt, r));
  return e.add(r);
}

std::vector<json> mixed_requests() {
  std::vector<json> out;
  for (int i = 0; i < 18; ++i) {
    json prompt = json::array();
    const int len = 1 + (i * 7) % 41;
    for (int k = 0; k < len; ++k) prompt.push_back(2 + (i * 31 + k * 17) % 250);
    json body = {{"prompt", prompt}, {"max_tokens", 3 + i % 9}};
    if (i % 2) body.update({{"temperature", 0.9}, {"top_p", 0.95}, {"seed", 1000 + i}});
    else body["temperature"] = 0.0;
    if (i % 5 == 0) body["n"] = 2;
    if (i % 6 == 1) body["ignore_eos"] = true;
    out.push_back(body);
  }
  return out;
}

// Runs `bodies` together; returns each request's choices' token ids, in request order.
std::vector<std::vector<std::vector<int32_t>>> run(const EngineOptions& cfg, const std::vector<json>& bodies,
                                                   int64_t* preemptions = nullptr) {
  auto e = test::unwrap(engine::Engine::create(cfg));  // a setup error ends the test with the reason
  std::map<scheduler::RequestId, size_t> idx;
  for (size_t i = 0; i < bodies.size(); ++i) idx[test::unwrap(add(*e, bodies[i]))] = i;
  std::vector<std::vector<std::vector<int32_t>>> out(bodies.size());
  int guard = 0;
  while (e->has_unfinished() && guard++ < 10000) {
    Status s = e->step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    for (auto& r : e->take_finished())
      for (auto& c : r.choices) out[idx[r.id]].push_back(c.token_ids);
  }
  if (preemptions) *preemptions = e->stats().num_preemptions;
  return out;
}

}  // namespace

TEST(Engine, MixedBatchEqualsEachRequestAlone) {
  const auto bodies = mixed_requests();
  const auto together = run(config(16, 24), bodies);  // chunked prefill mixed with decode
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto alone = run(config(4, 4096), {bodies[i]});  // whole prompt in one step
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(together[i], alone[0]) << "request " << i << ": " << bodies[i].dump();
    EXPECT_EQ(together[i].size(), size_t(bodies[i].value("n", 1)));
    for (const auto& c : together[i]) EXPECT_LE(c.size(), size_t(bodies[i]["max_tokens"].get<int>()));
  }
}

TEST(Engine, TinyStateBudgetForcesPreemptionButOutputsAreIdentical) {
  const auto bodies = mixed_requests();
  const auto roomy = run(config(16, 64), bodies);
  // Room for few sequences' blocks at once: the scheduler must preempt and recompute.
  auto probe = engine::Engine::create(config(16, 64));
  ASSERT_TRUE(probe.is_ok());
  auto tight_cfg = config(16, 64, 0);
  {
    cache::StateCacheConfig cc;
    cc.max_num_seqs = 16;
    cc.max_model_len = 96;
    cc.kv_elem_bytes = 4;
    auto layout = cache::compute_state_layout((*probe)->model_config(), cc);
    ASSERT_TRUE(layout.is_ok());
    tight_cfg.state_memory_gb = double(3 * layout->bytes_per_sequence(96)) / double(int64_t(1) << 30);
  }
  int64_t preemptions = 0;
  const auto tight = run(tight_cfg, bodies, &preemptions);
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(tight, roomy);
}

TEST(Engine, SeededSamplesDifferAcrossNButRepeatAcrossRuns) {
  json body = {{"prompt", json::array({5, 6, 7})}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"n", 3},
               {"ignore_eos", true}};
  const auto a = run(config(8, 64), {body}), b = run(config(8, 64), {body});
  ASSERT_EQ(a[0].size(), 3u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0][0], a[0][1]);
  EXPECT_NE(a[0][1], a[0][2]);
}

TEST(Engine, BadRequestsAreRejectedWithTheReason) {
  auto e = engine::Engine::create(config(4, 64));
  ASSERT_TRUE(e.is_ok());
  auto expect_err = [&](const json& body, const std::string& needle) {
    auto r = add(**e, body);
    ASSERT_FALSE(r.is_ok()) << body.dump();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_err(json::array(), "must be a JSON object");
  expect_err({{"max_tokens", 3}}, "needs 'prompt'");
  expect_err({{"prompt", "text"}}, "needs a tokenizer");
  expect_err({{"messages", json::array()}}, "\"messages\" is empty");
  expect_err({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, "needs a tokenizer");
  expect_err({{"prompt", json::array({1, -2})}}, "'prompt'[1] = -2 is not a valid token id");
  expect_err({{"prompt", json::array({1, 400})}}, "prompt token 400 (index 1) is outside the vocabulary");
  expect_err({{"prompt", json::array()}}, "prompt is empty");
  json long_prompt = json::array();
  for (int i = 0; i < 96; ++i) long_prompt.push_back(3);
  expect_err({{"prompt", long_prompt}}, "max_model_len is 96");
  expect_err({{"prompt", json::array({1})}, {"top_p", 1.5}}, "top_p");
  expect_err({{"prompt", json::array({1})}, {"stop", "x"}}, "'stop' strings need a tokenizer");
  EXPECT_FALSE((*e)->has_unfinished());
}
