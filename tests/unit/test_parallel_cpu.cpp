// Several ranks on the CPU backend (docs/multi_gpu.md "Several ranks without several GPUs"), through the public
// Engine and the server, as a user runs them (--backend cpu --gpus N): the expert-parallel ranks (in-process
// communicator, fixed rank-order reduction) give the greedy tokens of one rank on every DeepSeek-V4 fixture and on
// the shipped model at 2, 4 and 8 ranks (3 and 6 for tiny-v4-c's 6 experts), logprobs within a measured bound of
// one rank's and, with --batch-invariant, bit-identical whatever the batch. Planted faults (load, step k, an
// allocation failure) on a chosen rank end every request with an error naming the rank and the cause, lose no
// request, leave the engine reporting why it cannot run, and the server answering 503; each ends within 30 s
// (a watchdog ends the binary otherwise: a hang is the failure these tests exist to catch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "test_server_util.h"
#include "rank_test_util.h"
#include "test_util.h"

namespace {

using dsinfer::test::request;

using Out = dsinfer::test::RankOut;
using dsinfer::test::within_30s;
using dsinfer::test::rank_prompt;

dsinfer::EngineOptions options(const std::string& dir, int32_t ranks) {
  dsinfer::EngineOptions o;
  o.model_dir = dir;
  o.gpus = ranks;
  o.max_num_seqs = 4;
  o.max_model_len = 96;
  return o;
}

// Greedy runs of prompts `which` (all submitted at once; budget = tokens per step), by prompt index.
std::map<int, Out> run(dsinfer::EngineOptions o, const std::vector<int>& which, int64_t budget, int32_t vocab) {
  o.max_num_batched_tokens = budget;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  dsinfer::test::require(e != nullptr, err);
  std::map<uint64_t, int> index;
  for (int i : which) {
    dsinfer::Request r;
    r.prompt_is_ids = true;
    r.prompt_ids = rank_prompt(i, vocab);
    r.sampling.max_tokens = 6;
    r.sampling.temperature = 0.0;
    r.sampling.logprobs = true;
    const uint64_t id = e->submit(r, &err);
    dsinfer::test::require(id != 0, err);
    index[id] = i;
  }
  std::vector<dsinfer::RequestResult> res;
  dsinfer::test::require(e->run_until_idle(res, &err), err);
  std::map<int, Out> out;
  for (const auto& r : res) {
    Out& x = out[index.at(r.id)];
    x.ids = r.completions.at(0).token_ids;
    for (const auto& lp : r.completions.at(0).logprobs) x.logprobs.push_back(lp.logprob);
  }
  return out;
}

struct Model {
  std::string dir;
  int32_t vocab;
  std::vector<int32_t> ranks;
};

std::vector<Model> v4_models() {
  using dsinfer::test::own_fixture;
  const std::vector<int32_t> even = {2, 4, 8};
  return {
      {own_fixture("tiny-v4-a"), 512, even},        {own_fixture("tiny-v4-a-bf16"), 512, even},
      {own_fixture("tiny-v4-b"), 512, even},        {own_fixture("tiny-v4-c"), 256, {2, 3, 6}},
      {own_fixture("tiny-v4-official"), 256, even}, {dsinfer::test::source_dir() + "/models/dsv4-small", 3072, even}};
}

}  // namespace

// Same greedy tokens as one rank, every fixture and the shipped model. The logprobs differ from one rank's only by
// where fp32 rounding happens (each rank rounds its partial MoE sum before the fixed-order fp64 reduction; one rank
// rounds once): measured max |d logprob| over these runs 8.3e-7 (docs/multi_gpu.md); the bound 1e-5 leaves a 12x
// margin and is far below what a lost or doubled expert gives.
TEST(CpuRanks, GreedyTokensMatchOneRank) {
  within_30s([] {
    double worst = 0;
    for (const Model& m : v4_models()) {
      const auto one = run(options(m.dir, 1), {0, 1, 2}, 64, m.vocab);
      ASSERT_EQ(one.size(), 3u);
      for (int32_t n : m.ranks) {
        const auto many = run(options(m.dir, n), {0, 1, 2}, 64, m.vocab);
        ASSERT_EQ(many.size(), 3u) << m.dir << " at " << n << " ranks";
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(many.at(i).ids, one.at(i).ids) << m.dir << " at " << n << " ranks, prompt " << i;
          ASSERT_EQ(many.at(i).logprobs.size(), one.at(i).logprobs.size());
          for (size_t k = 0; k < one.at(i).logprobs.size(); ++k)
            worst = std::max(worst, std::abs(many.at(i).logprobs[k] - one.at(i).logprobs[k]));
        }
      }
    }
    std::printf("max |logprob(N ranks) - logprob(1 rank)| = %.3g\n", worst);
    EXPECT_LT(worst, 1e-5);
  });
}

// --batch-invariant at 3 and 4 ranks (the sizes where NCCL's order follows the message size): a request's tokens
// and logprobs are bit-identical alone and batched with others whose prompts are chunked beside it.
TEST(CpuRanks, BatchInvariantLogprobsAtAnyRankCount) {
  within_30s([] {
    for (const auto& [dir, vocab, n] : {std::tuple{dsinfer::test::own_fixture("tiny-v4-c"), 256, 3},
                                        std::tuple{dsinfer::test::source_dir() + "/models/dsv4-small", 3072, 4}}) {
      dsinfer::EngineOptions o = options(dir, n);
      o.batch_invariant = true;
      const auto together = run(o, {0, 1, 2}, 16, vocab);
      ASSERT_EQ(together.size(), 3u);
      for (int i = 0; i < 3; ++i) {
        const auto alone = run(o, {i}, 64, vocab);
        EXPECT_EQ(alone.at(i).ids, together.at(i).ids) << dir << " prompt " << i;
        EXPECT_EQ(alone.at(i).logprobs, together.at(i).logprobs) << dir << " prompt " << i;  // bitwise
      }
    }
  });
}

TEST(CpuRanks, FaultAtLoadNamesTheRank) {
  within_30s([] {
    dsinfer::EngineOptions o = options(dsinfer::test::source_dir() + "/models/dsv4-small", 4);
    o.fault_injection = "2:load";
    std::string err;
    EXPECT_EQ(dsinfer::Engine::create(o, &err), nullptr);
    EXPECT_NE(err.find("rank 2 failed: injected fault while loading"), std::string::npos) << err;
    o.fault_injection = "4:load";  // no rank 4 of 4
    EXPECT_EQ(dsinfer::Engine::create(o, &err), nullptr);
    EXPECT_NE(err.find("--inject-fault '4:load'"), std::string::npos) << err;
  });
}

// A rank fails in step 3 (at its first collective, its peers waiting there) or throws std::bad_alloc in step 0:
// the step fails with the rank and the cause, every request comes back (finished before the fault, or with the
// error), the engine says why it cannot run, and a later request fails at once with the same reason.
TEST(CpuRanks, FaultInAStepEndsEveryRequestWithTheCause) {
  within_30s([] {
    for (const auto& [spec, cause] : {std::pair{"1:step:3", "rank 1 failed: injected fault in step 3"},
                                      std::pair{"3:alloc:0", "rank 3 failed: out of memory (std::bad_alloc)"}}) {
      dsinfer::EngineOptions o = options(dsinfer::test::source_dir() + "/models/dsv4-small", 4);
      o.fault_injection = spec;
      std::string err;
      auto e = dsinfer::Engine::create(o, &err);
      ASSERT_NE(e, nullptr) << err;
      std::set<uint64_t> ids;
      for (int i = 0; i < 3; ++i) {
        dsinfer::Request r;
        r.prompt_is_ids = true;
        r.prompt_ids = rank_prompt(i, 3072);
        r.sampling.max_tokens = i == 0 ? 1 : 20;  // request 0 finishes in step 0 (before a step-3 fault)
        r.sampling.temperature = 0.0;
        ids.insert(e->submit(r, &err));
      }
      std::vector<dsinfer::RequestResult> res;
      EXPECT_FALSE(e->run_until_idle(res, &err));
      EXPECT_NE(err.find(cause), std::string::npos) << err;
      for (auto& r : e->take_finished()) res.push_back(std::move(r));
      std::set<uint64_t> back;
      for (const auto& r : res) {
        back.insert(r.id);
        if (!r.error.empty()) {
          EXPECT_NE(r.error.find(cause), std::string::npos) << r.error;
        }
      }
      EXPECT_EQ(back, ids);  // none lost
      EXPECT_FALSE(e->has_unfinished());
      EXPECT_NE(e->unavailable_reason().find(cause), std::string::npos) << e->unavailable_reason();
      dsinfer::Request again;
      again.prompt_is_ids = true;
      again.prompt_ids = rank_prompt(0, 3072);
      ASSERT_NE(e->submit(again, &err), 0u) << err;
      EXPECT_FALSE(e->step(&err));
      EXPECT_NE(err.find(cause), std::string::npos) << err;
    }
  });
}

// The server over 2 ranks, rank 1 failing in step 2: the requests in flight end with 503 and the cause; the server
// stays up, /health and every new request answer 503 with the reason.
TEST(CpuRanks, ServerAnswers503AfterARankFails) {
  within_30s([] {
    dsinfer::EngineOptions o = options(dsinfer::test::source_dir() + "/models/dsv4-small", 2);
    o.max_model_len = 256;
    o.fault_injection = "1:step:2";
    std::string err;
    auto e = dsinfer::Engine::create(o, &err);
    ASSERT_NE(e, nullptr) << err;
    dsinfer::server::ServerOptions so;
    so.port = 0;
    dsinfer::server::Server s(std::move(e), so);
    ASSERT_TRUE(s.start(&err)) << err;
    ASSERT_EQ(request(s.port(), "GET", "/health").status, 200);
    const std::string body = R"({"prompt": "hello there", "max_tokens": 30, "temperature": 0})";
    auto a = std::async(std::launch::async, [&] { return request(s.port(), "POST", "/v1/completions", body); });
    auto b = std::async(std::launch::async, [&] { return request(s.port(), "POST", "/v1/completions", body); });
    for (auto* f : {&a, &b}) {
      const auto r = f->get();
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_NE(r.body.find("rank 1 failed: injected fault in step 2"), std::string::npos) << r.body;
    }
    auto h = request(s.port(), "GET", "/health");
    EXPECT_EQ(h.status, 503);
    EXPECT_NE(h.body.find("rank 1 failed"), std::string::npos) << h.body;
    auto later = request(s.port(), "POST", "/v1/completions", body);
    EXPECT_EQ(later.status, 503);
    EXPECT_NE(later.body.find("the engine cannot serve requests: rank 1 failed"), std::string::npos) << later.body;
  });
}
