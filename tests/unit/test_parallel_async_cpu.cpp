// Asynchronous steps at N > 1 on the CPU backend (docs/multi_gpu.md "Asynchronous steps at N > 1"): the cpu ranks'
// runner queues a begun step and its sampling on a driver thread (the engine plans step t+1 while the ranks compute
// step t; the step's pending input tokens are taken from the sampling queued before it). In EP, DP and TP at 2 and 4
// ranks, greedy and seeded (temperature, top-p, top-k) requests with logprobs and top logprobs, n = 2, stop
// conditions, and a budget that splits prefills over steps: async steps give, token for token and logprob for
// logprob (bitwise), what synchronous steps of the same ranks give, and the same greedy tokens as one rank. Also a
// planted step fault under async steps ends every request with the rank and the cause within 30 s.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dsinfer/engine.h"
#include "rank_test_util.h"
#include "test_util.h"

namespace {

using dsinfer::test::RankLayout;
using dsinfer::test::rank_prompt;
using dsinfer::test::within_30s;

// Everything a client sees of one request's choices: tokens, finish reason, logprobs and top logprobs (bits).
using Described = std::map<uint64_t, std::string>;

std::vector<dsinfer::Request> requests(int32_t vocab) {
  std::vector<dsinfer::Request> out;
  for (int i = 0; i < 7; ++i) {
    dsinfer::Request r;
    r.prompt_is_ids = true;
    r.prompt_ids = rank_prompt(i % 4, vocab);
    r.sampling.max_tokens = 3 + (i * 5) % 9;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = i % 3;
    if (i % 2 == 0) {
      r.sampling.temperature = 0.0;
    } else {
      r.sampling.temperature = 0.9;
      r.sampling.top_p = 0.95;
      r.sampling.top_k = i == 3 ? 20 : 0;
      r.sampling.seed = 1000 + uint64_t(i);
    }
    if (i == 5) r.sampling.n = 2;
    if (i == 6) r.sampling.stop_token_ids = {rank_prompt(0, vocab)[2]};
    out.push_back(r);
  }
  return out;
}

// Runs the requests together; the engine's step mode comes back in `mode`.
std::vector<std::string> run(dsinfer::EngineOptions o, int32_t vocab, std::string* mode) {
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  dsinfer::test::require(e != nullptr, err);
  *mode = e->step_mode();
  std::map<uint64_t, size_t> index;
  const auto reqs = requests(vocab);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const uint64_t id = e->submit(reqs[i], &err);
    dsinfer::test::require(id != 0, err);
    index[id] = i;
  }
  std::vector<dsinfer::RequestResult> res;
  dsinfer::test::require(e->run_until_idle(res, &err), err);
  std::vector<std::string> out(reqs.size());
  for (const auto& r : res) {
    dsinfer::test::require(r.error.empty(), r.error);
    std::string s;
    for (const auto& c : r.completions) {
      s += c.finish_reason + "|";
      for (int32_t t : c.token_ids) s += std::to_string(t) + ",";
      for (const auto& lp : c.logprobs) {
        s += fmt::format("[{}:{:a}", lp.token, lp.logprob);
        for (const auto& t : lp.top) s += fmt::format(" {}:{:a}", t.first, t.second);
        s += "]";
      }
      s += ";";
    }
    out[index.at(r.id)] = s;
  }
  return out;
}

// The greedy requests' token ids (the even indices), from a described run.
std::vector<std::string> greedy_tokens(const std::vector<std::string>& d) {
  std::vector<std::string> out;
  for (size_t i = 0; i < d.size(); i += 2) out.push_back(d[i].substr(0, d[i].find('[')));
  return out;
}

}  // namespace

TEST(CpuRanksAsync, AsyncStepsEqualSyncStepsInEveryLayout) {
  const std::string dir = dsinfer::test::own_fixture("tiny-v4-a");
  const int32_t vocab = 512;
  for (int64_t budget : {int64_t(256), int64_t(16)}) {  // 16: prefills split over steps, decodes beside them
    dsinfer::EngineOptions one = dsinfer::test::rank_options(dir, 1, RankLayout::kEP);
    one.max_num_batched_tokens = budget;
    std::string mode;
    std::vector<std::string> ref;
    within_30s([&] { ref = run(one, vocab, &mode); });
    for (int32_t n : {2, 4}) {
      for (RankLayout l : {RankLayout::kEP, RankLayout::kDP, RankLayout::kTP}) {
        const std::string what = fmt::format("{} ranks {} budget {}", n, dsinfer::test::rank_layout_name(l), budget);
        dsinfer::EngineOptions o = dsinfer::test::rank_options(dir, n, l);
        o.max_num_batched_tokens = budget;
        std::vector<std::string> async, sync;
        std::string async_mode, sync_mode;
        within_30s([&] { async = run(o, vocab, &async_mode); });
        o.async_scheduling = "off";
        within_30s([&] { sync = run(o, vocab, &sync_mode); });
        EXPECT_EQ(async_mode, "async") << what;
        EXPECT_EQ(sync_mode, "sync (async scheduling off)") << what;
        EXPECT_EQ(async, sync) << what;
        EXPECT_EQ(greedy_tokens(async), greedy_tokens(ref)) << what;
        if (l == RankLayout::kDP) {
          EXPECT_EQ(async, ref) << what << ": DP is bit-identical to one rank";
        }
      }
    }
  }
}

// A rank fails at step 3 while steps are asynchronous: every request ends (none lost), the failed ones with the rank
// and the cause, and later submissions are refused with it; within 30 s.
TEST(CpuRanksAsync, StepFaultEndsEveryRequestWithTheCause) {
  const std::string dir = dsinfer::test::own_fixture("tiny-v4-a");
  for (RankLayout l : {RankLayout::kEP, RankLayout::kDP, RankLayout::kTP}) {
    within_30s([&] {
      dsinfer::EngineOptions o = dsinfer::test::rank_options(dir, 4, l);
      o.max_num_batched_tokens = 64;
      o.fault_injection = "1:step:3";
      std::string err;
      auto e = dsinfer::Engine::create(o, &err);
      ASSERT_NE(e, nullptr) << err;
      EXPECT_EQ(e->step_mode(), "async");
      std::set<uint64_t> ids;
      for (const auto& r : requests(512)) {
        const uint64_t id = e->submit(r, &err);
        ASSERT_NE(id, 0u) << err;
        ids.insert(id);
      }
      const std::string cause = "rank 1 failed: injected fault in step 3";
      const char* layout = dsinfer::test::rank_layout_name(l);
      EXPECT_GT(dsinfer::test::expect_fault_ends_every_request(*e, ids, cause, layout), 0) << layout;
    });
  }
}
