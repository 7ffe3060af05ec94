// The chained verify step (docs/decisions.md, 2026-12-07): at one sequence the host's work between two one-wait rounds
// (reading round t, the scheduler, launching round t + 1's verify) left the GPU idle ~13 % of a DSpark run (session
// 43's trace: ~124 us a round). So round t + 1's verify step is launched right after round t's proposal, before the
// host reads round t: its tokens and positions are written on the device from round t's outputs
// (ModelRunner::begin_chained_step). The host then plans the next step as always; where that plan is the launched
// step (is_chained_step), it is adopted without a launch. Otherwise the launched step was wasted, and its writes
// (positions past the committed ones, as a verify whose drafts were all rejected) are overwritten by later steps.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cache/state_cache.h"
#include "scheduler/batch_plan.h"
#include "speculative/drafter.h"

namespace dsinfer::speculative {

// Only a step of at most this many sequences is chained: it verifies every draft (the confidence cut needs the
// round's confidences on the host), which pays where the host gap is a large part of the round.
inline constexpr int32_t kChainMaxSeqs = 1;

struct ChainedStep {
  // What was launched: the round's sequences with 1 + k tokens each, at the round's start positions (the device
  // moves them), placeholder tokens. Its block_table spans are the round plan's, valid only during the launch.
  scheduler::BatchPlan plan;
  struct Seq {
    scheduler::SeqId id = 0;
    cache::SlotId slot = -1;
    int64_t start = 0;                   // the round's start, then (settle_chained_step) the launched step's
    std::vector<int32_t> tokens;         // after settle_chained_step: the tokens the device wrote
    std::vector<cache::BlockId> table;   // the blocks the launched step used
  };
  std::vector<Seq> seqs;
  bool settled = false;  // settle_chained_step ran and every sequence's tokens are known
};

// The chained step after `round` (a one-wait round's verify plan; every sequence decodes) when its next round will
// verify exactly k drafts (k <= block, the drafter's block): each sequence's request leaves room for that round
// (max_tokens), and its moved step fits max_model_len and its block table. With `snapshots` (the prefix cache keeps
// slot snapshots), none where the round may end a block: the boundary snapshot taken after the round's update must
// see the slot before the chained step's writes.
std::optional<ChainedStep> chain_after(const scheduler::BatchPlan& round, int32_t k, int32_t block,
                                       int64_t block_size, int64_t max_model_len, bool snapshots);
// The positions past a chained step's start that its sequence's blocks and max_model_len must hold: its 1 + k
// tokens after the device moves it up to 1 + block positions (chain_after and ModelRunner::begin_chained_step).
inline int64_t chain_lookahead(int32_t k, int32_t block) { return int64_t(1 + k) + 1 + block; }
// After the round's results (one per sequence, in order): the start positions and tokens the device wrote.
void settle_chained_step(ChainedStep& c, std::span<const RoundResult> results);
// Whether `next` (the host's plan after the round) is the launched step: the same sequences, slots, start positions,
// tokens, rows, and blocks under the positions it writes, no state copies or token fills.
bool is_chained_step(const ChainedStep& c, const scheduler::BatchPlan& next, int64_t block_size);

}  // namespace dsinfer::speculative
