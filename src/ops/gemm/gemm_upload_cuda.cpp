// Device allocations for weight uploads (DeviceBlob, upload_weight; see gemm_cuda.h).
#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_cuda.h"

namespace dsinfer::ops::cuda {

DeviceBlob::DeviceBlob(DeviceBlob&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
DeviceBlob& DeviceBlob::operator=(DeviceBlob&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
DeviceBlob::~DeviceBlob() {
  if (p_) cudaFree(p_);
}

Result<DeviceBlob> DeviceBlob::alloc(size_t bytes, const char* what) {
  DeviceBlob b;
  if (bytes == 0) return b;
  cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    b.p_ = nullptr;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status::errorf("out of GPU memory allocating {} ({:.3f} GiB; {:.2f} GiB free of {:.2f} GiB): {}", what,
                          double(bytes) / (1 << 30), double(free_b) / (1 << 30), double(total_b) / (1 << 30),
                          cudaGetErrorString(e));
  }
  b.n_ = bytes;
  return b;
}

Result<DeviceBlob> DeviceBlob::upload(const void* host, size_t bytes, const char* what) {
  DSI_ASSIGN_OR_RETURN(DeviceBlob b, alloc(bytes, what));
  if (bytes) DSI_CUDA_TRY(cudaMemcpy(b.p_, host, bytes, cudaMemcpyHostToDevice));
  return b;
}

Result<OwnedDeviceWeight> upload_weight(WeightFormat fmt, int64_t rows, int64_t cols, const void* host_data,
                                        const void* host_scale, bool scale_e8m0, int64_t block_n, int64_t block_k) {
  OwnedDeviceWeight o;
  o.w.fmt = fmt;
  o.w.rows = rows;
  o.w.cols = cols;
  o.w.scale_e8m0 = scale_e8m0;
  o.w.block_n = block_n;
  o.w.block_k = block_k;
  if (rows <= 0 || cols <= 0 || !host_data) return Status::errorf("upload_weight: bad shape [{}, {}] or null data", rows, cols);
  DSI_ASSIGN_OR_RETURN(o.data, DeviceBlob::upload(host_data, weight_data_bytes(fmt, rows, cols), "weight data"));
  o.w.data = o.data.data();
  const size_t sb = weight_scale_bytes(fmt, rows, cols, scale_e8m0, block_n, block_k);
  if (sb) {
    if (!host_scale) return Status::error("upload_weight: quantized weight without host scales");
    DSI_ASSIGN_OR_RETURN(o.scale, DeviceBlob::upload(host_scale, sb, "weight scales"));
    o.w.scale = o.scale.data();
  }
  return o;
}

}  // namespace dsinfer::ops::cuda
