// Speculative decoding end to end on the GPU (public Engine API, --backend cuda, the shipped models/dsv4-small;
// the CPU twin is tests/unit/test_spec_engine.cpp): greedy output with the DSpark drafter (and with MTP-1) equals
// greedy output without speculation for 50 prompts, alone (one sequence: every decode step is a verify step of
// 1 + k tokens) and in mixed batches with chunked prefill and forced preemption (state memory for two
// max-length sequences, 16 running).
//
// Equality rules. With --batch-invariant (EngineOptions::batch_invariant: every kernel's reduction order is
// independent of the batch, so a verify step's rows equal a decode step's) greedy output with speculation must
// equal greedy output without it token for token. The default fast path is not batch-invariant (a GEMM's
// precision path depends on its row count: fp32 streaming up to 8 rows, bf16 tensor cores above, docs/kernels.md;
// attention splits depend on the token count), so a verify step of 1 + k rows and a decode step can round a logit
// differently; there the comparison is teacher-forced: up to a request's first difference both runs computed the
// target's distribution at that position from the same tokens, so both runs' logprobs of the two tokens are
// comparable. With a = the plain run's token and b = the speculative run's, the plain margin lp_plain(a) -
// lp_plain(b) >= 0 and the speculative margin lp_spec(b) - lp_spec(a) >= 0 sum to the change of one logit
// difference between the runs, at most 2 * max|logit_plain - logit_spec| (a logprob difference within a run is a
// logit difference). kPairMargin bounds that sum (its derivation below). A broken verify (wrong logits row, a
// rejected draft left in the state) changes the distribution by far more and fails. The bodies therefore carry no
// penalties / logit_bias (those shift the processed margin away from the raw logprobs; the CPU test covers them
// exactly).
// The mixed runs differ from the plain reference by more than their verify steps: prefill chunks of a 48-token budget
// beside 15 other sequences, preemption and recomputation. Those shapes move logits by themselves, without
// speculation. So a fast-path divergence above kPairMargin passes only where the plain engine in the same mixed
// configuration (no speculation) diverges from the reference at the same prompt and token with the same token:
// the difference is the schedule's, not verification's. Open (H200, 2026-12-02, bench/NOTES.md issue 32 second
// session): prompt 40's token 6 diverges in both mixed runs (39 vs 50, margin sums 0.84 DSpark / 0.87 MTP-1), with
// a 1,024- or 4,096-token reference step budget alike, and the plain engine in the mixed configuration does not
// reproduce it (its 7 divergences have margin sums <= 0.19); the batch-invariant runs are identical. Not loosened:
// the cause is not known yet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/state_layout.h"
#include "cuda/gpu_test_util.h"
#include "dsinfer/engine.h"
#include "dsinfer/tokenizer.h"
#include "io/config.h"
#include "test_util.h"

using nlohmann::json;

namespace {

// Fast vs exact on this model (bench/NOTES.md wave 3 fidelity, 2,048 positions): mean KL 3.3e-4, i.e. a typical
// logit perturbation sigma ~ sqrt(2 KL) ~ 0.026; the largest over a few thousand positions ~ 5 sigma ~ 0.13 per run.
// Two fast runs of different shapes each within that of the exact logits differ by up to ~0.13 with their
// correlated part (the same bf16 weights); the margin sum is at most twice that: 0.26. The tails are heavier than
// that Gaussian estimate (the same fidelity run's max |logit diff| is 2.09): on the H200 (2026-12-01) the worst pair
// over 2 x 100 sequences was 0.41 (one position), so the bound is 0.6. A confident position (margin > 1 nat, the
// usual failure of a broken verify) stays above; the exact check is the batch-invariant test below (identical).
constexpr double kPairMargin = 0.6;

std::string model_dir() { return dsinfer::test::source_dir() + "/models/dsv4-small"; }

dsinfer::EngineOptions options(const std::string& spec, int32_t max_seqs, int64_t budget_tokens, double state_gb,
                               bool invariant) {
  dsinfer::EngineOptions o;
  o.batch_invariant = invariant;
  o.speculative_cost_model = "off";  // every draft verified: these tests check verification
  o.model_dir = model_dir();
  o.backend = "cuda";
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = budget_tokens;
  o.max_model_len = 160;
  o.seed = 3;
  o.state_memory_gb = state_gb;
  o.speculative = spec;
  return o;
}

// The CPU test's 50 prompts: windows of this repository's Python sources (the model was trained on code).
const std::vector<std::vector<int32_t>>& prompts() {
  static std::vector<std::vector<int32_t>> out;
  if (!out.empty()) return out;
  std::string err;
  auto tok = dsinfer::Tokenizer::load(model_dir() + "/tokenizer.json", &err);
  EXPECT_TRUE(tok) << err;
  if (!tok) return out;
  std::string text;
  for (const char* f : {"/tools/train/arch.py", "/tools/train/evaluate.py", "/tools/train/train.py"}) {
    std::ifstream in(dsinfer::test::source_dir() + f);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  std::vector<int32_t> all;
  EXPECT_TRUE(tok->encode(text, &all, &err)) << err;
  for (size_t i = 0; i < 50 && all.size() > 120; ++i) {
    const size_t len = 12 + (i * 7) % 49, start = (i * 397) % (all.size() - len);
    std::vector<int32_t> p{0};  // BOS
    p.insert(p.end(), all.begin() + int64_t(start), all.begin() + int64_t(start + len));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> greedy_bodies(int max_tokens) {
  std::vector<std::string> b;
  for (size_t i = 0; i < prompts().size(); ++i) {
    json body = {{"prompt", prompts()[i]}, {"max_tokens", max_tokens}, {"temperature", 0.0}, {"logprobs", 5}};
    if (i % 4 == 1) body["stop"] = json::array({"\n", "(", "self"});
    if (i % 4 == 2) body.update({{"min_tokens", 6}, {"stop_token_ids", json::array({11, 13})}});
    b.push_back(body.dump());
  }
  return b;
}

struct RunResult {
  std::vector<dsinfer::Completion> out;
  int64_t preemptions = 0;
  dsinfer::SpeculativeMetrics metrics;
};

RunResult run(const dsinfer::EngineOptions& o, const std::vector<std::string>& bodies) {
  RunResult rr;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  if (!e) return rr;
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < bodies.size(); ++i) {
    const uint64_t id = e->submit(bodies[i], &err);
    EXPECT_NE(id, 0u) << err;
    idx[id] = i;
  }
  std::vector<dsinfer::RequestResult> results;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  rr.out.resize(bodies.size());
  for (auto& r : results) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    if (!r.completions.empty()) rr.out[idx[r.id]] = r.completions[0];
  }
  rr.preemptions = e->stats().num_preemptions;
  rr.metrics = e->speculative_metrics();
  return rr;
}

// Raw logprob of `token` at output position j of a plain completion (its own token or one of its top list).
double logprob_of(const dsinfer::Completion& c, size_t j, int32_t token) {
  const dsinfer::TokenLogprob& lp = c.logprobs[j];
  if (lp.token == token) return lp.logprob;
  for (const auto& [t, l] : lp.top)
    if (t == token) return l;
  return -INFINITY;
}

struct Divergences {
  int count = 0;
  double worst_margin = 0;       // the largest margin sum seen at a divergence
  std::vector<double> margins;  // every divergence's margin sum (the distribution the bound is judged against)
};

// The first token where two completions differ (the shorter length when one is a prefix of the other).
size_t first_difference(const dsinfer::Completion& a, const dsinfer::Completion& b) {
  size_t j = 0;
  while (j < a.token_ids.size() && j < b.token_ids.size() && a.token_ids[j] == b.token_ids[j]) ++j;
  return j;
}

// See the file comment. invariant: token-for-token equality; otherwise the teacher-forced near-tie rule, where
// `same_schedule` (the plain engine in the speculative run's configuration, or null) explains a divergence above
// the bound when it diverges from `plain` at the same prompt and token with the same token.
Divergences expect_same(const RunResult& plain, const RunResult& spec, const char* what, bool invariant,
                        const RunResult* same_schedule = nullptr) {
  EXPECT_EQ(plain.out.size(), spec.out.size());
  Divergences d;
  for (size_t i = 0; i < plain.out.size() && i < spec.out.size(); ++i) {
    const dsinfer::Completion &a = plain.out[i], &b = spec.out[i];
    size_t j = 0;
    while (j < a.token_ids.size() && j < b.token_ids.size() && a.token_ids[j] == b.token_ids[j]) ++j;
    if (j == a.token_ids.size() && j == b.token_ids.size()) {
      EXPECT_EQ(a.text, b.text) << what << ", prompt " << i;
      EXPECT_EQ(a.finish_reason, b.finish_reason) << what << ", prompt " << i;
      continue;
    }
    ++d.count;
    if (invariant) {
      ADD_FAILURE() << what << " (batch-invariant), prompt " << i << ": outputs differ at token " << j;
      continue;
    }
    const bool both = j < a.token_ids.size() && j < b.token_ids.size() && j < a.logprobs.size() && j < b.logprobs.size();
    double margin = INFINITY;
    if (both) {
      const int32_t ta = a.token_ids[j], tb = b.token_ids[j];
      margin = (logprob_of(a, j, ta) - logprob_of(a, j, tb)) + (logprob_of(b, j, tb) - logprob_of(b, j, ta));
    }
    d.worst_margin = std::max(d.worst_margin, margin);
    d.margins.push_back(margin);
    if (margin >= kPairMargin && same_schedule && i < same_schedule->out.size()) {
      const dsinfer::Completion& c = same_schedule->out[i];
      if (first_difference(a, c) == j && j < c.token_ids.size() && j < b.token_ids.size() &&
          c.token_ids[j] == b.token_ids[j]) {
        std::printf("%s, prompt %zu: token %zu differs (margin sum %.3f) exactly as without speculation in the same "
                    "configuration\n", what, i, j, margin);
        continue;
      }
    }
    EXPECT_LT(margin, kPairMargin) << what << ", prompt " << i << ": outputs differ at token " << j << " ("
                                   << (j < a.token_ids.size() ? a.token_ids[j] : -1) << " vs "
                                   << (j < b.token_ids.size() ? b.token_ids[j] : -1) << "), margin sum " << margin;
  }
  return d;
}

double tight_state_gb(int32_t k) {
  auto cfg = dsinfer::io::load_model_config(model_dir());
  EXPECT_TRUE(cfg.is_ok());
  dsinfer::cache::StateCacheConfig cc;
  cc.max_num_seqs = 16;
  cc.max_model_len = 160;
  cc.kv_elem_bytes = 4;  // the CUDA runner's fp32 rows
  cc.num_speculative_tokens = k;
  auto layout = dsinfer::cache::compute_state_layout(*cfg, cc);
  EXPECT_TRUE(layout.is_ok());
  // 16 slots but token blocks for two max-length sequences only: running sequences outgrow them.
  return double(16 * layout->slot_bytes + 2 * layout->blocks_per_sequence(160) * layout->block_bytes) /
         double(int64_t(1) << 30);
}

const RunResult& plain_greedy(bool invariant) {
  if (invariant) {
    static RunResult r = run(options("off", 64, 4096, 0, true), greedy_bodies(16));
    return r;
  }
  static RunResult r = run(options("off", 64, 4096, 0, false), greedy_bodies(16));
  return r;
}

// The plain engine in the mixed runs' configuration (16 running, 48-token steps, the state of two max-length
// sequences: preemption), fast path: the reference's divergences without speculation.
const RunResult& plain_mixed() {
  static RunResult r = run(options("off", 16, 48, tight_state_gb(0), false), greedy_bodies(16));
  return r;
}

void check_method(const std::string& method, int32_t k, bool invariant) {
  const RunResult& plain = plain_greedy(invariant);
  ASSERT_EQ(plain.out.size(), 50u);
  const RunResult alone = run(options(method, 1, 4096, 0, invariant), greedy_bodies(16));
  const Divergences da = expect_same(plain, alone, (method + " alone").c_str(), invariant);
  EXPECT_GT(alone.metrics.accepted_tokens, 0);
  const RunResult mixed = run(options(method, 16, 48, tight_state_gb(k), invariant), greedy_bodies(16));
  const RunResult* same = invariant ? nullptr : &plain_mixed();
  const Divergences dm = expect_same(plain, mixed, (method + " mixed + preemption").c_str(), invariant, same);
  EXPECT_GT(mixed.preemptions, 0);
  std::printf("%s greedy (cuda, %s): mean accepted length %.3f, acceptance per position", method.c_str(),
              invariant ? "batch-invariant" : "fast", alone.metrics.mean_accepted_length());
  for (size_t p = 0; p < alone.metrics.trials_per_position.size(); ++p)
    std::printf(" %.3f", double(alone.metrics.accepted_per_position[p]) /
                             double(std::max<int64_t>(1, alone.metrics.trials_per_position[p])));
  std::printf("; divergences alone %d, mixed %d (of 50), worst margin sum %.3f; %lld preemptions\n", da.count,
              dm.count, std::max(da.worst_margin, dm.worst_margin), (long long)mixed.preemptions);
  if (!invariant) {  // the schedule's own divergences (no speculation), for the record
    std::printf("plain mixed vs plain (no speculation) divergences:");
    for (size_t i = 0; i < plain.out.size() && i < plain_mixed().out.size(); ++i) {
      const dsinfer::Completion &a = plain.out[i], &c = plain_mixed().out[i];
      const size_t j = first_difference(a, c);
      if (j < a.token_ids.size() && j < c.token_ids.size() && j < a.logprobs.size() && j < c.logprobs.size())
        std::printf(" [prompt %zu token %zu: %d vs %d, margin sum %.3f]", i, j, a.token_ids[j], c.token_ids[j],
                    (logprob_of(a, j, a.token_ids[j]) - logprob_of(a, j, c.token_ids[j])) +
                        (logprob_of(c, j, c.token_ids[j]) - logprob_of(c, j, a.token_ids[j])));
    }
    std::printf("\n");
  }
  std::vector<double> all = da.margins;
  all.insert(all.end(), dm.margins.begin(), dm.margins.end());
  std::sort(all.begin(), all.end());
  std::printf("%s margin sums at divergences (sorted):", method.c_str());
  for (double m : all) std::printf(" %.3f", m);
  std::printf("\n");
}

}  // namespace

TEST(SpecGpu, DsparkGreedyEqualsPlainAloneAndInMixedBatchesWithPreemption) {
  DSI_SKIP_WITHOUT_GPU();
  check_method("dspark", 5, false);
}

TEST(SpecGpu, Mtp1GreedyEqualsPlainAloneAndInMixedBatchesWithPreemption) {
  DSI_SKIP_WITHOUT_GPU();
  check_method("mtp1", 1, false);
}

TEST(SpecGpu, DsparkGreedyIdenticalToPlainBatchInvariant) {
  DSI_SKIP_WITHOUT_GPU();
  check_method("dspark", 5, true);
}

TEST(SpecGpu, Mtp1GreedyIdenticalToPlainBatchInvariant) {
  DSI_SKIP_WITHOUT_GPU();
  check_method("mtp1", 1, true);
}

// Speculation at rest (speculative/speculator.h): with a cost table where no draft ever pays, every step is the
// plain engine's own (asynchronous, sampled on the device), so the output equals --speculative off bit for bit,
// logprobs included, in the same configuration; nothing is drafted and every round emits one token.
TEST(SpecGpu, AtRestSpeculationTakesThePlainPath) {
  DSI_SKIP_WITHOUT_GPU();
  const dsinfer::test::ScratchDir dir("spec_rest");
  const std::string file = dir.str() + "/cost.txt";
  std::ofstream(file) << "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 50 50 50 50 50\nseqs 64 2 90 90 90 90 90\n"
                         "draft 50 90\n";
  dsinfer::EngineOptions o = options("dspark", 16, 256, 0, false);
  o.speculative_cost_model = file;
  const RunResult rest = run(o, greedy_bodies(16));
  const RunResult plain = run(options("off", 16, 256, 0, false), greedy_bodies(16));
  ASSERT_EQ(rest.out.size(), plain.out.size());
  for (size_t i = 0; i < plain.out.size(); ++i) {
    EXPECT_EQ(rest.out[i].token_ids, plain.out[i].token_ids) << "prompt " << i;
    ASSERT_EQ(rest.out[i].logprobs.size(), plain.out[i].logprobs.size()) << "prompt " << i;
    for (size_t j = 0; j < plain.out[i].logprobs.size(); ++j)
      EXPECT_EQ(rest.out[i].logprobs[j].logprob, plain.out[i].logprobs[j].logprob) << "prompt " << i << " token " << j;
  }
  EXPECT_EQ(rest.metrics.drafted_tokens, 0);
  EXPECT_GT(rest.metrics.rounds, 0);
  EXPECT_EQ(rest.metrics.verified_tokens, rest.metrics.rounds);
}

// Out of rest and back: drafting pays only for a single running sequence. Five short requests and a long one:
// while they run together the engine rests (no drafter work), then the long one drafts again once the drafter
// has ingested a context window after the gap. Greedy output stays the plain output (the near-tie rule).
TEST(SpecGpu, DraftingResumesAfterRest) {
  DSI_SKIP_WITHOUT_GPU();
  const dsinfer::test::ScratchDir dir("spec_resume");
  const std::string file = dir.str() + "/cost.txt";
  std::ofstream(file) << "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 1.05 1.1 1.15 1.2 1.25\n"
                         "seqs 2 1 50 50 50 50 50\ndraft 0.05 50\n";
  std::vector<std::string> bodies;
  for (size_t i = 0; i < 6; ++i)
    bodies.push_back(json({{"prompt", prompts()[i]}, {"max_tokens", i == 0 ? 96 : 8}, {"temperature", 0.0},
                           {"logprobs", 5}, {"ignore_eos", true}}).dump());
  dsinfer::EngineOptions o = options("dspark", 16, 256, 0, false);
  o.speculative_cost_model = file;
  const RunResult r = run(o, bodies);
  const RunResult plain = run(options("off", 16, 256, 0, false), bodies);
  expect_same(plain, r, "dspark resumed after rest", false);
  EXPECT_GT(r.metrics.drafted_tokens, 0);
  EXPECT_GT(r.metrics.accepted_tokens, 0);
  std::printf("resumed: %lld rounds, %lld drafted, %lld accepted\n", (long long)r.metrics.rounds,
              (long long)r.metrics.drafted_tokens, (long long)r.metrics.accepted_tokens);
}
