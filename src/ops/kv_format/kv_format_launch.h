// Kernel launchers behind kv_format_cuda.h (validated by kv_format_cuda.cpp; no CUDA types, no Status).
#pragma once
#include <cstdint>

#include "ops/kv_format/kv_format.h"  // KvPages

namespace dsinfer::ops::cuda {
// The parts of a ragged step (ops/step_cuda.h StepDevice, same meaning) that the ring write reads: tokens [0, T),
// token t at pos[t] of sequence seq_of_token[t], whose tokens are [cu_seqlens[s], cu_seqlens[s + 1]) from
// start_pos[s], in state slot slot[s]. Device pointers.
struct KvRingStep {
  int64_t T = 0;
  const int64_t* pos = nullptr;
  const int32_t* seq_of_token = nullptr;
  const int32_t* cu_seqlens = nullptr;
  const int64_t* start_pos = nullptr;
  const int32_t* slot = nullptr;
};
}  // namespace dsinfer::ops::cuda

namespace dsinfer::ops::cuda::detail {
void launch_kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                      int64_t cache_rows, const KvPages& g, void* stream);
void launch_kv_encode_ring(const float* x, int64_t ld, const KvRingStep& st, int64_t ring_rows, uint8_t* cache,
                           int64_t cache_rows, const KvPages& g, void* stream);
void launch_idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                       int64_t cache_rows, const KvPages& g, void* stream);
void launch_kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& g, bool indexer, void* stream);
}  // namespace dsinfer::ops::cuda::detail
