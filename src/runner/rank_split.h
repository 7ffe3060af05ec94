// DP attention (docs/multi_gpu.md "DP attention"): the engine's one StateCache splits its slot and block ids into N
// equal ranges, one per rank (StateCache::set_ranks); a parallel runner maps a step's plan and its state copies to
// the ranks that hold them. One place for both backends' parallel runners (cpu_parallel_runner.cpp,
// backends/cuda/parallel/parallel_runner_cuda.cpp).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/state_copy.h"
#include "core/status.h"
#include "sampling/row_pack.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::runner {

// A row on one rank: the rank and the row's index in that rank's part (logits rows, sampled rows).
struct RankRow {
  int32_t rank = -1;
  int32_t row = -1;
};

// Each rank's part of one step. plans[r]: the sequences whose slot is r's, with local slot and block ids (block
// tables held in tables[r]), their tokens and positions, and their logits rows; rows[r][i]: the global logits row
// of r's i-th row, row_of[g]: the rank and local row of global logits row g (the inverse). A rank without
// sequences gets an empty plan (it still serves its experts).
struct RankPlans {
  std::vector<scheduler::BatchPlan> plans;
  std::vector<std::vector<int32_t>> rows;
  std::vector<RankRow> row_of;
  std::vector<std::vector<std::vector<cache::BlockId>>> tables;
};

// Asynchronous steps (token fills): prev_rows[i] is where row i of the runner's previous sampling was sampled
// (split_sample_rows' `where`). Each fill goes to its sequence's rank with the local token index and the row of
// that rank's previous sampling; a sequence never changes rank, so a fill whose row was sampled on another rank is
// an error. Errors name the sequence whose slot or block is on no rank or on another rank than its slot, a logits
// row of no sequence, and a fill without prev_rows or outside them.
Status split_plan_by_rank(const scheduler::BatchPlan& plan, int32_t ranks, int32_t slots_per_rank,
                          int32_t blocks_per_rank, RankPlans& out, std::span<const RankRow> prev_rows = {});

// Device sampling with DP attention: each rank samples its own logits rows. out[r] holds the rows of `rows` whose
// logits row is r's (in `rows`' order, logits_row made local; the entry lists and bitmask words copied whole, so
// the rows' indices into them hold), where[i] the rank and row of `rows`' row i in it. `split` is the step's
// split_plan_by_rank; a row naming a logits row the step does not have is an error.
Status split_sample_rows(const sampling::PackedRows& rows, const RankPlans& split, std::vector<sampling::PackedRows>& out,
                         std::vector<RankRow>& where);

// A state copy with local ids, and the rank it runs on. Snapshots and host-tier blocks are one pool for every rank
// (their ids stay global); slot and block ids must all be one rank's.
struct RankCopy {
  int32_t rank = -1;
  cache::StateCopy local;
};
Result<RankCopy> localize_copy(const cache::StateCopy& c, int32_t ranks, int32_t slots_per_rank,
                               int32_t blocks_per_rank);

}  // namespace dsinfer::runner
