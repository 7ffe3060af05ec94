// compute_state_sizes_v41 / compute_state_layout_v41 (see state_layout.h): DeepSeek-V4.1's per-sequence state
// (research/dsv41-architecture.md §2.11). Reusing layers own a window ring only; a KV source's compressed
// entries and indexer keys are written once and read by every layer up to the next source. The compressor
// frontier of a ratio-r source (r > 1) holds the open group's projections: r rows of [kv | score] fp32, plus the
// speculative rows; ratio-1 sources emit every token and need none. The Engram n-gram history keeps the last
// max_ngram_size compressed ids (plus the speculative rows) so a chunk can hash across its start.
#include <algorithm>
#include <numeric>

#include "cache/state_layout.h"

namespace dsinfer::cache {

namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

bool is_kv_source(const io::ModelConfig& cfg, int64_t l) {
  const auto& s = cfg.v41.kv_source_layer_ids;
  return std::find(s.begin(), s.end(), l) != s.end();
}

int64_t ngram_rows(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  return cfg.v41.engram_layer_ids.empty() ? 0 : cfg.v41.engram_max_ngram_size + cc.num_speculative_tokens;
}

}  // namespace

StateSizes compute_state_sizes_v41(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  StateSizes s;
  const int64_t e = cc.kv_elem_bytes, ring_rows = cfg.sliding_window + cc.num_speculative_tokens;
  const int64_t layers = cfg.num_hidden_layers + (cc.include_mtp ? cfg.num_nextn_predict_layers : 0);
  s.ring_bytes = layers * ring_rows * cfg.head_dim * e;
  for (int64_t l : cfg.v41.kv_source_layer_ids) {
    const int64_t r = cfg.ratio(l);
    s.bytes_per_token += double((cfg.head_dim + cfg.index_head_dim) * e) / double(r);
    if (r > 1) s.frontier_bytes += (r + cc.num_speculative_tokens) * 2 * cfg.head_dim * 4;
  }
  s.frontier_bytes += ngram_rows(cfg, cc) * 4;
  return s;
}

Result<StateLayout> compute_state_layout_v41(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  if (cfg.head_dim <= 0 || cfg.sliding_window <= 0)
    return Status::errorf("state layout: head_dim ({}) and sliding_window ({}) must be > 0", cfg.head_dim, cfg.sliding_window);
  if (cc.kv_elem_bytes != 2 && cc.kv_elem_bytes != 4)
    return Status::errorf("state layout: kv_elem_bytes must be 2 or 4, found {}", cc.kv_elem_bytes);
  if (cc.num_speculative_tokens < 0) return Status::errorf("state layout: num_speculative_tokens must be >= 0, found {}", cc.num_speculative_tokens);
  int64_t lcm = 1;
  for (int64_t l : cfg.v41.kv_source_layer_ids) lcm = std::lcm(lcm, cfg.ratio(l));
  StateLayout L;
  L.block_size = cc.block_size > 0 ? cc.block_size : lcm * ((16 + lcm - 1) / lcm);
  if (cc.block_size < 0 || L.block_size % lcm != 0)
    return Status::errorf("state layout: block_size {} must be a positive multiple of every KV source's compress ratio "
                          "(lcm {})", cc.block_size, lcm);
  L.ring_rows = cfg.sliding_window + cc.num_speculative_tokens;
  L.num_speculative_tokens = cc.num_speculative_tokens;
  L.head_dim = cfg.head_dim;
  L.index_head_dim = cfg.index_head_dim;
  L.kv_elem_bytes = cc.kv_elem_bytes;
  const int64_t e = cc.kv_elem_bytes;
  const int64_t layers = cfg.num_hidden_layers + (cc.include_mtp ? cfg.num_nextn_predict_layers : 0);
  int64_t slot = 0, block = 0;
  for (int64_t l = 0; l < layers; ++l) {
    LayerState ls;
    ls.ratio = l < cfg.num_hidden_layers ? cfg.ratio(l) : 0;
    ls.type = ls.ratio == 0 ? io::AttnType::Sliding : io::AttnType::CSA2;
    ls.ring_offset = slot;
    slot = align_up(slot + L.ring_rows * cfg.head_dim * e, kAlign);
    if (l < cfg.num_hidden_layers && is_kv_source(cfg, l)) {
      if (ls.ratio > 1) {
        ls.frontier_rows = ls.ratio + cc.num_speculative_tokens;
        ls.frontier_width = 2 * cfg.head_dim;  // kv then score, fp32
        ls.frontier_offset = slot;
        slot = align_up(slot + ls.frontier_rows * ls.frontier_width * 4, kAlign);
      }
      ls.entries_per_block = L.block_size / ls.ratio;
      ls.entries_offset = block;
      block = align_up(block + ls.entries_per_block * cfg.head_dim * e, kAlign);
      ls.index_keys_offset = block;
      block = align_up(block + ls.entries_per_block * cfg.index_head_dim * e, kAlign);
    }
    L.layers.push_back(ls);
  }
  if (const int64_t rows = ngram_rows(cfg, cc); rows > 0) {
    L.ngram_rows = rows;
    L.ngram_offset = slot;
    slot = align_up(slot + rows * 4, kAlign);
  }
  L.slot_bytes = slot;
  L.block_bytes = block;
  return L;
}

}  // namespace dsinfer::cache
