// CUDA encoders of the KV storage formats (kv_format.h): the ring / compressed-entry write of the main KV and the
// indexer-key write, bit-identical to kv_encode_row_ref / idx_encode_row_ref. Device pointers; one warp per row.
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// Rows x[i * ld .. + kKvDim) (fp32, before the FP8 simulation or after it: the same bytes) into cache rows
// dst_rows[i] (-1 or >= cache_rows: skipped) of a main KV cache of cache_rows rows.
Status kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                 void* stream);
// The same for indexer keys (kIdxDim floats a row, after the Hadamard + FP4 simulation).
Status idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                  void* stream);

}  // namespace dsinfer::ops::cuda
