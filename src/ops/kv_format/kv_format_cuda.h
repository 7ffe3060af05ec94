// CUDA encoders of the KV storage formats (kv_format.h): the ring / compressed-entry write of the main KV and the
// indexer-key write, bit-identical to kv_encode_row_ref / idx_encode_row_ref. Device pointers; one warp per row.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/kv_format/kv_format.h"         // KvPages
#include "ops/kv_format/kv_format_launch.h"  // KvRingStep

namespace dsinfer::ops::cuda {

// Rows x[i * ld .. + kKvDim) (fp32, before the FP8 simulation or after it: the same bytes) into cache rows
// dst_rows[i] (-1 or >= cache_rows: skipped; dst_rows nullptr: row i) of a main KV cache of cache_rows rows placed
// as `pages`.
Status kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                 void* stream, const KvPages& pages = kModel1Pages);
// This step's rows x[t * ld ..) (t < st.T) into the window ring of a main KV cache (the FP8 state): token t of
// sequence s at pos writes ring row st.slot[s] * ring_rows + pos % ring_rows unless a later token of its chunk
// writes that row (pos < chunk end - ring_rows: the fp32 ring_write's rule). One launch with the bytes of
// fp8_ring_rows (ops/sparse_attention) followed by kv_encode; rows outside [0, cache_rows) are skipped.
Status kv_encode_ring(const float* x, int64_t ld, const KvRingStep& st, int64_t ring_rows, uint8_t* cache,
                      int64_t cache_rows, void* stream, const KvPages& pages = kModel1Pages);
// The same for indexer keys (kIdxDim floats a row, after the Hadamard + FP4 simulation).
Status idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache, int64_t cache_rows,
                  void* stream, const KvPages& pages = kIdxPages);

// Rows [0, rows) of random bytes (a benchmark's randomized state) made valid rows of the format: no NaN codes, RoPE
// channels of magnitude ~0.1-0.25, scales 2^-8 (main KV; indexer = true: indexer keys).
Status kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& pages, bool indexer, void* stream);

}  // namespace dsinfer::ops::cuda
