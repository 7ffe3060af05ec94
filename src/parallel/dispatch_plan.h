// Bookkeeping of one rank's expert dispatch in DP attention + EP (docs/multi_gpu.md "DP attention"), in one place
// for both backends: which (token, top-k slot) pairs of this rank's tokens go to which rank, in which order they
// are packed, which local expert each names at its destination, and where each pair's returned output lands.
// Pairs are packed by destination rank 0, 1, .., N-1, in (token, slot) order within a destination; the experts are
// split evenly (rank r owns [r*E/N, (r+1)*E/N), parallel::expert_range). Host code, no CUDA.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace dsinfer::parallel {

struct DispatchPlan {
  std::vector<int64_t> send_count;   // [world]: pairs sent to each rank
  std::vector<int32_t> send_token;   // [P]: token (row of x) of the p-th packed pair
  std::vector<int32_t> send_expert;  // [P]: its expert, local to the destination rank (global - dest * E/N)
  std::vector<int32_t> pos_of;       // [T * k]: packed position p of pair (t, j); every pair is sent exactly once
  int64_t pairs() const { return int64_t(send_token.size()); }
};

// idx [T * topk]: the tokens' global expert ids, each in [0, experts). An error names the token, slot and id that
// is out of range, or an uneven split.
Result<DispatchPlan> plan_dispatch(std::span<const int32_t> idx, int64_t topk, int64_t experts, int32_t world);

}  // namespace dsinfer::parallel
