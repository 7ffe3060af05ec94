// Argument checks and launches of the KV format encoders (see kv_format_cuda.h).
#include "ops/kv_format/kv_format_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/kv_format/kv_format.h"
#include "ops/kv_format/kv_format_launch.h"

namespace dsinfer::ops::cuda {

namespace {
Status check(const char* who, const float* x, int64_t n, int64_t ld, int64_t dim, const int32_t* dst, uint8_t* cache,
             int64_t cache_rows, const KvPages& g) {
  if (n < 0 || n > 0x7fffffff) return Status::errorf("{}: bad row count {}", who, n);
  if (ld < dim) return Status::errorf("{}: row stride {} below the row width {}", who, ld, dim);
  if (cache_rows < 0 || cache_rows > 0x7fffffff) return Status::errorf("{}: bad cache row count {}", who, cache_rows);
  if (n > 0 && (!x || !cache)) return Status::errorf("{}: null rows or cache", who);
  if (g.page_rows <= 0 || g.page_stride % 16 != 0 || g.offset < 0 || g.offset % 16 != 0)
    return Status::errorf("{}: bad pages ({} rows, stride {}, offset {})", who, g.page_rows, g.page_stride, g.offset);
  return Status::ok();
}
}  // namespace

Status kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                 void* stream, const KvPages& pages) {
  DSI_RETURN_IF_ERROR(check("kv_encode", x, n, ld, kKvDim, dst_rows, cache, cache_rows, pages));
  if (n == 0) return Status::ok();
  detail::launch_kv_encode(x, n, ld, dst_rows, cache, cache_rows, pages, stream);
  DSI_CUDA_LAUNCHED("kv_encode_kernel");
  return Status::ok();
}

Status kv_encode_ring(const float* x, int64_t ld, const KvRingStep& st, int64_t ring_rows, uint8_t* cache,
                      int64_t cache_rows, void* stream, const KvPages& pages) {
  DSI_RETURN_IF_ERROR(check("kv_encode_ring", x, st.T, ld, kKvDim, nullptr, cache, cache_rows, pages));
  if (ring_rows <= 0) return Status::errorf("kv_encode_ring: bad ring row count {}", ring_rows);
  if (st.T == 0) return Status::ok();
  if (!st.pos || !st.seq_of_token || !st.cu_seqlens || !st.start_pos || !st.slot)
    return Status::error("kv_encode_ring: the step's device arrays are missing");
  detail::launch_kv_encode_ring(x, ld, st, ring_rows, cache, cache_rows, pages, stream);
  DSI_CUDA_LAUNCHED("kv_encode_ring_kernel");
  return Status::ok();
}

Status idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                  void* stream, const KvPages& pages) {
  DSI_RETURN_IF_ERROR(check("idx_encode", x, n, ld, kIdxDim, dst_rows, cache, cache_rows, pages));
  if (n == 0) return Status::ok();
  detail::launch_idx_encode(x, n, ld, dst_rows, cache, cache_rows, pages, stream);
  DSI_CUDA_LAUNCHED("idx_encode_kernel");
  return Status::ok();
}

Status kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& pages, bool indexer, void* stream) {
  if (rows < 0 || rows > (int64_t(1) << 40)) return Status::errorf("kv_sanitize: bad row count {}", rows);
  if (pages.page_rows <= 0 || pages.page_stride % 16 != 0 || pages.offset < 0 || pages.offset % 16 != 0)
    return Status::errorf("kv_sanitize: bad pages ({} rows, stride {}, offset {})", pages.page_rows,
                          pages.page_stride, pages.offset);
  if (rows == 0) return Status::ok();
  if (!cache) return Status::error("kv_sanitize: null cache");
  detail::launch_kv_sanitize(cache, rows, pages, indexer, stream);
  DSI_CUDA_LAUNCHED("kv_sanitize_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
