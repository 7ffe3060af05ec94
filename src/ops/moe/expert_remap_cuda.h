// Expert parallelism's index remap on the GPU (parallel/expert_remap.h): idx[0, n) rewritten in place from global
// expert ids to this rank's local ids [0, hi - lo), -1 for experts held by other ranks (moe_cuda skips them).
// Plain C++ header (no CUDA types).
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

Status remap_experts_cuda(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream);

}  // namespace dsinfer::ops::cuda
