// NCCL, loaded at run time (docs/multi_gpu.md): libnccl.so.2 is dlopen'ed on first use (DSINFER_NCCL_LIBRARY
// overrides the path), so dsinfer starts and runs on one GPU where NCCL is absent; only nccl.h (from the
// nvidia-nccl-cu13 wheel, cmake/nccl.cmake) is needed to compile. NVLink multicast (NVLS) is forced off before
// the first communicator: it is forbidden on the machines this runs on. Plain C++ header (no NCCL / CUDA types).
#pragma once
#include <cstddef>
#include <mutex>
#include <string>

#include "parallel/communicator.h"

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

// One rank's NCCL communicator (one GPU per rank: NCCL refuses two ranks on one device). init() must run for
// every rank at the same time (one thread per rank: it blocks until all have joined), on the thread whose current
// device is the rank's GPU. Collectives are enqueued on `stream` (a cudaStream_t; host buffers are refused);
// barrier() runs a 1-element all-reduce on a private stream and polls it against the deadline. abort() calls
// ncclCommAbort (which also releases kernels stuck waiting for a dead peer); health() reports
// ncclCommGetAsyncError. all_reduce_sum's order follows NCCL's algorithm choice (ring / tree, by size), so it is
// a fixed order only for world <= 2 (fixed_order()); --batch-invariant with more ranks uses the in-process group.
class NcclComm final : public Communicator {
 public:
  explicit NcclComm(const CommOptions& opts = {}) : opts_(opts) {}
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() override;
  Status init(const NcclId& id, int32_t world, int32_t rank);
  bool ready() const { return comm_ != nullptr; }

  int32_t world() const override { return world_; }
  int32_t rank() const override { return rank_; }
  std::string name() const override { return "nccl: " + nccl_description(); }
  bool fixed_order() const override { return world_ <= 2; }
  Status all_reduce_sum(float* buf, size_t count, void* stream) override;
  Status all_gather(const void* send, void* recv, size_t bytes, void* stream) override;
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes, void* stream) override;
  Status broadcast(void* buf, size_t bytes, int32_t root, void* stream) override;
  Status barrier() override;
  void abort(const Status& reason) override;
  Status health() override;

 private:
  Status usable(const char* what, void* stream);

  CommOptions opts_;
  void* comm_ = nullptr;     // ncclComm_t
  void* scratch_ = nullptr;  // 1 float on the device (barrier)
  void* stream_ = nullptr;   // cudaStream_t of barrier()
  int32_t world_ = 1, rank_ = 0;
  std::mutex mu_;             // abort() may come from another thread
  bool aborted_ = false;      // ncclCommAbort ran: comm_ is gone
  Status failed_ = Status::ok();
};

}  // namespace dsinfer::parallel
