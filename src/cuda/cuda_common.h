// CUDA-only helpers of the host-side CUDA sources (*_cuda.cpp, src/cuda/*.cpp, GPU tests): error checking that turns
// CUDA failures into Status (never abort). Includes the CUDA runtime and core/status.h (hence fmt), so .cu files do
// not include it: kernels report through launchers (ops/*/..._launch.h) checked by the _cuda.cpp side. Owned device
// memory is cuda/device_buffer.h.
#pragma once
#include <cuda_runtime.h>

#include "core/status.h"

namespace dsinfer::cuda {

inline Status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::ok();
  return Status::errorf("CUDA error in {} ({}:{}): {} ({})", what, file, line, cudaGetErrorName(e), cudaGetErrorString(e));
}

// Checks the last launch (and, with DSINFER_SYNC_CHECK set at build time, waits for it) so a failed kernel
// reports its own name.
inline Status check_launch(const char* kernel, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
#ifdef DSINFER_SYNC_CHECK
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
#endif
  return cuda_status(e, kernel, file, line);
}

#define DSI_CUDA_TRY(expr) DSI_RETURN_IF_ERROR(::dsinfer::cuda::cuda_status((expr), #expr, __FILE__, __LINE__))
#define DSI_CUDA_LAUNCHED(name) DSI_RETURN_IF_ERROR(::dsinfer::cuda::check_launch(name, __FILE__, __LINE__))

// Multiprocessors of the current device, for launch shapes only: 132 (an H100 / H200) when the query fails; a real
// device error surfaces at the launch check.
inline int current_sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;
  return n;
}

// True when a CUDA device is usable (GPU tests skip otherwise).
inline bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace dsinfer::cuda
