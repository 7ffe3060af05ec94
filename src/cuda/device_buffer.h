// DeviceBuffer<T>: the one owning RAII handle of device memory (weights, state, scratch, workspaces, test and
// bench buffers). Plain header without CUDA types (implemented in device_buffer.cpp against the CUDA runtime), so
// host .cpp files of the CUDA backend use it directly. Allocation failure is a Status naming what was being
// allocated, its size and the free device memory. Copies are synchronous (cudaMemcpy on the legacy stream).
#pragma once
#include <cstddef>
#include <utility>

#include "core/status.h"

namespace dsinfer::cuda {

namespace detail {
Status device_alloc(void** p, size_t bytes, const char* what);
void device_free(void* p);
Status copy_to_device(void* dst, const void* src, size_t bytes);
Status copy_to_host(void* dst, const void* src, size_t bytes);
}  // namespace detail

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

  // Replaces the contents with n uninitialised elements (n == 0 leaves the buffer empty).
  Status alloc(size_t n, const char* what = "buffer") {
    release();
    if (n == 0) return Status::ok();
    void* p = nullptr;
    DSI_RETURN_IF_ERROR(detail::device_alloc(&p, n * sizeof(T), what));
    p_ = static_cast<T*>(p);
    n_ = n;
    return Status::ok();
  }
  // Copies n elements from host memory, (re)allocating when the buffer holds fewer.
  Status upload(const T* host, size_t n, const char* what = "buffer") {
    if (n > n_) DSI_RETURN_IF_ERROR(alloc(n, what));
    return detail::copy_to_device(p_, host, n * sizeof(T));
  }
  Status download(T* host, size_t n) const { return detail::copy_to_host(host, p_, n * sizeof(T)); }
  // Byte buffers (DeviceBuffer<uint8_t>) holding arrays of another type: weights in storage format, packed plans.
  Status upload_bytes(const void* host, size_t bytes, const char* what = "buffer") {
    static_assert(sizeof(T) == 1, "upload_bytes is for byte buffers");
    return upload(static_cast<const T*>(host), bytes, what);
  }
  template <typename U>
  U* as() const {
    return reinterpret_cast<U*>(p_);
  }

  T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void release() {
    if (p_) detail::device_free(p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dsinfer::cuda
