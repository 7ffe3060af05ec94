// Prefix caching (cache/prefix_cache.h, scheduler_prefix.cpp): the block table never lets a request read a block
// whose tokens it does not share (even when every key collides), and exact mode gives the outputs of no caching
// -- greedy and seeded, prefixes shared in any order, under eviction pressure -- on the fixtures and the shipped
// model, through the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "api/request.h"
#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "prefix_test_util.h"
#include "test_util.h"

using namespace dsinfer;
using nlohmann::json;
using namespace dsinfer::prefix_test;

TEST(PrefixCache, OneTokenDifferenceAtEveryPositionNeverSharesTheBlock) {
  for (const uint64_t mask : {~uint64_t(0), uint64_t(0), uint64_t(3)}) {  // real keys; all collide; 4 keys
    cache::PrefixCacheConfig cfg;
    cfg.mode = cache::PrefixMode::kExact;
    cfg.seed = 77;
    cfg.block_size = 16;
    cfg.hash_mask = mask;
    cache::PrefixCache pc(cfg, 64);
    cache::BlockId next = 0;
    const std::vector<int32_t> a = seq_tokens(3 * 16 + 5, 1);
    insert_chain(pc, a, &next);
    std::vector<uint64_t> ka;
    pc.extend_keys(a, ka);
    const auto full = pc.match(a, ka, 3);
    if (mask == ~uint64_t(0)) {
      EXPECT_EQ(full.blocks.size(), 3u);
    }
    for (int pos = 0; pos < 3 * 16; ++pos) {
      std::vector<int32_t> b = a;
      b[size_t(pos)] = b[size_t(pos)] + 1;
      std::vector<uint64_t> kb;
      pc.extend_keys(b, kb);
      const auto m = pc.match(b, kb, 3);
      // Only the blocks before the one holding the differing token may match, and they are a's own blocks.
      EXPECT_LE(int(m.blocks.size()), pos / 16) << "mask " << mask << " position " << pos;
      for (size_t i = 0; i < m.blocks.size(); ++i) EXPECT_EQ(m.blocks[i], full.blocks[i]);
    }
  }
}

TEST(PrefixCache, ModelIdentitySeedsTheChain) {
  cache::PrefixCacheConfig c1, c2;
  c1.block_size = c2.block_size = 16;
  c1.seed = 1;
  c2.seed = 2;
  cache::PrefixCache p1(c1, 8), p2(c2, 8);
  const std::vector<int32_t> t = seq_tokens(32, 3);
  std::vector<uint64_t> k1, k2;
  p1.extend_keys(t, k1);
  p2.extend_keys(t, k2);
  ASSERT_EQ(k1.size(), 2u);
  EXPECT_NE(k1[0], k2[0]);
  EXPECT_NE(k1[1], k2[1]);
}

TEST(PrefixCacheEngine, ExactModeEqualsNoCacheInAnyOrderOnFixturesAndShippedModel) {
  const std::vector<std::string> models = {test::own_fixture("tiny-v4-a"), test::own_fixture("tiny-v4-b"),
                                           test::source_dir() + "/models/dsv4-small"};
  for (const std::string& m : models) {
    const std::vector<json> reqs = shared_prefix_requests(200);
    std::vector<size_t> fwd(reqs.size()), rev;
    for (size_t i = 0; i < fwd.size(); ++i) fwd[i] = i;
    rev.assign(fwd.rbegin(), fwd.rend());
    const RunResult off = run_in_order(options(m, "off"), reqs, fwd);
    for (const auto& order : {fwd, rev}) {
      const RunResult on = run_in_order(options(m, "exact"), reqs, order);
      EXPECT_EQ(on.tokens, off.tokens) << m;
      EXPECT_GT(on.pm.exact_hits, 0) << m;
      EXPECT_GT(on.pm.hit_tokens, 0) << m;
      EXPECT_EQ(on.pm.bounded_hits, 0) << m;
    }
  }
}

TEST(PrefixCacheEngine, ExactModeUnderEvictionPressureAndBatchedSharing) {
  const std::string m = test::own_fixture("tiny-v4-b");
  std::vector<json> reqs = shared_prefix_requests(200);
  // Multi-turn: the second turn resends the first prompt and (a prefix of) its reply.
  const RunResult off = run_in_order(options(m, "off"), reqs, {0, 1, 2, 3, 4, 5});
  std::vector<int32_t> turn2 = reqs[5]["prompt"].get<std::vector<int32_t>>();
  turn2.insert(turn2.end(), off.tokens[5].begin(), off.tokens[5].end());
  for (int32_t t : seq_tokens(9, 40)) turn2.push_back(t);
  reqs.push_back(body(turn2, 5, 6));
  const std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6, 6, 1};
  const RunResult ref = run_in_order(options(m, "off"), reqs, {0, 1, 2, 3, 4, 5, 6});
  // Just above the smallest state budget the engine accepts (one max_model_len sequence: 81920 B here):
  // one slot and ~21 blocks, so cached blocks are evicted (LRU) again and again.
  const RunResult tight = run_in_order(options(m, "exact", 100000.0 / double(1 << 30)), reqs, order);
  EXPECT_EQ(tight.tokens, ref.tokens);
  EXPECT_GT(tight.pm.evictions, 0);
  EXPECT_GT(tight.pm.exact_hits, 0);

  // All at once (batched; n = 3 siblings and identical parallel prompts): identical outputs, and the
  // siblings' prefill is shared.
  auto batch = [&](const std::string& mode, PrefixCacheMetrics* pm) {
    auto e = test::unwrap(engine::Engine::create(options(m, mode)));
    std::map<scheduler::RequestId, size_t> idx;
    std::vector<json> bs = {reqs[2], reqs[2], reqs[4]};
    bs[2]["n"] = 3;
    for (size_t i = 0; i < bs.size(); ++i) {
      Request req;
      test::require_ok(api::parse_request_body(nlohmann::ordered_json::parse(bs[i].dump()), std::nullopt, req));
      idx[test::unwrap(e->add(req))] = i;
    }
    std::vector<std::vector<std::vector<int32_t>>> out(bs.size());
    for (int guard = 0; e->has_unfinished() && guard < 5000; ++guard) test::require_ok(e->step());
    for (auto& f : e->take_finished())
      for (auto& c : f.choices) out[idx[f.id]].push_back(c.token_ids);
    if (pm) *pm = e->prefix_stats();
    return out;
  };
  PrefixCacheMetrics pm;
  EXPECT_EQ(batch("exact", &pm), batch("off", nullptr));
  EXPECT_GT(pm.exact_hits, 0);
  EXPECT_GT(pm.deferred, 0);
}

namespace {

struct Divergence {
  double max_dlogit = 0, kl = 0;  // first generated token (right after the hit)
  double agreement = 0;           // greedy tokens equal to the cold run's
  int64_t bounded_hits = 0, replayed = 0;
};

// Generates greedily for one request; returns its tokens and each step's logits row.
std::vector<int32_t> generate(engine::Engine& e, const json& b, std::vector<std::vector<float>>* rows) {
  Request req;
  test::require_ok(api::parse_request_body(nlohmann::ordered_json::parse(b.dump()), std::nullopt, req));
  test::unwrap(e.add(req));
  std::vector<int32_t> toks;
  for (int guard = 0; e.has_unfinished() && guard < 5000; ++guard) {
    test::require_ok(e.step());
    if (rows && !e.last_logits().empty()) rows->emplace_back(e.last_logits().begin(), e.last_logits().end());
    for (auto& f : e.take_finished()) toks = f.choices.at(0).token_ids;
  }
  return toks;
}

// Cold run of `prompt` vs. a bounded-replay hit on it (after `warm` cached its blocks, without snapshots).
Divergence measure(const std::string& model, const std::vector<int32_t>& warm, const std::vector<int32_t>& prompt) {
  const int gen = 16;
  auto cold = test::unwrap(engine::Engine::create(options(model, "off")));
  std::vector<std::vector<float>> lc, lh;
  const std::vector<int32_t> tc = generate(*cold, body(prompt, gen, 0), &lc);
  auto hot = test::unwrap(engine::Engine::create(options(model, "bounded", 0, 1e-12)));  // no snapshots
  generate(*hot, body(warm, 1, 0), nullptr);
  const std::vector<int32_t> th = generate(*hot, body(prompt, gen, 0), &lh);
  Divergence d;
  d.bounded_hits = hot->prefix_stats().bounded_hits;
  d.replayed = hot->prefix_stats().replayed_tokens;
  test::require(!lc.empty() && !lh.empty() && lc[0].size() == lh[0].size(), "no logits");
  const std::vector<float>&a = lc[0], &b = lh[0];
  const float ma = *std::max_element(a.begin(), a.end()), mb = *std::max_element(b.begin(), b.end());
  double za = 0, zb = 0;
  for (size_t v = 0; v < a.size(); ++v) za += std::exp(double(a[v] - ma)), zb += std::exp(double(b[v] - mb));
  for (size_t v = 0; v < a.size(); ++v) {
    d.max_dlogit = std::max(d.max_dlogit, double(std::fabs(a[v] - b[v])));
    const double pa = std::exp(double(a[v] - ma)) / za, pb = std::exp(double(b[v] - mb)) / zb;
    if (pa > 0) d.kl += pa * (std::log(pa) - std::log(std::max(pb, 1e-300)));
  }
  int same = 0;
  for (size_t i = 0; i < tc.size() && i < th.size(); ++i) same += tc[i] == th[i];
  d.agreement = double(same) / double(gen);
  return d;
}

}  // namespace

TEST(PrefixCacheEngine, BoundedReplayDivergencePerFixtureAndShippedModel) {
  const std::vector<std::string> models = {test::own_fixture("tiny-v4-a"), test::own_fixture("tiny-v4-b"),
                                           test::source_dir() + "/models/dsv4-small"};
  for (const std::string& m : models) {
    double agree = 0, worst_kl = 0;
    for (int c = 0; c < 3; ++c) {
      const std::vector<int32_t> shared = seq_tokens(150 + 7 * c, 50 + c);
      std::vector<int32_t> warm = shared, prompt = shared;
      for (int32_t t : seq_tokens(9, 60 + c)) warm.push_back(t);
      for (int32_t t : seq_tokens(11, 70 + c)) prompt.push_back(t);
      const Divergence d = measure(m, warm, prompt);
      std::printf("[bounded replay] %s case %d: max|dlogit| %.4g, KL %.4g, greedy agreement %.3f, replayed %lld\n",
                  m.substr(m.find_last_of('/') + 1).c_str(), c, d.max_dlogit, d.kl, d.agreement, (long long)d.replayed);
      EXPECT_EQ(d.bounded_hits, 1) << m;
      EXPECT_TRUE(std::isfinite(d.max_dlogit) && std::isfinite(d.kl)) << m;
      agree += d.agreement / 3;
      worst_kl = std::max(worst_kl, d.kl);
    }
    // Per-model bounds from the measured first-token KL (CPU, deterministic; 2026-12-01, these fixtures): tiny-v4-a
    // 2.2e-5 / 5.8e-4 / 6.2e-5, tiny-v4-b 2.3e-3 / 1.0e-3 / 1.3e-3, dsv4-small 0.018 / 0.43 / 0.12 (its window is
    // 64 tokens of a trained model, so dropping the keys before it moves more). Bounds: 1e-2 for the random
    // fixtures (4.4x their worst), 1.0 for the shipped model (2.3x its worst); a replay that read garbage state
    // gives KL of order log(vocab).
    const bool shipped = m.find("dsv4-small") != std::string::npos;
    EXPECT_LT(worst_kl, shipped ? 1.0 : 1e-2) << m;
    if (shipped) {
      EXPECT_GE(agree, 0.5) << m;
    }
  }
}
