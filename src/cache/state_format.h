// Per-sequence state bytes in the state's storage formats, as pure functions of the config (issue 31): fp32 rows,
// bf16 rows (the `hf` numerics' format), and DeepSeek's official format for `official` numerics: the window ring and
// the compressed entries as FlashMLA "MODEL1" rows (FP8 e4m3 NoPE channels with one UE8M0 scale per 64, bf16 RoPE
// channels: 584 bytes a 512-wide row, ops/kv_format/kv_format.h) and the CSA indexer keys as FP8 with one fp32 scale
// (132 bytes for 128 channels). Compressor frontiers stay fp32 in every format (exactness of the running softmax).
// The sizes are compute_state_sizes's with the format's kv_elem_bytes (kFp8StateElem for FP8): the regions
// compute_state_layout allocates, so `dsinfer plan` and the runners agree (the runners' pages hold a ring or a token
// block's entries, not FlashMLA's padded 64-row blocks: 584, not 585, bytes a row).
#pragma once
#include <cstdint>

#include "cache/state_layout.h"
#include "core/status.h"
#include "io/config.h"

namespace dsinfer::cache {

enum class StateFormat { kFp32, kBf16, kFp8 };
const char* state_format_name(StateFormat f);
// StateCacheConfig::kv_elem_bytes of a format (4, 2, kFp8StateElem).
int32_t state_elem_bytes(StateFormat f);

// Bytes a main KV row (head_dim channels, the trailing rope_dim of them RoPE) takes in a format (FP8: codes, bf16
// RoPE channels and the scale bytes padded to 8). Fails on an FP8 row whose NoPE width is not a positive multiple
// of 64.
Result<double> kv_row_bytes(StateFormat f, int64_t head_dim, int64_t rope_dim);
// Bytes of one indexer key of index_head_dim channels (FP8: the codes and a 4-byte fp32 scale).
double index_key_bytes(StateFormat f, int64_t index_head_dim);

// compute_state_sizes's numbers in a format: bytes per context token (compressed entries + indexer keys over all
// layers), ring bytes (ring_rows = sliding_window + num_speculative_tokens rows a layer) and the fp32 frontiers.
// DeepSeek-V4 only (V4.1's state is not covered: an error naming it); FP8 needs 512-wide rows and 128-wide keys.
Result<StateSizes> compute_state_sizes_in(const io::ModelConfig& cfg, const StateCacheConfig& cc, StateFormat f);

// Bytes a sequence of `context` tokens holds in a format: the fixed part plus the per-token bytes of its context
// rounded up to whole token blocks of block_size tokens (the allocation granularity of compute_state_layout).
double state_bytes_per_sequence(const StateSizes& s, int64_t context, int64_t block_size);

}  // namespace dsinfer::cache
