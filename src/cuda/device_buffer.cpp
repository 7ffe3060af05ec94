// Device memory primitives behind DeviceBuffer (see device_buffer.h).
#include "cuda/device_buffer.h"

#include "cuda/cuda_common.h"

namespace dsinfer::cuda::detail {

Status device_alloc(void** p, size_t bytes, const char* what) {
  *p = nullptr;
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  *p = nullptr;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return Status::errorf("out of GPU memory allocating {} ({:.3f} GiB; {:.2f} GiB free of {:.2f} GiB): {}", what,
                        double(bytes) / (1 << 30), double(free_b) / (1 << 30), double(total_b) / (1 << 30),
                        cudaGetErrorString(e));
}

void device_free(void* p) { cudaFree(p); }

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) DSI_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return Status::ok();
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) DSI_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace dsinfer::cuda::detail
