// PinnedHostBuffer (see pinned_buffer.h).
#include "cuda/pinned_buffer.h"

#include "cuda/cuda_common.h"

namespace dsinfer::cuda {

Status PinnedHostBuffer::alloc(size_t bytes, const char* what) {
  release();
  if (bytes == 0) return Status::ok();
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::errorf("cudaHostAlloc of {} bytes for {} failed: {}", bytes, what, cudaGetErrorString(e));
  }
  p_ = static_cast<uint8_t*>(p);
  n_ = bytes;
  return Status::ok();
}

void PinnedHostBuffer::release() {
  if (p_) cudaFreeHost(p_);
  p_ = nullptr;
  n_ = 0;
}

}  // namespace dsinfer::cuda
