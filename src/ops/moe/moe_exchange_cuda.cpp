// Row packing of the expert dispatch (see moe_exchange_cuda.h): argument checks and the launches.
#include "ops/moe/moe_exchange_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/moe/moe_exchange_launch.h"

namespace dsinfer::ops::cuda {

Status pack_rows_cuda(const float* x, int64_t dim, const int32_t* rows, int64_t n, WireType type, void* out,
                      void* stream) {
  if (n < 0 || dim <= 0) return Status::errorf("pack_rows_cuda: bad n={} or dim={}", n, dim);
  if (n == 0) return Status::ok();
  if (!x || !out) return Status::error("pack_rows_cuda: null input or output");
  detail::launch_pack_rows(x, dim, rows, n, type == WireType::kBf16, out, stream);
  DSI_CUDA_LAUNCHED("pack_rows_kernel");
  return Status::ok();
}

Status widen_rows_cuda(const void* in, int64_t n, int64_t dim, WireType type, float* out, void* stream) {
  if (n < 0 || dim <= 0) return Status::errorf("widen_rows_cuda: bad n={} or dim={}", n, dim);
  if (n == 0) return Status::ok();
  if (!in || !out) return Status::error("widen_rows_cuda: null input or output");
  detail::launch_widen_rows(in, n * dim, type == WireType::kBf16, out, stream);
  DSI_CUDA_LAUNCHED("widen_rows_kernel");
  return Status::ok();
}

Status fill_cuda(float* out, int64_t n, float value, void* stream) {
  if (n < 0) return Status::errorf("fill_cuda: bad n={}", n);
  if (n == 0) return Status::ok();
  if (!out) return Status::error("fill_cuda: null output");
  detail::launch_fill(out, n, value, stream);
  DSI_CUDA_LAUNCHED("fill_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
