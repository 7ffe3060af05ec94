// The decode graphs of a shard that is one rank of a parallel group graphed as a whole (backends/cuda/parallel/
// group_graphs.h, docs/multi_gpu.md "CUDA graphs at N > 1"): its graph steps go through this instead of its own
// DecodeGraphs. Plain header, no CUDA types.
#pragma once
#include <cstdint>
#include <functional>

#include "core/status.h"

namespace dsinfer::backends {

class GroupStepGraphs {
 public:
  virtual ~GroupStepGraphs() = default;
  // This rank's part of the group's step of shape `key` (every rank calls it, with the same key): queued on `stream`
  // with every other rank's, as one graph once the shape has run before.
  virtual Status launch(int64_t key, uint64_t scratch_gen, void* stream, const std::function<Status()>& forward) = 0;
};

}  // namespace dsinfer::backends
