// The in-process communicator (docs/multi_gpu.md "Communicators"): the ranks are threads of one process (the
// ParallelRunners' shard workers). Each collective stages every rank's input in host memory, waits for all ranks,
// computes the result from the staged inputs in a FIXED rank order (all_reduce_sum: ((r0 + r1) + r2) + ... in
// fp64, rounded once to fp32, for every element and any size, so the results depend neither on timing nor on the
// batch), waits again (no rank reuses its staging while another still reads it) and writes its output back.
// Host buffers (stream == nullptr) are copied with memcpy; device buffers go through a DeviceAccess the CUDA
// backend provides (so N ranks can share one GPU, which NCCL refuses). Slow by design: it exists to make the
// multi-rank code checkable (CPU in CI, several ranks on one GPU) and to give --batch-invariant a fixed order.
// Every wait has the group's deadline; abort() or a deadline ends the group for every rank.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/communicator.h"

namespace dsinfer::parallel {

// Copies between device buffers and host memory on a stream (the CUDA backend's implementation waits for the
// stream's earlier work and for the copy).
class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;
  virtual Status to_host(void* host_dst, const void* src, size_t bytes, void* stream) const = 0;
  virtual Status from_host(void* dst, const void* host_src, size_t bytes, void* stream) const = 0;
};

// Creates a group of `world` ranks; comm(r) is rank r's communicator (each used by one thread at a time). `device`
// (optional, outliving the group) serves device buffers; without it a call with a stream is an error.
std::vector<std::unique_ptr<Communicator>> make_inprocess_group(int32_t world, const CommOptions& opts,
                                                                const DeviceAccess* device = nullptr);

}  // namespace dsinfer::parallel
