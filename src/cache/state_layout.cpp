// compute_state_sizes / compute_state_layout: the DeepSeek-V4 state shapes of research §11.1 turned into
// byte sizes and offsets. Frontier shapes follow the official compressor buffers: CSA (overlapping, coff=2)
// keeps 2*ratio rows of 2*head_dim channels for kv and for score; HCA keeps ratio rows of head_dim each;
// the CSA indexer compressor is the CSA shape with index_head_dim.
#include "cache/state_layout.h"

#include <numeric>

namespace dsinfer::cache {

using io::AttnType;

namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct LayerDims {
  AttnType type;
  int64_t ratio;
};

std::vector<LayerDims> layer_dims(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  std::vector<LayerDims> out;
  for (size_t i = 0; i < cfg.layer_types.size(); ++i)
    out.push_back({cfg.layer_types[i], cfg.layer_types[i] == AttnType::Sliding ? 0 : cfg.compress_ratios[i]});
  if (cc.include_mtp)  // MTP layers are sliding-only (research §1.2)
    for (int64_t i = 0; i < cfg.num_nextn_predict_layers; ++i) out.push_back({AttnType::Sliding, 0});
  return out;
}

int64_t frontier_rows(const LayerDims& l, const StateCacheConfig& cc) {
  // Live rows: CSA = previous complete window (overlap seed) + open window; HCA = open window; plus the
  // speculative tokens of one step, so a rejected draft never overwrote a row still needed.
  return (l.type == AttnType::CSA ? 2 * l.ratio : l.ratio) + cc.num_speculative_tokens;
}

// Bytes of `rows` main KV rows (head_dim channels) / indexer keys in elements of e bytes (kFp8StateElem: the storage
// format's rows, ops/kv_format).
int64_t kv_rows_bytes(int64_t rows, int64_t head_dim, int64_t e) {
  return e == kFp8StateElem ? ops::kv_page_bytes(rows) : rows * head_dim * e;
}
int64_t index_rows_bytes(int64_t rows, int64_t index_head_dim, int64_t e) {
  return e == kFp8StateElem ? ops::idx_page_bytes(rows) : rows * index_head_dim * e;
}

}  // namespace

StateSizes compute_state_sizes(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  if (cfg.is_v41()) return compute_state_sizes_v41(cfg, cc);
  StateSizes s;
  const int64_t e = cc.kv_elem_bytes, ring_rows = cfg.sliding_window + cc.num_speculative_tokens;
  for (const LayerDims& l : layer_dims(cfg, cc)) {
    s.ring_bytes += kv_rows_bytes(ring_rows, cfg.head_dim, e);
    if (l.type == AttnType::Sliding) continue;
    const int64_t rows = frontier_rows(l, cc);
    const double entry = double(kv_rows_bytes(1, cfg.head_dim, e)) / double(l.ratio);
    if (l.type == AttnType::CSA) {
      s.bytes_per_token += entry + double(index_rows_bytes(1, cfg.index_head_dim, e)) / double(l.ratio);
      s.frontier_bytes += rows * 2 * (2 * cfg.head_dim) * 4 + rows * 2 * (2 * cfg.index_head_dim) * 4;
    } else {
      s.bytes_per_token += entry;
      s.frontier_bytes += rows * 2 * cfg.head_dim * 4;
    }
  }
  return s;
}

Result<StateLayout> compute_state_layout(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  if (cfg.is_v41()) return compute_state_layout_v41(cfg, cc);
  if (cfg.head_dim <= 0) return Status::errorf("state layout: head_dim must be > 0, found {}", cfg.head_dim);
  if (cfg.sliding_window <= 0)
    return Status::errorf("state layout: sliding_window must be > 0, found {}", cfg.sliding_window);
  if (cc.kv_elem_bytes != 2 && cc.kv_elem_bytes != 4 && cc.kv_elem_bytes != kFp8StateElem)
    return Status::errorf("state layout: kv_elem_bytes must be 2, 4 or {} (FP8 storage format), found {}",
                          kFp8StateElem, cc.kv_elem_bytes);
  if (cc.kv_elem_bytes == kFp8StateElem &&
      (cfg.head_dim != ops::kKvDim || cfg.qk_rope_head_dim != ops::kKvRope || cfg.index_head_dim != ops::kIdxDim))
    return Status::errorf("state layout: the FP8 storage format needs head_dim {}, qk_rope_head_dim {} and "
                          "index_head_dim {} (found {}, {}, {})", ops::kKvDim, ops::kKvRope, ops::kIdxDim,
                          cfg.head_dim, cfg.qk_rope_head_dim, cfg.index_head_dim);
  if (cc.num_speculative_tokens < 0)
    return Status::errorf("state layout: num_speculative_tokens must be >= 0, found {}", cc.num_speculative_tokens);
  if (cfg.compress_ratios.size() != cfg.layer_types.size())
    return Status::errorf("state layout: {} compress_ratios for {} layer_types", cfg.compress_ratios.size(),
                          cfg.layer_types.size());
  const std::vector<LayerDims> dims = layer_dims(cfg, cc);
  bool any_csa = false;
  int64_t lcm = 1;
  for (const LayerDims& l : dims) {
    if (l.type == AttnType::Sliding) continue;
    if (l.ratio <= 0) return Status::errorf("state layout: compressed layer with compress ratio {}", l.ratio);
    lcm = std::lcm(lcm, l.ratio);
    any_csa |= l.type == AttnType::CSA;
  }
  if (any_csa && cfg.index_head_dim <= 0)
    return Status::errorf("state layout: CSA layers need index_head_dim > 0, found {}", cfg.index_head_dim);

  StateLayout L;
  // Default: the smallest block that keeps every layer's entries block-aligned (research §11.5: multiples
  // of lcm(4, 128) = 128 keep HCA boundaries aligned), but at least 16 tokens so tables stay short.
  L.block_size = cc.block_size > 0 ? cc.block_size : lcm * ((16 + lcm - 1) / lcm);
  if (cc.block_size < 0 || L.block_size % lcm != 0)
    return Status::errorf("state layout: block_size {} must be a positive multiple of every compress ratio "
                          "(lcm {})", cc.block_size, lcm);
  L.ring_rows = cfg.sliding_window + cc.num_speculative_tokens;
  L.num_speculative_tokens = cc.num_speculative_tokens;
  L.head_dim = cfg.head_dim;
  L.index_head_dim = cfg.index_head_dim;
  L.kv_elem_bytes = cc.kv_elem_bytes;
  const int64_t e = cc.kv_elem_bytes;

  int64_t slot = 0, block = 0;
  for (const LayerDims& d : dims) {
    LayerState ls;
    ls.type = d.type;
    ls.ratio = d.ratio;
    ls.ring_offset = slot;
    slot = align_up(slot + kv_rows_bytes(L.ring_rows, cfg.head_dim, e), kAlign);
    if (d.type != AttnType::Sliding) {
      ls.frontier_rows = frontier_rows(d, cc);
      const int64_t ch = d.type == AttnType::CSA ? 2 * cfg.head_dim : cfg.head_dim;
      ls.frontier_width = 2 * ch;  // kv channels then score channels, fp32
      ls.frontier_offset = slot;
      slot = align_up(slot + ls.frontier_rows * ls.frontier_width * 4, kAlign);
      ls.entries_per_block = L.block_size / d.ratio;
      ls.entries_offset = block;
      block = align_up(block + kv_rows_bytes(ls.entries_per_block, cfg.head_dim, e), kAlign);
      if (d.type == AttnType::CSA) {
        ls.index_frontier_width = 2 * 2 * cfg.index_head_dim;
        ls.index_frontier_offset = slot;
        slot = align_up(slot + ls.frontier_rows * ls.index_frontier_width * 4, kAlign);
        ls.index_keys_offset = block;
        block = align_up(block + index_rows_bytes(ls.entries_per_block, cfg.index_head_dim, e), kAlign);
      }
    }
    L.layers.push_back(ls);
  }
  L.slot_bytes = slot;
  L.block_bytes = block;
  return L;
}

StateLayout::Loc StateLayout::compressed_entry(int64_t layer, int64_t j) const {
  const LayerState& l = layers[size_t(layer)];
  if (fp8()) return {j / l.entries_per_block, ops::kv_data_offset(entry_pages(layer), j % l.entries_per_block)};
  return {j / l.entries_per_block, l.entries_offset + (j % l.entries_per_block) * head_dim * kv_elem_bytes};
}

StateLayout::Loc StateLayout::indexer_key(int64_t layer, int64_t j) const {
  const LayerState& l = layers[size_t(layer)];
  if (fp8()) return {j / l.entries_per_block, ops::idx_code_offset(index_key_pages(layer), j % l.entries_per_block)};
  return {j / l.entries_per_block, l.index_keys_offset + (j % l.entries_per_block) * index_head_dim * kv_elem_bytes};
}

int64_t StateLayout::ring_row(int64_t layer, int64_t pos) const {
  if (fp8()) return ops::kv_data_offset(ring_pages(layer), pos % ring_rows);
  return layers[size_t(layer)].ring_offset + (pos % ring_rows) * head_dim * kv_elem_bytes;
}

int64_t StateLayout::frontier_row(int64_t layer, int64_t pos) const {
  const LayerState& l = layers[size_t(layer)];
  return l.frontier_offset + (pos % l.frontier_rows) * l.frontier_width * 4;
}

}  // namespace dsinfer::cache
