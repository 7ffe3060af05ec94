// Expert parallelism (docs/multi_gpu.md): rank r of N holds the routed experts [lo, hi) = [r*E/N, (r+1)*E/N).
// The router's top-k indices stay global; before its MoE each rank rewrites them to local indices, and an expert
// another rank holds becomes -1, an id the MoE kernels skip ("an expert id outside [0, experts) contributes
// nothing", ops/moe/moe_cuda.h). remap_expert is the one definition: the CPU reference below and the kernel
// (ops/moe/expert_remap.cu) both call it. With EPLB (parallel/eplb.h) the rank's slots come from a placement
// table instead of a range: remap_expert_eplb. C++17, no CUDA types (included by .cu files).
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::ops {

// Global expert id e -> local id e - lo when lo <= e < hi, else -1 (another rank's expert, or an invalid id).
DSI_HD int32_t remap_expert(int32_t e, int32_t lo, int32_t hi) { return e >= lo && e < hi ? e - lo : -1; }

// The CPU reference of the remap kernel: idx[0, n) in place.
inline void remap_experts_ref(int32_t* idx, int64_t n, int32_t lo, int32_t hi) {
  for (int64_t i = 0; i < n; ++i) idx[i] = remap_expert(idx[i], lo, hi);
}

// EPLB: `table` is parallel::Placement::table() ([experts + 1 replica offsets][physical slots of the replicas]).
// The assignment (token t, expert e) goes to replica t % replicas(e), physical slot p = rank * S + local: this
// rank's local id when p is one of its slots, else -1. Every rank sees the same step (same t, same ids), so
// exactly one rank serves each valid assignment. token >= 0.
DSI_HD int32_t remap_expert_eplb(int32_t e, int64_t token, const int32_t* table, int32_t experts, int32_t rank,
                                 int32_t slots_per_rank) {
  if (e < 0 || e >= experts) return -1;
  const int32_t b = table[e], c = table[e + 1] - b;
  if (c <= 0) return -1;
  const int32_t p = table[experts + 1 + b + int32_t(token % c)];
  return p / slots_per_rank == rank ? p % slots_per_rank : -1;
}

// The CPU reference of the EPLB remap kernel: idx[0, n) in place, n = tokens * topk (entry i is token i / topk);
// counts (optional, [experts]) += 1 per valid global id, the load statistics the kernel accumulates.
inline void remap_experts_eplb_ref(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                                   int32_t rank, int32_t slots_per_rank, uint32_t* counts) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = idx[i];
    if (counts && e >= 0 && e < experts) ++counts[e];
    idx[i] = remap_expert_eplb(e, i / topk, table, experts, rank, slots_per_rank);
  }
}

}  // namespace dsinfer::ops
