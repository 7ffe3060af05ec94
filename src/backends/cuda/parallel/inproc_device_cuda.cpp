// CudaDeviceAccess (see inproc_device.h).
#include "backends/cuda/parallel/inproc_device.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/parallel/rank_sum.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

CudaDeviceAccess::CudaDeviceAccess(int32_t shared_ranks)
    : shared_(shared_ranks <= detail::kMaxSharedRanks ? shared_ranks : 0), marks_(size_t(std::max(shared_, 0)) * parallel::kMarkSets) {}

CudaDeviceAccess::~CudaDeviceAccess() {
  for (void* e : marks_)
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

Status CudaDeviceAccess::init_rank(int32_t rank) {
  if (rank < 0 || rank >= shared_) return Status::ok();
  for (int32_t set = 0; set < parallel::kMarkSets; ++set) {
    cudaEvent_t e = nullptr;
    DSI_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    marks_[size_t(rank * parallel::kMarkSets + set)] = e;
  }
  return Status::ok();
}

// The stream's earlier work (the partial sums the collective reads) first, then the copy, waited for.
Status CudaDeviceAccess::to_host(void* host_dst, const void* src, size_t bytes, void* stream) const {
  auto* s = static_cast<cudaStream_t>(stream);
  DSI_CUDA_TRY(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
  DSI_CUDA_TRY(cudaStreamSynchronize(s));
  return Status::ok();
}

Status CudaDeviceAccess::from_host(void* dst, const void* host_src, size_t bytes, void* stream) const {
  auto* s = static_cast<cudaStream_t>(stream);
  DSI_CUDA_TRY(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s));
  DSI_CUDA_TRY(cudaStreamSynchronize(s));  // the host staging is reused by the next collective
  return Status::ok();
}

Result<void*> CudaDeviceAccess::mark_of(int32_t rank, parallel::MarkSet set) const {
  const int32_t s = static_cast<int32_t>(set);
  if (rank < 0 || rank >= shared_ || s < 0 || s >= parallel::kMarkSets || !marks_[size_t(rank * parallel::kMarkSets + s)])
    return Status::errorf("in-process group: rank {} has no device mark {} ({} ranks share the GPU)", rank, s, shared_);
  return marks_[size_t(rank * parallel::kMarkSets + s)];
}

Status CudaDeviceAccess::mark(int32_t rank, void* stream, parallel::MarkSet set) const {
  DSI_ASSIGN_OR_RETURN(void* e, mark_of(rank, set));
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status CudaDeviceAccess::wait_mark(int32_t rank, void* stream, parallel::MarkSet set) const {
  DSI_ASSIGN_OR_RETURN(void* e, mark_of(rank, set));
  DSI_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(e), 0));
  return Status::ok();
}

Status CudaDeviceAccess::sum_in_rank_order(float* const* bufs, int32_t world, size_t count, void* stream) const {
  if (world < 1 || world > shared_) return Status::errorf("in-process group: a device sum over {} ranks", world);
  detail::RankBuffers b;
  for (int32_t r = 0; r < world; ++r) {
    if (!bufs[r]) return Status::errorf("in-process group: rank {} gave no device buffer", r);
    b.buf[r] = bufs[r];
  }
  detail::launch_rank_order_sum(b, world, count, stream);
  DSI_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

Status CudaDeviceAccess::copy_on_device(void* dst, const void* src, size_t bytes, void* stream) const {
  if (bytes == 0) return Status::ok();
  if (!dst || !src) return Status::errorf("in-process group: a device copy of {} bytes without a buffer", bytes);
  DSI_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

}  // namespace dsinfer::backends
