// The in-process communicator (docs/multi_gpu.md "Communicators"): the ranks are threads of one process (the
// ParallelRunners' shard workers). Each collective stages every rank's input in host memory, waits for all ranks,
// computes the result from the staged inputs in a FIXED rank order (all_reduce_sum: ((r0 + r1) + r2) + ... in
// fp64, rounded once to fp32, for every element and any size, so the results depend neither on timing nor on the
// batch), waits again (no rank reuses its staging while another still reads it) and writes its output back.
// Host buffers (stream == nullptr) are copied with memcpy; device buffers go through a DeviceAccess the CUDA
// backend provides (so N ranks can share one GPU, which NCCL refuses). Slow by design: it exists to make the
// multi-rank code checkable (CPU in CI, several ranks on one GPU) and to give --batch-invariant a fixed order.
// Except all_reduce_sum of ranks sharing one device: summed there by one kernel in the same order, joined by
// marks between the ranks' streams, never waited for on the host (DeviceAccess below).
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
//
// Ranks sharing one device (shared_device()): all_reduce_sum stays on the device, with no host copy and no wait for
// the device. Each rank > 0 marks its stream after its partial sums; the ranks meet on the host (the group's
// rendezvous, which only orders these calls); rank 0's stream waits for every mark and sums the ranks' buffers in
// rank order into every buffer (sum_in_rank_order: the host path's bits), then marks; after a second rendezvous each
// other rank's stream waits for rank 0's mark. Nothing there synchronises with the device, so a CUDA graph of the
// whole group's step can capture it (backends/cuda/parallel/group_graphs.h). A rank's mark is re-recorded only at
// its next collective, after the rendezvous that follows every wait on it.
//
// all_to_all_v of ranks sharing one device (session 19) stays on the device too, with two more marks per rank: each
// rank marks its stream once its send buffer is written (kSent); after a rendezvous each rank's stream waits for
// every other rank's kSent mark, copies its segments out of every rank's send buffer into its receive buffer
// (copy_on_device) and marks (kRead); after a second rendezvous each rank's stream waits for every other rank's
// kRead mark, so no send buffer is rewritten while a rank still reads it. Each set of marks is re-recorded only after
// the rendezvous that follows every wait on it, so every wait sees the mark of its own collective.
enum class MarkSet : int32_t { kReduce = 0, kSent = 1, kRead = 2 };
inline constexpr int32_t kMarkSets = 3;
class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;
  virtual Status to_host(void* host_dst, const void* src, size_t bytes, void* stream) const = 0;
  virtual Status from_host(void* dst, const void* host_src, size_t bytes, void* stream) const = 0;
  // How many ranks the device all-reduce can sum (0: the ranks do not share one device: host staging).
  virtual int32_t shared_device_ranks() const { return 0; }
  // The steps of the device collectives (errors unless shared_device_ranks() > 0).
  virtual Status mark(int32_t rank, void* stream, MarkSet set) const;       // rank's mark := its stream's work so far
  virtual Status wait_mark(int32_t rank, void* stream, MarkSet set) const;  // `stream` waits for rank's latest mark
  // In place on `stream`: every element of every bufs[r] (r < world) = the fp64 rank-order sum, rounded once.
  virtual Status sum_in_rank_order(float* const* bufs, int32_t world, size_t count, void* stream) const;
  // Device to device on the shared device, ordered on `stream`.
  virtual Status copy_on_device(void* dst, const void* src, size_t bytes, void* stream) const;
};

// Creates a group of `world` ranks; comm(r) is rank r's communicator (each used by one thread at a time). `device`
// (optional, outliving the group) serves device buffers; without it a call with a stream is an error.
std::vector<std::unique_ptr<Communicator>> make_inprocess_group(int32_t world, const CommOptions& opts,
                                                                const DeviceAccess* device = nullptr);

}  // namespace dsinfer::parallel
