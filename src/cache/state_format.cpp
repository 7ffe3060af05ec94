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

Result<double> kv_row_bytes(StateFormat f, int64_t head_dim, int64_t rope_dim) {
  if (f == StateFormat::kFp32) return double(head_dim * 4);
  if (f == StateFormat::kBf16) return double(head_dim * 2);
  const int64_t nope = head_dim - rope_dim;
  if (nope <= 0 || nope % ops::kKvTile != 0)
    return Status::errorf("FP8 KV rows need NoPE channels in whole tiles of {} (head_dim {}, rope_dim {})",
                          ops::kKvTile, head_dim, rope_dim);
  const int64_t data = nope + 2 * rope_dim;                      // e4m3 codes + bf16 RoPE channels
  const int64_t scales = (nope / ops::kKvTile + 7) / 8 * 8;      // UE8M0 bytes, padded to 8
  const int64_t rows = ops::kKvBlockRows;
  const int64_t block = (rows * (data + scales) + data - 1) / data * data;  // padded to whole data rows
  return double(block) / double(rows);
}

double index_key_bytes(StateFormat f, int64_t index_head_dim) {
  if (f == StateFormat::kFp32) return double(index_head_dim * 4);
  if (f == StateFormat::kBf16) return double(index_head_dim * 2);
  return double(index_head_dim + 4);
}

Result<StateSizes> compute_state_sizes_in(const io::ModelConfig& cfg, const StateCacheConfig& cc, StateFormat f) {
  if (cfg.is_v41()) return Status::error("state formats: DeepSeek-V4.1's state is not covered");
  DSI_ASSIGN_OR_RETURN(const double row, kv_row_bytes(f, cfg.head_dim, cfg.qk_rope_head_dim));
  StateCacheConfig fp32 = cc;
  fp32.kv_elem_bytes = 4;
  StateSizes s = compute_state_sizes(cfg, fp32);  // the frontiers (fp32 in every format) and the layer walk
  const int64_t ring_rows = cfg.sliding_window + cc.num_speculative_tokens;
  const int64_t layers = int64_t(cfg.layer_types.size()) + (cc.include_mtp ? cfg.num_nextn_predict_layers : 0);
  const double ring_rows_stored =
      f == StateFormat::kFp8 ? double((ring_rows + ops::kKvBlockRows - 1) / ops::kKvBlockRows * ops::kKvBlockRows)
                             : double(ring_rows);
  s.ring_bytes = int64_t(double(layers) * ring_rows_stored * row + 0.5);
  s.bytes_per_token = 0;
  for (size_t i = 0; i < cfg.layer_types.size(); ++i) {
    const AttnType t = cfg.layer_types[i];
    if (t == AttnType::Sliding) continue;
    const double ratio = double(cfg.compress_ratios[i]);
    s.bytes_per_token += row / ratio;
    if (t == AttnType::CSA) s.bytes_per_token += index_key_bytes(f, cfg.index_head_dim) / ratio;
  }
  return s;
}

double state_bytes_per_sequence(const StateSizes& s, int64_t context, int64_t block_size) {
  const int64_t b = block_size > 0 ? block_size : 1;
  return double(s.fixed_bytes()) + double((context + b - 1) / b * b) * s.bytes_per_token;
}

}  // namespace dsinfer::cache
