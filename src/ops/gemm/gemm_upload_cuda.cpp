// upload_weight (see gemm_cuda.h): a weight from host arrays in storage format into owned device buffers.
#include <cstdint>

#include "ops/gemm/gemm_cuda.h"

namespace dsinfer::ops::cuda {

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
  DSI_RETURN_IF_ERROR(o.data.upload(static_cast<const uint8_t*>(host_data), weight_data_bytes(fmt, rows, cols), "weight data"));
  o.w.data = o.data.data();
  const size_t sb = weight_scale_bytes(fmt, rows, cols, scale_e8m0, block_n, block_k);
  if (sb) {
    if (!host_scale) return Status::error("upload_weight: quantized weight without host scales");
    DSI_RETURN_IF_ERROR(o.scale.upload(static_cast<const uint8_t*>(host_scale), sb, "weight scales"));
    o.w.scale = o.scale.data();
  }
  return o;
}

}  // namespace dsinfer::ops::cuda
