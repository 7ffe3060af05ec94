// Test-only fault injection for the ParallelRunners (docs/multi_gpu.md "Faults"): an explicit option
// (RunnerOptions::fault_injection, EngineOptions::fault_injection, `--inject-fault`), never a global. One spec:
//   "RANK:load"     rank RANK fails while it loads (its shard's creation returns an error)
//   "RANK:step:K"   rank RANK fails in its K-th model step (0-based), in the middle of the step: at its first
//                   collective, which its peers are already waiting in (or about to)
//   "RANK:alloc:K"  rank RANK throws std::bad_alloc (an allocation failure) in its K-th step, at the same point
//   "RANK:plan:K"   one process per rank (cpu): rank RANK's plan of its K-th step looks different from the others'
//                   (its hash is changed), which the per-step plan check must refuse by name
// Host code, no CUDA.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsinfer::parallel {

struct FaultInjection {
  enum class At { kNone, kLoad, kStep, kAlloc, kPlan };
  At at = At::kNone;
  int32_t rank = -1;
  int64_t step = 0;
  bool none() const { return at == At::kNone; }
  // True for the rank and step this fault is planted at (step faults).
  bool hits_step(int32_t r, int64_t k) const { return (at == At::kStep || at == At::kAlloc) && r == rank && k == step; }
  bool hits_load(int32_t r) const { return at == At::kLoad && r == rank; }
  bool hits_plan(int32_t r, int64_t k) const { return at == At::kPlan && r == rank && k == step; }
  // Fails as planted: an error Status (load, step) or a thrown std::bad_alloc (alloc).
  Status fire(int64_t k) const;
};

// "" -> none; otherwise the forms above, rank < world (RANK:plan:K only with process_per_rank: it has no plan check
// to hit otherwise); a clear error naming the spec otherwise.
Result<FaultInjection> parse_fault_injection(const std::string& spec, int32_t world, bool process_per_rank = false);

}  // namespace dsinfer::parallel
