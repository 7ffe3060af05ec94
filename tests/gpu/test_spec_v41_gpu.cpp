// DSpark speculative decoding on DeepSeek-V4.1 with the CUDA runner (public Engine API, --backend cuda): tiny-v41-b
// with a one-stage drafter of random weights (tests/unit/v41_model_util.h; the CPU twin is
// tests/unit/test_spec_v41.cpp). The target verifies on the GPU; V4.1 has no device drafter yet, so the host reference
// drafter drafts from the downloaded capture (CudaRunner::create_drafter). With --batch-invariant a verify step's rows
// equal a decode step's, so greedy output with DSpark must equal greedy output without it token for token, alone and
// in mixed batches with chunked prefill, with and without the confidence schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "dsinfer/engine.h"
#include "test_util.h"
#include "v41_model_util.h"
#include "checkout_path.h"

namespace {

struct SpecRun {
  std::vector<std::vector<int32_t>> tokens;
  dsinfer::SpeculativeMetrics metrics;
};

dsinfer::EngineOptions options(const std::string& dir, const std::string& tok, const std::string& spec,
                               int32_t max_seqs, int64_t budget) {
  dsinfer::EngineOptions o;
  o.model_dir = dir;
  o.tokenizer_path = tok;
  o.backend = "cuda";
  o.numerics = "hf";
  o.batch_invariant = true;
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = budget;
  o.max_model_len = 96;
  o.seed = 5;
  o.speculative = spec;
  o.speculative_cost_model = "off";
  return o;
}

SpecRun run(const dsinfer::EngineOptions& o, const std::vector<dsinfer::Request>& reqs) {
  SpecRun rr;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  if (!e) return rr;
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const uint64_t id = e->submit(reqs[i], &err);
    EXPECT_NE(id, 0u) << err;
    idx[id] = i;
  }
  std::vector<dsinfer::RequestResult> results;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  rr.tokens.resize(reqs.size());
  for (const auto& r : results) rr.tokens[idx[r.id]] = r.completions.at(0).token_ids;
  rr.metrics = e->stats().speculative;
  return rr;
}

}  // namespace

TEST(SpecV41Gpu, DsparkGreedyIdenticalToPlainBatchInvariant) {
  DSI_SKIP_WITHOUT_GPU();
  const dsinfer::test::ScratchDir dir("v41_spec_gpu");
  const std::string model = dsinfer::test::write_v41_with_drafter(dsinfer::test::checkout_path("tests/fixtures/tiny-v41-b"), dir.path, 11);
  if (model.empty()) GTEST_SKIP() << "tiny-v41-b not found";
  const dsinfer::test::ScratchDir tok_dir("v41_spec_gpu_tok");
  const std::string tok = dsinfer::test::byte_tokenizer(tok_dir.path);
  std::vector<dsinfer::Request> reqs;
  for (int i = 0; i < 6; ++i) {
    dsinfer::Request r;
    r.prompt_is_ids = true;
    for (int k = 0; k < 3 + (i * 13) % 40; ++k) r.prompt_ids.push_back(3 + (i * 41 + k * 17) % 500);
    r.sampling.max_tokens = 10 + i % 4;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  const SpecRun plain = run(options(model, tok, "off", 6, 4096), reqs);
  const SpecRun mixed = run(options(model, tok, "dspark", 6, 24), reqs);
  dsinfer::EngineOptions so = options(model, tok, "dspark", 6, 4096);
  so.speculative_budget = 6;
  so.speculative_min_survival = 0.2;
  const SpecRun sched = run(so, reqs);
  ASSERT_EQ(plain.tokens.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(int64_t(plain.tokens[i].size()), reqs[i].sampling.max_tokens);
    EXPECT_EQ(mixed.tokens[i], plain.tokens[i]) << "request " << i << " (mixed)";
    EXPECT_EQ(sched.tokens[i], plain.tokens[i]) << "request " << i << " (confidence schedule)";
    const SpecRun alone = run(options(model, tok, "dspark", 1, 4096), {reqs[i]});
    EXPECT_EQ(alone.tokens.at(0), plain.tokens[i]) << "request " << i << " (alone)";
  }
  EXPECT_GT(mixed.metrics.drafted_tokens, 0);
  EXPECT_LT(sched.metrics.verified_tokens, mixed.metrics.verified_tokens);
  std::printf("V4.1 DSpark on the GPU (host drafter, random weights): %lld drafted, %lld accepted\n",
              (long long)mixed.metrics.drafted_tokens, (long long)mixed.metrics.accepted_tokens);
}
