// Speculative decoding end to end on the shipped small model (models/dsv4-small, CPU reference): greedy output
// with the DSpark drafter (and with MTP-1) equals greedy output without speculation token for token, for 50
// prompts alone and in mixed batches with chunked prefill and forced preemption, also under the confidence
// schedule; seeded sampling is reproducible and independent of the batch; speculative sampling reproduces the
// target's distribution of short continuations (two-sample chi-square against the plain sampler).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "api/request.h"
#include "engine/engine.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace dsinfer;
using nlohmann::json;

namespace {

std::string model_dir() { return test::source_dir() + "/models/dsv4-small"; }

EngineOptions options(const std::string& spec, int32_t max_seqs, int64_t budget_tokens, double state_gb = 0) {
  EngineOptions o;
  o.model_dir = model_dir();
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = budget_tokens;
  o.max_model_len = 160;
  o.seed = 3;
  o.state_memory_gb = state_gb;
  o.speculative = spec;
  o.speculative_cost_model = "off";  // every draft verified: these tests exercise verification
  return o;
}

// 50 prompts of 12..60 tokens: windows of this repository's Python sources (the model was trained on code).
const std::vector<std::vector<int32_t>>& prompts() {
  static std::vector<std::vector<int32_t>> out;
  if (!out.empty()) return out;
  auto tok = tokenizer::Tokenizer::from_file(model_dir() + "/tokenizer.json");
  EXPECT_TRUE(tok.is_ok());
  std::string text;
  for (const char* f : {"/tools/train/arch.py", "/tools/train/evaluate.py", "/tools/train/train.py"}) {
    std::ifstream in(test::source_dir() + f);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  auto ids = (*tok)->encode(text);
  EXPECT_TRUE(ids.is_ok());
  const std::vector<int32_t>& all = *ids;
  for (size_t i = 0; i < 50; ++i) {
    const size_t len = 12 + (i * 7) % 49, start = (i * 397) % (all.size() - len);
    std::vector<int32_t> p{0};  // BOS
    p.insert(p.end(), all.begin() + int64_t(start), all.begin() + int64_t(start + len));
    out.push_back(std::move(p));
  }
  return out;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;  // per request, first choice
  std::vector<std::string> text, finish;     // its text and finish reason
  std::vector<std::vector<std::pair<float, size_t>>> logprobs;  // (logprob, number of alternatives) per token
  int64_t preemptions = 0;
  SpeculativeMetrics metrics;
};

RunResult run(const EngineOptions& o, const std::vector<json>& bodies) {
  RunResult rr;
  auto e = engine::Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return rr;
  std::map<scheduler::RequestId, size_t> idx;
  for (size_t i = 0; i < bodies.size(); ++i) {
    Request r;
    EXPECT_TRUE(api::parse_request_body(nlohmann::ordered_json::parse(bodies[i].dump()), std::nullopt, r).is_ok());
    auto id = (*e)->add(r);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    idx[*id] = i;
  }
  rr.tokens.resize(bodies.size());
  rr.text.resize(bodies.size());
  rr.finish.resize(bodies.size());
  rr.logprobs.resize(bodies.size());
  for (int guard = 0; (*e)->has_unfinished() && guard < 100000; ++guard) {
    Status s = (*e)->step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) break;
    for (auto& r : (*e)->take_finished()) {
      const size_t i = idx[r.id];
      rr.tokens[i] = r.choices[0].token_ids;
      rr.text[i] = r.choices[0].text;
      rr.finish[i] = r.choices[0].finish_reason;
      for (const auto& lp : r.choices[0].logprobs) rr.logprobs[i].push_back({lp.logprob, lp.top.size()});
    }
  }
  rr.preemptions = (*e)->stats().num_preemptions;
  rr.metrics = (*e)->speculative_metrics();
  return rr;
}

// Greedy requests with the output controls that must behave exactly as without speculation: stop strings,
// min_tokens, penalties, logit_bias, logprobs.
std::vector<json> greedy_bodies(int max_tokens) {
  std::vector<json> b;
  for (size_t i = 0; i < prompts().size(); ++i) {
    json body = {{"prompt", prompts()[i]}, {"max_tokens", max_tokens}, {"temperature", 0.0}};
    if (i % 5 == 1) body["stop"] = json::array({"\n", "(", "self"});
    if (i % 5 == 2) body.update({{"min_tokens", 6}, {"stop_token_ids", json::array({11, 13})}});
    if (i % 5 == 3) body.update({{"frequency_penalty", 0.5}, {"repetition_penalty", 1.2}, {"logit_bias", {{"223", 3.0}}}});
    if (i % 5 == 4) body.update({{"logprobs", true}, {"top_logprobs", 3}});
    b.push_back(body);
  }
  return b;
}

double tight_state_gb(const std::string& spec, int32_t k) {
  auto probe = engine::Engine::create(options("off", 4, 64));
  EXPECT_TRUE(probe.is_ok());
  cache::StateCacheConfig cc;
  cc.max_num_seqs = 16;
  cc.max_model_len = 160;
  cc.kv_elem_bytes = 4;
  cc.num_speculative_tokens = spec == "off" ? 0 : k;
  auto layout = cache::compute_state_layout((*probe)->model_config(), cc);
  EXPECT_TRUE(layout.is_ok());
  // 16 slots but token blocks for two max-length sequences only: running sequences outgrow them.
  return double(16 * layout->slot_bytes + 2 * layout->blocks_per_sequence(160) * layout->block_bytes) /
         double(int64_t(1) << 30);
}

const RunResult& plain_greedy() {
  static RunResult r = run(options("off", 64, 4096), greedy_bodies(16));
  return r;
}

void expect_same(const RunResult& a, const RunResult& b, const char* what) {
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << what << ", prompt " << i;
    EXPECT_EQ(a.text[i], b.text[i]) << what << ", prompt " << i;
    EXPECT_EQ(a.finish[i], b.finish[i]) << what << ", prompt " << i;
    EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << what << ", prompt " << i;
  }
}

}  // namespace

TEST(SpecEngine, DsparkGreedyEqualsPlainAloneAndInMixedBatchesWithPreemption) {
  const RunResult& plain = plain_greedy();
  const RunResult alone = run(options("dspark", 1, 4096), greedy_bodies(16));
  expect_same(plain, alone, "dspark alone");
  EXPECT_GT(alone.metrics.accepted_tokens, 0);
  EXPECT_GT(alone.metrics.mean_accepted_length(), 1.0);
  const RunResult mixed = run(options("dspark", 16, 48, tight_state_gb("dspark", 5)), greedy_bodies(16));
  expect_same(plain, mixed, "dspark mixed + preemption");
  EXPECT_GT(mixed.preemptions, 0);
  std::printf("dspark greedy: mean accepted length %.3f, %lld rounds, acceptance per position", 
              alone.metrics.mean_accepted_length(), (long long)alone.metrics.rounds);
  for (size_t k = 0; k < alone.metrics.trials_per_position.size(); ++k)
    std::printf(" %.3f", double(alone.metrics.accepted_per_position[k]) / double(std::max<int64_t>(1, alone.metrics.trials_per_position[k])));
  std::printf("\n");
}

TEST(SpecEngine, Mtp1GreedyEqualsPlainAloneAndInMixedBatchesWithPreemption) {
  const RunResult& plain = plain_greedy();
  const RunResult alone = run(options("mtp1", 1, 4096), greedy_bodies(16));
  expect_same(plain, alone, "mtp1 alone");
  const RunResult mixed = run(options("mtp1", 16, 48, tight_state_gb("mtp1", 1)), greedy_bodies(16));
  expect_same(plain, mixed, "mtp1 mixed + preemption");
  EXPECT_GT(mixed.preemptions, 0);
  std::printf("mtp1 greedy: mean accepted length %.3f, acceptance %.3f\n", alone.metrics.mean_accepted_length(),
              double(alone.metrics.accepted_per_position[0]) / double(std::max<int64_t>(1, alone.metrics.trials_per_position[0])));
}

TEST(SpecEngine, ConfidenceScheduleKeepsGreedyOutputAndVerifiesFewerTokens) {
  const RunResult& plain = plain_greedy();
  EngineOptions o = options("dspark", 16, 4096);
  const RunResult all = run(o, greedy_bodies(16));
  o.speculative_budget = 12;
  o.speculative_min_survival = 0.25;
  const RunResult sched = run(o, greedy_bodies(16));
  expect_same(plain, sched, "dspark confidence-scheduled");
  const double per_all = double(all.metrics.verified_tokens) / double(all.metrics.emitted_tokens);
  const double per_sched = double(sched.metrics.verified_tokens) / double(sched.metrics.emitted_tokens);
  std::printf("verified per emitted token: all drafts %.3f (accepted length %.3f), scheduled %.3f (%.3f)\n", per_all,
              all.metrics.mean_accepted_length(), per_sched, sched.metrics.mean_accepted_length());
  EXPECT_LT(per_sched, per_all);
}

// The step cost model's schedule (speculative/verify_plan.h) in batches with chunked prefill and forced preemption:
// a hand-written table where a verified row costs 0.3 of a decode step at batch 1 and 0.9 at batch 16, drafting
// free (a fixed "draft" line: the CPU drafter's measured milliseconds would not be in the table's units).
// Greedy output stays identical to no speculation, with fewer verified drafts than verifying every draft.
TEST(SpecEngine, CostModelScheduleKeepsGreedyOutputAndVerifiesFewerTokens) {
  const RunResult& plain = plain_greedy();
  const test::ScratchDir dir("spec_cost");
  const std::string file = dir.str() + "/cost.txt";
  std::ofstream(file) << "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 1.3 1.6 1.9 2.2 2.5\n"
                         "seqs 16 2 3.8 5.6 7.4 9.2 11\ndraft 0 0\n";
  EngineOptions o = options("dspark", 16, 48, tight_state_gb("dspark", 5));
  const RunResult all = run(o, greedy_bodies(16));
  o.speculative_cost_model = file;
  const RunResult sched = run(o, greedy_bodies(16));
  expect_same(plain, sched, "dspark cost-model schedule, mixed + preemption");
  EXPECT_GT(sched.preemptions, 0);
  EXPECT_GT(sched.metrics.scheduled_rounds, 0);
  EXPECT_GT(sched.metrics.accepted_tokens, 0);
  EXPECT_LT(sched.metrics.verified_tokens - sched.metrics.rounds, all.metrics.verified_tokens - all.metrics.rounds);
  std::printf("drafts verified per round: all %.3f (accepted length %.3f), cost model %.3f (%.3f)\n",
              double(all.metrics.verified_tokens - all.metrics.rounds) / double(all.metrics.rounds),
              all.metrics.mean_accepted_length(),
              double(sched.metrics.verified_tokens - sched.metrics.rounds) / double(sched.metrics.rounds),
              sched.metrics.mean_accepted_length());
}

// The cpu backend's fallback cost model (a step's time proportional to its tokens): no greedy draft pays, so greedy
// requests are plain decode steps (nothing drafted or verified) with identical output; seeded sampled requests
// still draft and verify every draft (their tokens depend on how many drafts are verified, which must not depend
// on the batch or measured times).
TEST(SpecEngine, CpuFallbackCostModelDraftsNothingForGreedy) {
  const RunResult& plain = plain_greedy();
  EngineOptions o = options("dspark", 64, 4096);
  o.speculative_cost_model = "auto";
  const RunResult r = run(o, greedy_bodies(16));
  expect_same(plain, r, "dspark, cpu fallback cost model");
  EXPECT_EQ(r.metrics.drafted_tokens, 0);
  EXPECT_EQ(r.metrics.verified_tokens, r.metrics.rounds);
  std::vector<json> b;
  for (size_t i = 0; i < 4; ++i)
    b.push_back({{"prompt", prompts()[i]}, {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 7 + int(i)},
                 {"ignore_eos", true}});
  const RunResult s = run(o, b), s_off = run(options("dspark", 64, 4096), b);
  expect_same(s_off, s, "seeded sampling, cpu fallback vs every draft verified");
  EXPECT_GT(s.metrics.drafted_tokens, 0);
}

// Speculation at rest and back (speculator.h): a table where drafting pays only for one running sequence. While
// six greedy requests run, the engine takes plain steps without any drafter work (no ingest either); when the long
// one runs alone it drafts again, after the drafter has ingested a context window past the positions it skipped.
// Output identical to no speculation; drafts proposed and accepted only in the tail.
TEST(SpecEngine, DraftingResumesAfterRestWithTheSameOutput) {
  const test::ScratchDir dir("spec_resume");
  const std::string file = dir.str() + "/cost.txt";
  std::ofstream(file) << "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 1.05 1.1 1.15 1.2 1.25\n"
                         "seqs 2 1 50 50 50 50 50\ndraft 0.05 50\n";
  std::vector<json> b;
  for (size_t i = 0; i < 6; ++i)
    b.push_back({{"prompt", prompts()[i]}, {"max_tokens", i == 0 ? 90 : 6}, {"temperature", 0.0},
                 {"ignore_eos", true}, {"logprobs", true}});
  EngineOptions o = options("dspark", 16, 256);
  o.speculative_cost_model = file;
  const RunResult r = run(o, b);
  expect_same(run(options("off", 16, 256), b), r, "dspark at rest, then drafting");
  EXPECT_GT(r.metrics.drafted_tokens, 0);
  EXPECT_GT(r.metrics.accepted_tokens, 0);
  // Drafting only after the short requests ended and the long one's context window (64) was ingested again: at
  // most 90 - 6 - 64 rounds of at most 5 drafts.
  EXPECT_LE(r.metrics.drafted_tokens, (90 - 6 - 64) * 5);
}

TEST(SpecEngine, SeededSamplingIsReproducibleAndBatchInvariant) {
  std::vector<json> b;
  for (size_t i = 0; i < 12; ++i)
    b.push_back({{"prompt", prompts()[i]}, {"max_tokens", 16}, {"temperature", 0.9}, {"top_p", 0.95},
                 {"seed", 100 + int(i)}, {"ignore_eos", true}, {"logprobs", true}});
  const RunResult a = run(options("dspark", 16, 4096), b), again = run(options("dspark", 16, 4096), b);
  expect_same(a, again, "rerun");
  const RunResult alone = run(options("dspark", 1, 4096), b);
  expect_same(a, alone, "alone vs batch");
  for (const auto& t : a.tokens) EXPECT_EQ(t.size(), 16u);
}

TEST(SpecEngine, SpeculativeSamplingMatchesThePlainSamplersDistribution) {
  // 3-token continuations of one prompt under top_k 3, temperature 1: 800 seeds with DSpark vs 800 without; a
  // two-sample chi-square test of homogeneity over the continuations (rare ones pooled).
  std::vector<json> b;
  const std::vector<int32_t> prompt(prompts()[3].begin(), prompts()[3].begin() + 10);
  for (int i = 0; i < 800; ++i)
    b.push_back({{"prompt", prompt}, {"max_tokens", 3}, {"temperature", 1.0}, {"top_k", 3}, {"seed", 5000 + i},
                 {"ignore_eos", true}});
  const RunResult spec = run(options("dspark", 64, 4096), b), plain = run(options("off", 64, 4096), b);
  std::map<std::vector<int32_t>, std::pair<double, double>> c;
  for (size_t i = 0; i < b.size(); ++i) {
    c[spec.tokens[i]].first += 1;
    c[plain.tokens[i]].second += 1;
  }
  EXPECT_GT(spec.metrics.accepted_tokens, 0);
  double chi = 0, pool_a = 0, pool_b = 0;
  int cells = 0;
  auto add = [&](double x, double y) {
    const double e = (x + y) / 2;
    chi += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
    ++cells;
  };
  for (const auto& [seq, ab] : c) {
    if (ab.first + ab.second < 10) { pool_a += ab.first; pool_b += ab.second; continue; }
    add(ab.first, ab.second);
  }
  if (pool_a + pool_b > 0) add(pool_a, pool_b);
  const double df = cells - 1, z = 3.09;  // 99.9 % quantile (Wilson-Hilferty)
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi, crit) << cells << " cells";
}
