// CUDA-only helpers shared by every .cu file and src/cuda/*.cpp: error checking that turns CUDA failures into
// Status (never abort), RAII device buffers whose allocation failure names the request and free memory.
// Host code outside src/cuda and *.cu files never includes this header.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

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

// True when a CUDA device is usable (GPU tests skip otherwise).
inline bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // Allocates n elements (contents undefined). Out of memory is an error naming the size and what is free.
  Status alloc(size_t n, const char* what = "buffer") {
    release();
    if (n == 0) return Status::ok();
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n * sizeof(T));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return Status::errorf("out of GPU memory allocating {} ({:.2f} GiB; {:.2f} GiB free of {:.2f} GiB): {}", what,
                            double(n * sizeof(T)) / (1 << 30), double(free_b) / (1 << 30), double(total_b) / (1 << 30),
                            cudaGetErrorString(e));
    }
    p_ = static_cast<T*>(p);
    n_ = n;
    return Status::ok();
  }
  Status upload(const T* host, size_t n, cudaStream_t s = nullptr) {
    if (n > n_) DSI_RETURN_IF_ERROR(alloc(n));
    DSI_CUDA_TRY(cudaMemcpyAsync(p_, host, n * sizeof(T), cudaMemcpyHostToDevice, s));
    return Status::ok();
  }
  Status download(T* host, size_t n, cudaStream_t s = nullptr) const {
    DSI_CUDA_TRY(cudaMemcpyAsync(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost, s));
    DSI_CUDA_TRY(cudaStreamSynchronize(s));
    return Status::ok();
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  void release() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dsinfer::cuda
