// Kernel launchers behind kv_format_cuda.h (validated by kv_format_cuda.cpp; no CUDA types, no Status).
#pragma once
#include <cstdint>

#include "ops/kv_format/kv_format.h"  // KvPages
#include "ops/step_cuda.h"             // StepDevice

namespace dsinfer::ops::cuda::detail {
void launch_kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                      int64_t cache_rows, const KvPages& g, void* stream);
void launch_kv_encode_ring(const float* x, int64_t ld, const StepDevice& st, int64_t ring_rows, uint8_t* cache,
                           int64_t cache_rows, const KvPages& g, void* stream);
void launch_idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                       int64_t cache_rows, const KvPages& g, void* stream);
void launch_kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& g, bool indexer, void* stream);
}  // namespace dsinfer::ops::cuda::detail
