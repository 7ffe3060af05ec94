// Expert parallelism's index remap on the GPU (ops/moe/expert_remap.h): idx[0, n) rewritten in place from global
// expert ids to this rank's local ids [0, hi - lo), -1 for experts held by other ranks (moe_cuda skips them).
// Plain C++ header (no CUDA types).
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

Status remap_experts_cuda(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream);
// EPLB (parallel/eplb.h): idx[0, n) (n = tokens * topk, entry i is token i / topk) remapped through the device
// placement table of one layer (parallel::Placement::table(), table_len = experts + 1 + world * slots_per_rank
// entries) to this rank's local slots, -1 elsewhere; counts (optional, [experts] uint32 on the device) += 1 per
// valid global id: the per-expert load statistics, accumulated without a host synchronisation.
Status remap_experts_eplb_cuda(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                               int32_t rank, int32_t slots_per_rank, uint32_t* counts, void* stream);

}  // namespace dsinfer::ops::cuda
