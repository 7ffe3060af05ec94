// Device discovery (see device.h).
#include "cuda/device.h"

#include "cuda/cuda_common.h"

namespace dsinfer::cuda {

Result<DeviceInfo> query_device(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return Status::error("no CUDA device is available");
  }
  if (device >= n) return Status::errorf("CUDA device {} requested but only {} present", device, n);
  cudaDeviceProp p{};
  DSI_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  DSI_CUDA_TRY(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  DSI_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  DeviceInfo d;
  d.name = p.name;
  d.sm_major = p.major;
  d.sm_minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_bytes = int64_t(total_b);
  d.free_bytes = int64_t(free_b);
  d.l2_bytes = p.l2CacheSize;
  if (p.major < 9) return Status::errorf("GPU '{}' is sm_{}{}; dsinfer's CUDA kernels need sm_90 or newer", d.name, p.major, p.minor);
  return d;
}

}  // namespace dsinfer::cuda
