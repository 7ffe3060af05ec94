// State bytes in the storage formats (see state_format.h).
#include "cache/state_format.h"

#include "ops/kv_format/kv_format.h"

namespace dsinfer::cache {

using io::AttnType;

const char* state_format_name(StateFormat f) {
  switch (f) {
    case StateFormat::kFp32: return "fp32";
    case StateFormat::kBf16: return "bf16";
    case StateFormat::kFp8: return "fp8";
  }
  return "?";
}

int32_t state_elem_bytes(StateFormat f) {
  switch (f) {
    case StateFormat::kFp32: return 4;
    case StateFormat::kBf16: return 2;
    case StateFormat::kFp8: return kFp8StateElem;
  }
  return 4;
}

Result<double> kv_row_bytes(StateFormat f, int64_t head_dim, int64_t rope_dim) {
  if (f == StateFormat::kFp32) return double(head_dim * 4);
  if (f == StateFormat::kBf16) return double(head_dim * 2);
  const int64_t nope = head_dim - rope_dim;
  if (nope <= 0 || nope % ops::kKvTile != 0)
    return Status::errorf("FP8 KV rows need NoPE channels in whole tiles of {} (head_dim {}, rope_dim {})",
                          ops::kKvTile, head_dim, rope_dim);
  const int64_t data = nope + 2 * rope_dim;                  // e4m3 codes + bf16 RoPE channels
  const int64_t scales = (nope / ops::kKvTile + 7) / 8 * 8;  // UE8M0 bytes, padded to 8
  return double(data + scales);
}

double index_key_bytes(StateFormat f, int64_t index_head_dim) {
  if (f == StateFormat::kFp32) return double(index_head_dim * 4);
  if (f == StateFormat::kBf16) return double(index_head_dim * 2);
  return double(index_head_dim + 4);
}

Result<StateSizes> compute_state_sizes_in(const io::ModelConfig& cfg, const StateCacheConfig& cc, StateFormat f) {
  if (cfg.is_v41()) return Status::error("state formats: DeepSeek-V4.1's state is not covered");
  DSI_ASSIGN_OR_RETURN(const double row, kv_row_bytes(f, cfg.head_dim, cfg.qk_rope_head_dim));
  if (f == StateFormat::kFp8 && (row != double(ops::kKvRowBytes) || cfg.index_head_dim != ops::kIdxDim))
    return Status::errorf("state formats: the FP8 storage format is for 512-wide rows (448 + 64) and 128-wide "
                          "indexer keys (head_dim {}, qk_rope_head_dim {}, index_head_dim {})", cfg.head_dim,
                          cfg.qk_rope_head_dim, cfg.index_head_dim);
  StateCacheConfig in = cc;
  in.kv_elem_bytes = state_elem_bytes(f);
  return compute_state_sizes(cfg, in);  // the runners' sizing rule (compute_state_layout's regions, unpadded)
}

double state_bytes_per_sequence(const StateSizes& s, int64_t context, int64_t block_size) {
  const int64_t b = block_size > 0 ? block_size : 1;
  return double(s.fixed_bytes()) + double((context + b - 1) / b * b) * s.bytes_per_token;
}

}  // namespace dsinfer::cache
