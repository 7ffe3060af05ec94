// Several ranks on the CPU backend (docs/multi_gpu.md "Several ranks without several GPUs"), through the public
// Engine and the server, as a user runs them (--backend cpu --gpus N): planted faults (load, step k, an allocation
// failure) on a chosen rank, in the EP and TP layouts, end every request with an error naming the rank and the
// cause, lose no request, leave the engine reporting why it cannot run, and the server answering 503; each ends
// within 30 s (a watchdog ends the binary otherwise: a hang is the failure these tests exist to catch). The results
// of every layout against one rank: test_parallel_layouts_cpu.cpp.
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

using dsinfer::test::RankLayout;
using dsinfer::test::request;
using dsinfer::test::rank_prompt;
using dsinfer::test::within_30s;

dsinfer::EngineOptions options(const std::string& dir, int32_t ranks, RankLayout l = RankLayout::kEP) {
  dsinfer::EngineOptions o = dsinfer::test::rank_options(dir, ranks, l);
  o.max_num_seqs = 4;
  return o;
}

}  // namespace

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

// A rank fails in step 3 (at its first collective, its peers waiting there: TP's first is the attention output's
// all-reduce, EP's the MoE's; with --batch-invariant the exact gathers at the same places) or throws std::bad_alloc
// in step 0: the step fails with the rank and the cause, every request comes back (finished before the fault, or
// with the error), the engine says why it cannot run, and a later request fails at once with the same reason. Each
// layout and mode under its own 30 s watchdog.
TEST(CpuRanks, FaultInAStepEndsEveryRequestWithTheCause) {
  for (const auto& [lay, bi] : {std::pair{RankLayout::kEP, false}, std::pair{RankLayout::kTP, false},
                                 std::pair{RankLayout::kEP, true}, std::pair{RankLayout::kTP, true}}) {
    const RankLayout layout = lay;
    const bool exact = bi;
    within_30s([layout, exact] {
      for (const auto& [spec, cause] : {std::pair{"1:step:3", "rank 1 failed: injected fault in step 3"},
                                        std::pair{"3:alloc:0", "rank 3 failed: out of memory (std::bad_alloc)"}}) {
        dsinfer::EngineOptions o = options(dsinfer::test::source_dir() + "/models/dsv4-small", 4, layout);
        o.fault_injection = spec;
        o.batch_invariant = exact;  // the exact gathers are the collectives the fault fires at
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
        dsinfer::test::expect_fault_ends_every_request(*e, ids, cause, spec);
        dsinfer::Request again;
        again.prompt_is_ids = true;
        again.prompt_ids = rank_prompt(0, 3072);
        ASSERT_NE(e->submit(again, &err), 0u) << err;
        EXPECT_FALSE(e->step(&err));
        EXPECT_NE(err.find(cause), std::string::npos) << err;
      }
    });
  }
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
