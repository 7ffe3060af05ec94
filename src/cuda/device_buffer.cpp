// Device memory primitives behind DeviceBuffer (see device_buffer.h).
#include "cuda/device_buffer.h"

#include <mutex>
#include <unordered_map>

#include "cuda/cuda_common.h"
#include "cuda/device_bytes.h"

namespace dsinfer::cuda {

namespace {
// Every live allocation's size (a buffer is freed by its pointer alone), and their sum. Allocations are few and
// grow-only (weights, state, scratch), so one lock costs nothing.
struct LiveBytes {
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;
  int64_t total = 0;
};
LiveBytes& live() {
  static LiveBytes l;
  return l;
}
}  // namespace

int64_t device_buffer_bytes() {
  LiveBytes& l = live();
  std::lock_guard<std::mutex> lk(l.mu);
  return l.total;
}

namespace detail {

Status device_alloc(void** p, size_t bytes, const char* what) {
  *p = nullptr;
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) {
    LiveBytes& l = live();
    std::lock_guard<std::mutex> lk(l.mu);
    l.sizes[*p] = bytes;
    l.total += int64_t(bytes);
    return Status::ok();
  }
  (void)cudaGetLastError();
  *p = nullptr;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return Status::errorf("out of GPU memory allocating {} ({:.3f} GiB; {:.2f} GiB free of {:.2f} GiB): {}", what,
                        double(bytes) / (1 << 30), double(free_b) / (1 << 30), double(total_b) / (1 << 30),
                        cudaGetErrorString(e));
}

void device_free(void* p) {
  {  // forgotten before the free: the address may be handed out again at once
    LiveBytes& l = live();
    std::lock_guard<std::mutex> lk(l.mu);
    if (auto it = l.sizes.find(p); it != l.sizes.end()) {
      l.total -= int64_t(it->second);
      l.sizes.erase(it);
    }
  }
  cudaFree(p);
}

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) DSI_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return Status::ok();
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) DSI_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace detail

}  // namespace dsinfer::cuda
