// NCCL, loaded at run time (docs/multi_gpu.md): libnccl.so.2 is dlopen'ed on first use (DSINFER_NCCL_LIBRARY
// overrides the path), so dsinfer starts and runs on one GPU where NCCL is absent; only nccl.h (from the
// nvidia-nccl-cu13 wheel, cmake/nccl.cmake) is needed to compile. NVLink multicast (NVLS) is forced off before
// the first communicator: it is forbidden on the machines this runs on. Plain C++ header (no NCCL / CUDA types).
#pragma once
#include <cstddef>
#include <string>

#include "core/status.h"

namespace dsinfer::parallel {

// Loads the library and its symbols once (thread-safe); a clear error naming the library and
// DSINFER_NCCL_LIBRARY when it cannot. Also sets NCCL_NVLS_ENABLE=0 (overwriting any value).
Status nccl_load();
// The path dlopen was given and the library's version ("2.28.3"), after a successful nccl_load().
std::string nccl_description();

struct NcclId {
  char bytes[128];  // ncclUniqueId (NCCL_UNIQUE_ID_BYTES, checked in nccl_cuda.cpp)
};
Result<NcclId> nccl_unique_id();

// One rank's communicator. init() must run for every rank at the same time (one thread per rank: it blocks
// until all have joined), on the thread whose current device is the rank's GPU.
class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();
  Status init(const NcclId& id, int world, int rank);
  // In-place sum of count fp32 values over every rank, enqueued on `stream` (a cudaStream_t).
  Status all_reduce_sum(float* buf, size_t count, void* stream);
  bool ready() const { return comm_ != nullptr; }
  int world() const { return world_; }
  int rank() const { return rank_; }

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int world_ = 1, rank_ = 0;
};

}  // namespace dsinfer::parallel
