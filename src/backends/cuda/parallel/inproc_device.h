// The CUDA side of the in-process communicator (parallel/inproc_comm.h DeviceAccess): host-staged copies on a rank's
// stream, and for ranks sharing one GPU the device all-reduce and all-to-all: a CUDA event per rank and mark set as
// its mark, the rank-order sum kernel (rank_sum.h), device-to-device copies. Plain header (no CUDA types).
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "parallel/inproc_comm.h"

namespace dsinfer::backends {

class CudaDeviceAccess final : public parallel::DeviceAccess {
 public:
  // shared_ranks: the ranks that share one GPU and use the device all-reduce (0: host staging only; at most
  // detail::kMaxSharedRanks). Their events are made by init_rank on each rank's thread.
  explicit CudaDeviceAccess(int32_t shared_ranks);
  ~CudaDeviceAccess() override;
  CudaDeviceAccess(const CudaDeviceAccess&) = delete;
  CudaDeviceAccess& operator=(const CudaDeviceAccess&) = delete;
  Status init_rank(int32_t rank);  // on the rank's thread, its GPU current

  Status to_host(void* host_dst, const void* src, size_t bytes, void* stream) const override;
  Status from_host(void* dst, const void* host_src, size_t bytes, void* stream) const override;
  int32_t shared_device_ranks() const override { return shared_; }
  Status mark(int32_t rank, void* stream, parallel::MarkSet set) const override;
  Status wait_mark(int32_t rank, void* stream, parallel::MarkSet set) const override;
  Status sum_in_rank_order(float* const* bufs, int32_t world, size_t count, void* stream) const override;
  Status copy_on_device(void* dst, const void* src, size_t bytes, void* stream) const override;

 private:
  Result<void*> mark_of(int32_t rank, parallel::MarkSet set) const;  // the event, or an error naming the rank
  int32_t shared_;
  std::vector<void*> marks_;  // cudaEvent_t per rank and mark set (timing off): [rank * kMarkSets + set]
};

}  // namespace dsinfer::backends
