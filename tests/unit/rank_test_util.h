// Helpers shared by the multi-rank CPU tests (test_parallel_cpu.cpp: EP ranks; test_parallel_dp_cpu.cpp: DP ranks).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <utility>
#include <vector>

namespace dsinfer::test {

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

}  // namespace dsinfer::test
