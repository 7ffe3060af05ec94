// Expert parallelism (docs/multi_gpu.md): rank r of N holds the routed experts [lo, hi) = [r*E/N, (r+1)*E/N).
// The router's top-k indices stay global; before its MoE each rank rewrites them to local indices, and an expert
// another rank holds becomes -1, an id the MoE kernels skip ("an expert id outside [0, experts) contributes
// nothing", ops/moe/moe_cuda.h). remap_expert is the one definition: the CPU reference below and the kernel
// (ops/moe/expert_remap.cu) both call it. C++17, no CUDA types (included by .cu files).
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::parallel {

// Global expert id e -> local id e - lo when lo <= e < hi, else -1 (another rank's expert, or an invalid id).
DSI_HD int32_t remap_expert(int32_t e, int32_t lo, int32_t hi) { return e >= lo && e < hi ? e - lo : -1; }

// The CPU reference of the remap kernel: idx[0, n) in place.
inline void remap_experts_ref(int32_t* idx, int64_t n, int32_t lo, int32_t hi) {
  for (int64_t i = 0; i < n; ++i) idx[i] = remap_expert(idx[i], lo, hi);
}

}  // namespace dsinfer::parallel
