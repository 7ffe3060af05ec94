// Helpers shared by the multi-rank CPU tests (test_parallel_cpu.cpp: EP ranks and faults; test_parallel_dp_cpu.cpp:
// DP ranks; test_parallel_layouts_cpu.cpp: EP, DP and TP against one rank).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.h"
#include "test_util.h"
#include "v41_model_util.h"

namespace dsinfer::test {

// After a rank fault: run_until_idle fails naming `cause`; every submitted request in `ids` comes back, finished or
// with an error naming `cause` (none lost); nothing stays unfinished; the engine reports itself unavailable for
// `cause`. Returns how many requests ended with the error. `what` labels the failures.
inline int expect_fault_ends_every_request(Engine& e, const std::set<uint64_t>& ids, const std::string& cause,
                                           const std::string& what) {
  std::string err;
  std::vector<RequestResult> res;
  EXPECT_FALSE(e.run_until_idle(res, &err)) << what;
  EXPECT_NE(err.find(cause), std::string::npos) << what << ": " << err;
  for (auto& r : e.take_finished()) res.push_back(std::move(r));
  std::set<uint64_t> back;
  int failed = 0;
  for (const auto& r : res) {
    back.insert(r.id);
    if (!r.error.empty()) {
      ++failed;
      EXPECT_NE(r.error.find(cause), std::string::npos) << what << ": " << r.error;
    }
  }
  EXPECT_EQ(back, ids) << what << ": a request was lost";
  EXPECT_FALSE(e.has_unfinished()) << what;
  EXPECT_NE(e.unavailable_reason().find(cause), std::string::npos) << what << ": " << e.unavailable_reason();
  return failed;
}

// One request's greedy tokens and their logprobs.
struct RankOut {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
};

// Fails the binary if f does not return within 30 s (a hang cannot be caught any other way).
template <typename F>
void within_30s(F f) {
  auto fut = std::async(std::launch::async, std::move(f));
  if (fut.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: a multi-rank run did not end within 30 s (hang)\n");
    std::_Exit(2);
  }
  fut.get();
}

// Prompt i of a test batch: 4 + 7 i tokens in [2, vocab - 2).
inline std::vector<int32_t> rank_prompt(int i, int32_t vocab) {
  std::vector<int32_t> p;
  for (int k = 0; k < 4 + 7 * i; ++k) p.push_back(2 + (k * 13 + i * 5) % (vocab - 4));
  return p;
}

// The layouts of --gpus N (parallel::layout_of): EP (the default), DP (--data-parallel-size N), TP
// (--tensor-parallel-size N).
enum class RankLayout { kEP, kDP, kTP };
inline const char* rank_layout_name(RankLayout l) { return l == RankLayout::kEP ? "EP" : l == RankLayout::kDP ? "DP" : "TP"; }

inline EngineOptions rank_options(const std::string& dir, int32_t ranks, RankLayout l) {
  EngineOptions o;
  o.model_dir = dir;
  o.gpus = ranks;
  o.data_parallel_size = l == RankLayout::kDP ? ranks : 1;
  o.tensor_parallel_size = l == RankLayout::kTP ? ranks : 1;
  o.max_num_seqs = 8;
  o.max_model_len = 96;
  return o;
}

// Greedy runs of prompts `which` (rank_prompt(i % 4); all submitted at once; budget = tokens per step), by index.
inline std::map<int, RankOut> rank_run(EngineOptions o, const std::vector<int>& which, int64_t budget, int32_t vocab,
                                       int max_tokens = 6, int64_t* preemptions = nullptr) {
  o.max_num_batched_tokens = budget;
  std::string err;
  auto e = Engine::create(o, &err);
  require(e != nullptr, err);
  std::map<uint64_t, int> index;
  for (int i : which) {
    Request r;
    r.prompt_is_ids = true;
    r.prompt_ids = rank_prompt(i % 4, vocab);
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = 0.0;
    r.sampling.logprobs = true;
    const uint64_t id = e->submit(r, &err);
    require(id != 0, err);
    index[id] = i;
  }
  std::vector<RequestResult> res;
  require(e->run_until_idle(res, &err), err);
  if (preemptions) *preemptions = e->stats().num_preemptions;
  std::map<int, RankOut> out;
  for (const auto& r : res) {
    require(r.error.empty(), r.error);
    RankOut& x = out[index.at(r.id)];
    x.ids = r.completions.at(0).token_ids;
    for (const auto& lp : r.completions.at(0).logprobs) x.logprobs.push_back(lp.logprob);
  }
  return out;
}

// Tokens equal; logprobs bitwise equal.
inline void expect_same_runs(const std::map<int, RankOut>& a, const std::map<int, RankOut>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [i, x] : a) {
    EXPECT_EQ(b.at(i).ids, x.ids) << what << ", prompt " << i;
    EXPECT_EQ(b.at(i).logprobs, x.logprobs) << what << ", prompt " << i;
  }
}

// The CLI tests' batch input (`dsinfer generate --input`): 5 greedy requests of 4 token ids, 5 tokens each, with
// logprobs.
inline void write_rank_requests(const std::string& path) {
  std::ofstream f(path);
  for (int i = 0; i < 5; ++i)
    f << R"({"custom_id": "r)" << i << R"(", "body": {"temperature": 0, "max_tokens": 5, "logprobs": 1, "prompt": [)"
      << 3 + i << ", " << 40 + 7 * i << ", 9, " << 100 + i << "]}}\n";
}

// Every fixture and the shipped model, with the rank counts their routed experts split over. DeepSeek-V4.1's
// fixtures' WordLevel tokenizer.json is read only by the Engram vocabulary, so the engine is given a byte-level one
// (v41_model_util.h).
struct RankModel {
  std::string dir;
  int32_t vocab;
  std::vector<int32_t> ranks;
  bool v41 = false;
  EngineOptions options(int32_t n, RankLayout l) const {
    EngineOptions o = rank_options(dir, n, l);
    static const ScratchDir tok_dir("rank_v41_tok");
    static const std::string tok = byte_tokenizer(tok_dir.path);
    if (v41) o.tokenizer_path = tok;
    return o;
  }
};
inline std::vector<RankModel> rank_models() {
  const std::vector<int32_t> even = {2, 4, 8};
  return {{own_fixture("tiny-v4-a"), 512, even},        {own_fixture("tiny-v4-a-bf16"), 512, even},
          {own_fixture("tiny-v4-b"), 512, even},        {own_fixture("tiny-v4-c"), 256, {2, 3, 6}},
          {own_fixture("tiny-v4-official"), 256, even}, {source_dir() + "/models/dsv4-small", 3072, even},
          {own_fixture("tiny-v41-a"), 512, even, true}, {own_fixture("tiny-v41-b"), 512, {2, 4}, true}};
}

}  // namespace dsinfer::test
