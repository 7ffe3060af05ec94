// PinnedHostBuffer: page-locked host memory (cudaHostAlloc). Asynchronous copies on a stream (the prefix cache's
// host tier), and, with unified addressing (every 64-bit Linux CUDA system), memory that kernels of every GPU read
// directly over PCIe (the Engram tables' host placement, model/engram_rows.h). Plain header without CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/status.h"

namespace dsinfer::cuda {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~PinnedHostBuffer() { release(); }
  // Replaces the contents with `bytes` uninitialised bytes; 0 leaves it empty.
  Status alloc(size_t bytes, const char* what);
  void release();  // cudaFreeHost (synchronises with work still reading or writing it)
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dsinfer::cuda
