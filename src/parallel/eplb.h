// Expert-parallel load balancing (EPLB, docs/multi_gpu.md "EPLB"), after DeepSeek's EPLB: each of the N ranks
// holds S = E/N + R/N physical expert slots (R redundant slots in all); a placement maps every physical slot
// p = rank * S + local to a logical expert, every logical expert having at least one replica. It is computed per
// MoE layer from measured per-expert loads by a greedy algorithm (compute_placement). Each (token, expert)
// assignment is served by exactly one replica, chosen by the token's index in the step modulo the expert's replica
// count (ops/moe/expert_remap.h remap_expert_eplb), so every assignment is computed once and results stay exact.
// Host code, no CUDA.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace dsinfer::parallel {

// The checks of --eplb / --num-redundant-experts: world > 1 (EPLB balances ranks), 0 <= redundant, redundant %
// world == 0, experts % world == 0, redundant <= experts * (world - 1) (no expert needs more replicas than ranks),
// interval >= 1.
Status validate_eplb(int64_t experts, int32_t world, int32_t redundant, int64_t interval);

// One MoE layer's placement.
struct Placement {
  int32_t experts = 0, world = 0, slots_per_rank = 0;
  std::vector<int32_t> slot_expert;  // [world * slots_per_rank]: the logical expert of physical slot p
  // Derived (by make_placement): the replicas of expert e are physical slots
  // replica_slots[replica_offsets[e] .. replica_offsets[e + 1]), ascending.
  std::vector<int32_t> replica_offsets, replica_slots;

  int32_t replicas(int32_t e) const { return replica_offsets[size_t(e) + 1] - replica_offsets[size_t(e)]; }
  // The logical experts of rank r's local slots 0 .. S-1.
  std::vector<int32_t> rank_slots(int32_t rank) const;
  // The remap table the kernel reads (expert_remap.h): [experts + 1 offsets][world * S replica slots].
  std::vector<int32_t> table() const;
  int64_t table_len() const { return int64_t(experts) + 1 + int64_t(world) * slots_per_rank; }
};

// Builds the derived index of slot_expert; an error when a slot names no valid expert or an expert has no replica.
Result<Placement> make_placement(std::vector<int32_t> slot_expert, int32_t experts, int32_t world);

// The placement before any load was measured: rank r's first E/N slots hold its contiguous range [r*E/N,
// (r+1)*E/N) (plain expert parallelism's split), its R/N redundant slots replicas of the next rank's first experts.
Placement static_placement(int32_t experts, int32_t world, int32_t redundant);

// The greedy placement of DeepSeek's EPLB (global policy) for per-expert loads `load` (tokens routed to each
// logical expert over the last interval):
//  1. replication: start from one replica per expert and give each of the R redundant slots, one at a time, to the
//     expert with the largest load per replica (load / replicas; ties: lowest id), never more than `world`
//     replicas per expert;
//  2. packing: the replicas, each carrying load / replicas, sorted by that load (descending), each go to the rank
//     with the smallest load so far among those with a free slot, preferring a rank that does not yet hold the
//     expert (a second copy on one rank adds no capacity);
//  3. slot order within a rank: when `previous` (same shape) is given, an expert the rank already held keeps its
//     old slot, so a rebalance reloads only the slots whose expert changed.
// Loads must be finite and >= 0 (all zero: the redundant slots go to the lowest ids first, each expert up to
// `world` replicas; the runner never rebalances a layer without counted tokens).
Result<Placement> compute_placement(const std::vector<double>& load, int32_t world, int32_t redundant,
                                    const Placement* previous = nullptr);

// Per-rank load of a routing under a placement, with the replica choice of the remap (token index modulo the
// replica count): idx[T * topk] global expert ids (ids outside [0, E) count nowhere).
std::vector<double> routed_rank_loads(const Placement& p, const int32_t* idx, int64_t tokens, int32_t topk);
// Expected per-rank load for per-expert loads `load` (each replica carries load / replicas).
std::vector<double> expected_rank_loads(const Placement& p, const std::vector<double>& load);
// max / mean of per-rank loads (1 = perfect balance; 1 when all are zero).
double max_mean_ratio(const std::vector<double>& rank_loads);
// Local slots whose expert differs between two placements of the same shape on `rank` (the slots to reload).
int32_t changed_slots(const Placement& before, const Placement& after, int32_t rank);

// A skewed synthetic routing for benches and tests: tokens x topk distinct expert ids, expert popularity Zipf(s)
// over a random permutation of the ids (seeded: perm_seed fixes which experts are hot, seed the draws).
std::vector<int32_t> zipf_routing(int32_t experts, int64_t tokens, int32_t topk, double s, uint64_t perm_seed,
                                  uint64_t seed);
// Per-expert histogram of a routing (ids outside [0, experts) skipped).
std::vector<double> expert_histogram(const std::vector<int32_t>& idx, int32_t experts);

}  // namespace dsinfer::parallel
