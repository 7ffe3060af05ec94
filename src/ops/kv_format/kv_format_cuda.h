// CUDA encoders of the KV storage formats (kv_format.h): the ring / compressed-entry write of the main KV and the
// indexer-key write, bit-identical to kv_encode_row_ref / idx_encode_row_ref. Device pointers; one warp per row.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/kv_format/kv_format.h"  // KvPages

namespace dsinfer::ops::cuda {

// Rows x[i * ld .. + kKvDim) (fp32, before the FP8 simulation or after it: the same bytes) into cache rows
// dst_rows[i] (-1 or >= cache_rows: skipped; dst_rows nullptr: row i) of a main KV cache of cache_rows rows placed
// as `pages`.
Status kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                 void* stream, const KvPages& pages = kModel1Pages);
// The same for indexer keys (kIdxDim floats a row, after the Hadamard + FP4 simulation).
Status idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                  void* stream, const KvPages& pages = kIdxPages);

// Rows [0, rows) of random bytes (a benchmark's randomized state) made valid rows of the format: no NaN codes, RoPE
// channels of magnitude ~0.1-0.25, scales 2^-8 (main KV; indexer = true: indexer keys).
Status kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& pages, bool indexer, void* stream);

}  // namespace dsinfer::ops::cuda
