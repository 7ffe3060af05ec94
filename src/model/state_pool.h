// Where the per-sequence state lives, for every backend: memory laid out by cache::StateLayout with fp32 rows
// (kv_elem_bytes = 4; the CUDA runner's `official` state: the FP8 storage format), owned by the caller
// (model/host_state.h for the CPU backend, device memory for CUDA), and
// the per-layer view of it that the CPU reference and the CUDA kernels address it through (ops/state_view.h).
#pragma once
#include <cstdint>

#include "cache/state_layout.h"
#include "ops/state_view.h"

namespace dsinfer::model {

struct StatePool {
  const cache::StateLayout* layout = nullptr;
  float* slots = nullptr;
  float* blocks = nullptr;
};
ops::LayerStateView layer_view(const StatePool& pool, int64_t layer);

}  // namespace dsinfer::model
