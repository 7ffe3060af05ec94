// Communicator: the collectives of one rank of a parallel group (docs/multi_gpu.md "Communicators"). Two
// implementations: NCCL (parallel/nccl_cuda.h, one GPU per rank) and the in-process group (parallel/inproc_comm.h:
// threads of one process, host or device buffers, a fixed rank-order reduction). The ParallelRunners pick one at
// creation; nothing else knows which it has. Plain C++ header (no CUDA / NCCL types): `stream` is a cudaStream_t
// for device buffers and nullptr for host buffers.
//
// Contract: every call is collective (every rank of the group makes the same calls, in the same order, with the
// same sizes). A failed or aborted group stays failed: every blocked and every later call of every rank returns an
// error naming the rank and the cause that ended it. No call blocks longer than the group's deadline.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace dsinfer::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t world() const = 0;
  virtual int32_t rank() const = 0;
  virtual std::string name() const = 0;  // "nccl (libnccl.so.2 (NCCL 2.28.3))", "in-process (fixed rank order)"
  // True when all_reduce_sum adds the ranks' values in rank order 0, 1, .., N-1 for every element and every size
  // (results independent of the batch and of timing: --batch-invariant at any N).
  virtual bool fixed_order() const = 0;

  // In-place sum of count fp32 values over every rank.
  virtual Status all_reduce_sum(float* buf, size_t count, void* stream) = 0;
  // recv[r * bytes .. (r + 1) * bytes) = rank r's send (bytes each); recv holds world * bytes.
  virtual Status all_gather(const void* send, void* recv, size_t bytes, void* stream) = 0;
  // Rank r sends send_bytes[q] bytes (packed in rank order in `send`) to each rank q and receives recv_bytes[q]
  // from each q (packed in rank order in `recv`). Both spans hold world entries; recv_bytes[q] must equal what q
  // sends to this rank.
  virtual Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                              std::span<const size_t> recv_bytes, void* stream) = 0;
  // Every rank's buf (bytes) = root's.
  virtual Status broadcast(void* buf, size_t bytes, int32_t root, void* stream) = 0;
  // Returns when every rank has called it (host side; device work queued before it is not waited for).
  virtual Status barrier() = 0;

  // Ends the group with `reason` (callable from any thread, any number of times: the first reason stays): every
  // blocked and later call on every rank returns an error carrying it.
  virtual void abort(const Status& reason) = 0;
  // ok, or the reason the group ended (an abort, a deadline, an NCCL asynchronous error).
  virtual Status health() = 0;
};

// Every blocking wait of a group ends by this deadline (collective_timeout): a rank that never arrives fails the
// group instead of hanging it.
struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

}  // namespace dsinfer::parallel
