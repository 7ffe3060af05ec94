// DP attention (docs/multi_gpu.md "DP attention"): the engine's one StateCache splits its slot and block ids into N
// equal ranges, one per rank (StateCache::set_ranks); a parallel runner maps a step's plan and its state copies to
// the ranks that hold them. One place for both backends' parallel runners (cpu_parallel_runner.cpp,
// backends/cuda/parallel/parallel_runner_cuda.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "cache/state_copy.h"
#include "core/status.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::runner {

// Each rank's part of one step. plans[r]: the sequences whose slot is r's, with local slot and block ids (block
// tables held in tables[r]), their tokens and positions, and their logits rows; rows[r][i]: the global logits row
// of r's i-th row. A rank without sequences gets an empty plan (it still serves its experts).
struct RankPlans {
  std::vector<scheduler::BatchPlan> plans;
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<std::vector<cache::BlockId>>> tables;
};

// Errors name the sequence whose slot or block is on no rank or on another rank than its slot, a logits row of no
// sequence, and asynchronous token fills (not supported with DP attention).
Status split_plan_by_rank(const scheduler::BatchPlan& plan, int32_t ranks, int32_t slots_per_rank,
                          int32_t blocks_per_rank, RankPlans& out);

// A state copy with local ids, and the rank it runs on. Snapshots and host-tier blocks are one pool for every rank
// (their ids stay global); slot and block ids must all be one rank's.
struct RankCopy {
  int32_t rank = -1;
  cache::StateCopy local;
};
Result<RankCopy> localize_copy(const cache::StateCopy& c, int32_t ranks, int32_t slots_per_rank,
                               int32_t blocks_per_rank);

}  // namespace dsinfer::runner
