// Argument checks and launches of the KV format encoders (see kv_format_cuda.h).
#include "ops/kv_format/kv_format_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/kv_format/kv_format.h"
#include "ops/kv_format/kv_format_launch.h"

namespace dsinfer::ops::cuda {

namespace {
Status check(const char* who, const float* x, int64_t n, int64_t ld, int64_t dim, const int32_t* dst, uint8_t* cache,
             int64_t cache_rows) {
  if (n < 0 || n > 0x7fffffff) return Status::errorf("{}: bad row count {}", who, n);
  if (ld < dim) return Status::errorf("{}: row stride {} below the row width {}", who, ld, dim);
  if (cache_rows < 0 || cache_rows > 0x7fffffff) return Status::errorf("{}: bad cache row count {}", who, cache_rows);
  if (n > 0 && (!x || !dst || !cache)) return Status::errorf("{}: null rows, destinations or cache", who);
  return Status::ok();
}
}  // namespace

Status kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                 void* stream) {
  DSI_RETURN_IF_ERROR(check("kv_encode", x, n, ld, kKvDim, dst_rows, cache, cache_rows));
  if (n == 0) return Status::ok();
  detail::launch_kv_encode(x, n, ld, dst_rows, cache, cache_rows, stream);
  DSI_CUDA_LAUNCHED("kv_encode_kernel");
  return Status::ok();
}

Status idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                  void* stream) {
  DSI_RETURN_IF_ERROR(check("idx_encode", x, n, ld, kIdxDim, dst_rows, cache, cache_rows));
  if (n == 0) return Status::ok();
  detail::launch_idx_encode(x, n, ld, dst_rows, cache, cache_rows, stream);
  DSI_CUDA_LAUNCHED("idx_encode_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
