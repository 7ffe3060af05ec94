// DP attention + expert parallelism on the CPU backend (docs/multi_gpu.md "DP attention"), through the public Engine
// as a user runs it (--backend cpu --gpus N --data-parallel-size N): each rank owns its sequences and their state
// (the StateCache split over the ranks), runs attention on its own tokens, and sends its routed (token, expert)
// pairs to the experts' ranks (all_to_all_v) and combines their outputs in top-k order in fp64, as one rank does.
// So N ranks are bit-identical to one rank (test_parallel_layouts_cpu.cpp: every fixture, 2 / 4 / 8 ranks), here
// with preemption and the prefix cache.
// Planted faults end every request with the rank and the cause within 30 s. Also the pieces: dispatch / combine
// over the in-process group, and the split StateCache (admission balance, a sequence's blocks on its rank).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "cache/state_cache.h"
#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
#include "dsinfer/engine.h"
#include "io/config.h"
#include "parallel/expert_dispatch.h"
#include "parallel/inproc_comm.h"
#include "rank_test_util.h"
#include "test_util.h"

namespace {

using dsinfer::test::RankLayout;
using dsinfer::test::rank_prompt;
using dsinfer::test::within_30s;

dsinfer::EngineOptions options(const std::string& dir, int32_t ranks, bool dp = true) {
  return dsinfer::test::rank_options(dir, ranks, dp ? RankLayout::kDP : RankLayout::kEP);
}

}  // namespace

// A state budget that holds few sequences per rank: running sequences are preempted (the victim is the newest of
// the rank short of blocks) and recomputed; with exact prefix caching, repeated prompts hit snapshots and blocks
// (restored on the rank holding them). Same tokens and logprobs as one rank with the same options.
TEST(DpRanks, PreemptionAndPrefixCacheKeepOneRankResults) {
  within_30s([] {
    const std::string dir = dsinfer::test::own_fixture("tiny-v4-a");
    for (const char* prefix : {"off", "exact"}) {
      dsinfer::EngineOptions o = options(dir, 2);
      o.max_model_len = 96;
      o.enable_prefix_caching = prefix;
      dsinfer::EngineOptions one = o;
      one.gpus = 1;
      one.data_parallel_size = 1;
      int64_t pre_one = 0, pre_dp = 0;
      // Tight state: each DP rank 2 slots but blocks for one 96-token sequence and 2 blocks more, so two sequences
      // of a rank outgrow its blocks (one rank: the same total).
      dsinfer::cache::StateCacheConfig cc;
      cc.max_model_len = 96;
      auto cfg = dsinfer::io::load_model_config(dir);
      ASSERT_TRUE(cfg.is_ok());
      auto layout = dsinfer::cache::compute_state_layout(*cfg, cc);
      ASSERT_TRUE(layout.is_ok());
      const double rank_bytes =
          double(2 * layout->slot_bytes + (layout->blocks_per_sequence(96) + 2) * layout->block_bytes);
      o.state_memory_gb = one.state_memory_gb = 2 * rank_bytes / double(1 << 30);
      o.max_num_seqs = one.max_num_seqs = 4;
      const std::vector<int> which = {0, 1, 2, 3, 4, 5, 6, 7};
      const auto a = dsinfer::test::rank_run(one, which, 24, 512, 64, &pre_one);
      const auto b = dsinfer::test::rank_run(o, which, 24, 512, 64, &pre_dp);
      dsinfer::test::expect_same_runs(a, b, std::string("prefix ") + prefix);
      EXPECT_GT(pre_dp, 0) << prefix;  // the test is about preemption: the budget must force some
      std::printf("prefix %s: preemptions 1 rank %lld, 2 DP ranks %lld\n", prefix, (long long)pre_one,
                  (long long)pre_dp);
    }
  });
}

TEST(DpRanks, FaultAtLoadNamesTheRank) {
  within_30s([] {
    dsinfer::EngineOptions o = options(dsinfer::test::source_dir() + "/models/dsv4-small", 4);
    o.fault_injection = "3:load";
    std::string err;
    EXPECT_EQ(dsinfer::Engine::create(o, &err), nullptr);
    EXPECT_NE(err.find("rank 3 failed: injected fault while loading"), std::string::npos) << err;
  });
}

// A rank fails in step 2 (at its first dispatch, its peers waiting there) or throws std::bad_alloc in step 1: the
// step fails with the rank and the cause, every request comes back (finished, or with the error), none is lost.
TEST(DpRanks, FaultInAStepEndsEveryRequestWithTheCause) {
  within_30s([] {
    for (const auto& [spec, cause] : {std::pair{"1:step:2", "rank 1 failed: injected fault in step 2"},
                                      std::pair{"0:alloc:1", "rank 0 failed: out of memory (std::bad_alloc)"},
                                      std::pair{"3:step:1", "rank 3 failed: injected fault in step 1"}}) {
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
        r.sampling.max_tokens = i == 0 ? 1 : 20;  // request 0 finishes in step 0
        r.sampling.temperature = 0.0;
        ids.insert(e->submit(r, &err));
      }
      const int failed = dsinfer::test::expect_fault_ends_every_request(*e, ids, cause, spec);
      EXPECT_GE(failed, 2) << spec;  // the two long requests end with the error
    }
  });
}

TEST(DpRanks, LayoutOptionsAreChecked) {
  dsinfer::EngineOptions o = options(dsinfer::test::own_fixture("tiny-v4-a"), 4);
  o.data_parallel_size = 2;
  std::string err;
  EXPECT_EQ(dsinfer::Engine::create(o, &err), nullptr);
  EXPECT_NE(err.find("--data-parallel-size 2 must be 1"), std::string::npos) << err;
  // The default state budget holds one sequence per rank even when max_num_seqs is below the rank count.
  o.data_parallel_size = 4;
  o.max_num_seqs = 1;
  EXPECT_NE(dsinfer::Engine::create(o, &err), nullptr) << err;
}

// dispatch_combine over the in-process group at 1, 2, 4 and 8 ranks: every pair's output (its weight carried to the
// expert's rank) equals the expert run on the token's own rank (bitwise), with ranks of zero tokens; a bad expert
// id is an error naming it.
TEST(ExpertDispatch, EveryPairComesBackFromItsExpertsRank) {
  const int64_t D = 8, k = 3, E = 16;
  const dsinfer::parallel::ExpertFn expert = [](int32_t e, float w, const float* x, float* y) {
    for (int64_t d = 0; d < D; ++d) y[d] = x[d] * float(e + 1) + float(d) * 0.25f + w;
  };
  for (int32_t n : {1, 2, 4, 8}) {
    auto comms = dsinfer::parallel::make_inprocess_group(n, {});
    std::vector<std::thread> th;
    std::vector<int> ok(size_t(n), 0);
    for (int32_t r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        std::mt19937 g(uint32_t(n * 100 + r));
        const int64_t T = r % 3 == 1 ? 0 : 1 + r;  // some ranks without tokens
        std::vector<float> x(size_t(T * D)), wt(size_t(T * k));
        std::vector<int32_t> idx(size_t(T * k));
        for (float& v : x) v = float(g() % 1000) / 100.0f;
        for (float& v : wt) v = float(g() % 1000) / 1000.0f;
        for (int32_t& e : idx) e = int32_t(g() % E);
        std::vector<float> y;
        dsinfer::parallel::DispatchStats st;
        const auto s = dsinfer::parallel::dispatch_combine(*comms[size_t(r)], {T, k, D, E}, x, idx, wt, expert, y, &st);
        if (!s.is_ok() || int64_t(y.size()) != T * k * D) return;
        std::vector<float> want(static_cast<size_t>(D));
        for (int64_t a = 0; a < T * k; ++a) {
          expert(idx[size_t(a)], wt[size_t(a)], x.data() + (a / k) * D, want.data());
          for (int64_t d = 0; d < D; ++d)
            if (y[size_t(a * D + d)] != want[size_t(d)]) return;
        }
        ok[size_t(r)] = st.pairs_sent == T * k;
      });
    for (auto& t : th) t.join();
    for (int32_t r = 0; r < n; ++r) EXPECT_EQ(ok[size_t(r)], 1) << n << " ranks, rank " << r;
  }
  auto one = dsinfer::parallel::make_inprocess_group(1, {});
  std::vector<float> x(static_cast<size_t>(D)), wt(static_cast<size_t>(k));
  std::vector<float> y;
  std::vector<int32_t> idx = {0, 16, 1};
  const auto s = dsinfer::parallel::dispatch_combine(*one[0], {1, k, D, E}, x, idx, wt, expert, y);
  EXPECT_NE(s.message().find("routes to expert 16 outside [0, 16)"), std::string::npos) << s.message();
}

// gather_pair_outputs (EP / TP under --batch-invariant: every rank has the step's tokens) at 1, 2, 4 and 8 ranks:
// every rank ends with every pair's output bitwise equal to the expert run locally (one owner's value plus zeros in
// the sum), values far apart in magnitude included; each rank computes only its experts' pairs.
TEST(ExpertDispatch, GatheredPairOutputsAreExactOnEveryRank) {
  const int64_t D = 6, k = 2, E = 8, T = 5;
  const dsinfer::parallel::ExpertFn expert = [](int32_t e, float w, const float* x, float* y) {
    for (int64_t d = 0; d < D; ++d) y[d] = (x[d] * float(e + 1) + w) * (d % 2 ? 1e-30f : 3e20f);
  };
  std::mt19937 g(7);
  std::vector<float> x(size_t(T * D)), wt(size_t(T * k));
  std::vector<int32_t> idx(size_t(T * k));
  for (float& v : x) v = float(int(g() % 2001) - 1000) / 7.0f;
  for (float& v : wt) v = float(g() % 1000) / 999.0f;
  for (int32_t& e : idx) e = int32_t(g() % E);
  std::vector<float> want(size_t(T * k * D));
  for (int64_t a = 0; a < T * k; ++a) expert(idx[size_t(a)], wt[size_t(a)], x.data() + (a / k) * D, want.data() + a * D);
  for (int32_t n : {1, 2, 4, 8}) {
    auto comms = dsinfer::parallel::make_inprocess_group(n, {});
    std::vector<std::thread> th;
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    std::vector<int64_t> served(static_cast<size_t>(n), -1);
    for (int32_t r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        dsinfer::parallel::DispatchStats st;
        const auto s = dsinfer::parallel::gather_pair_outputs(*comms[size_t(r)], {T, k, D, E}, x, idx, wt, expert,
                                                              got[size_t(r)], &st);
        if (s.is_ok()) served[size_t(r)] = st.pairs_served;
      });
    for (auto& t : th) t.join();
    int64_t total = 0;
    for (int32_t r = 0; r < n; ++r) {
      EXPECT_EQ(got[size_t(r)], want) << n << " ranks, rank " << r;
      EXPECT_GE(served[size_t(r)], 0) << n << " ranks, rank " << r;
      total += served[size_t(r)];
    }
    EXPECT_EQ(total, T * k) << n << " ranks: each pair computed by exactly one rank";
  }
}

// The StateCache split over ranks: admission balances by used state bytes, a sequence's blocks stay on its rank,
// growth and eviction use only that rank's blocks, and a split too small for one sequence per rank is refused.
TEST(StateCacheRanks, SequencesStayOnTheirRank) {
  auto cfg = dsinfer::io::load_model_config(dsinfer::test::own_fixture("tiny-v4-a"));
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  dsinfer::cache::StateCacheConfig cc;
  cc.max_model_len = 64;
  cc.max_num_seqs = 8;
  auto layout = dsinfer::cache::compute_state_layout(*cfg, cc);
  ASSERT_TRUE(layout.is_ok()) << layout.status().message();
  cc.budget_bytes = 8 * layout->bytes_per_sequence(64);
  auto sc = dsinfer::cache::StateCache::create(*cfg, cc);
  ASSERT_TRUE(sc.is_ok()) << sc.status().message();
  ASSERT_TRUE(sc->set_ranks(4).is_ok());
  EXPECT_EQ(sc->num_slots() % 4, 0);
  EXPECT_EQ(sc->num_blocks() % 4, 0);
  std::vector<int32_t> rank_of;
  for (int i = 0; i < 4; ++i) {
    const auto s = sc->admit(10 + 20 * i);
    ASSERT_GE(s, 0);
    rank_of.push_back(sc->rank_of_slot(s));
  }
  EXPECT_EQ(std::set<int32_t>(rank_of.begin(), rank_of.end()).size(), 4u);  // one per rank: balanced
  const auto fifth = sc->admit(5);  // the least used rank: rank_of[0]'s (10 tokens)
  EXPECT_EQ(sc->rank_of_slot(fifth), rank_of[0]);
  ASSERT_TRUE(sc->allocate_for(fifth, 60));
  for (auto b : sc->table(fifth)) EXPECT_EQ(sc->rank_of_block(b), rank_of[0]);
  auto again = dsinfer::cache::StateCache::create(*cfg, cc);
  ASSERT_TRUE(again.is_ok());
  const auto too_many = again->set_ranks(64);
  EXPECT_NE(too_many.message().find("below one max_model_len=64 sequence"), std::string::npos) << too_many.message();
}

// The user's path: `dsinfer generate --backend cpu --gpus 4 --data-parallel-size 4` writes the same completions as
// one rank; `dsinfer plan` reports the sequences that fit for EP (the state replicated) and DP (each GPU its own).
TEST(DpRanks, CliGenerateAndPlan) {
  within_30s([] {
    dsinfer::test::ScratchDir d("dp_cli");
    const std::string in = d.str() + "/in.jsonl", model = dsinfer::test::source_dir() + "/models/dsv4-small";
    dsinfer::test::write_rank_requests(in);
    const std::string base = "generate --backend cpu --model " + model + " --input " + in;
    auto one = dsinfer::test::run_cli(d, base + " --output " + d.str() + "/one.jsonl");
    ASSERT_EQ(one.rc, 0) << one.err;
    auto dp = dsinfer::test::run_cli(d, base + " --gpus 4 --data-parallel-size 4 --output " + d.str() + "/dp.jsonl");
    ASSERT_EQ(dp.rc, 0) << dp.err;
    const auto a = dsinfer::test::read_jsonl(d.str() + "/one.jsonl");
    const auto b = dsinfer::test::read_jsonl(d.str() + "/dp.jsonl");
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 5u);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i]["response"]["body"]["choices"], b[i]["response"]["body"]["choices"]) << i;

    dsinfer::MemoryPlanOptions o;
    o.model_dir = dsinfer::test::source_dir() + "/configs/deepseek-v4-flash";
    o.context = 8192;
    o.gpus = {2, 8};
    dsinfer::MemoryPlan p;
    std::string err;
    ASSERT_TRUE(dsinfer::plan_memory(o, &p, &err)) << err;
    const auto plan = dsinfer::test::run_cli(d, "plan --model " + o.model_dir + " --gpus 2,8 --context 8192");
    ASSERT_EQ(plan.rc, 0) << plan.err;
    EXPECT_NE(plan.out.find("DP: sequences"), std::string::npos) << plan.out;
    for (const dsinfer::MemoryPlanRow& r : p.rows) {
      EXPECT_EQ(r.sequences_ep, r.sequences);  // replicated: what one GPU holds
      // each GPU its own sequences, in what its weights and its share of the step's activations leave
      EXPECT_LT(r.activation_bytes_dp, r.activation_bytes) << r.gpus;
      EXPECT_EQ(r.sequences_dp, int64_t(r.gpus) * int64_t((r.limit_bytes - r.weight_bytes - r.activation_bytes_dp) /
                                                           p.state_bytes_per_sequence)) << r.gpus;
      EXPECT_GE(r.sequences_dp, int64_t(r.gpus) * r.sequences) << r.gpus;
      EXPECT_NE(plan.out.find(std::to_string(r.sequences_dp)), std::string::npos) << plan.out;
    }
  });
}
