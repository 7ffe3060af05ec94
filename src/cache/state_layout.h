// Sizes and byte layout of DeepSeek-V4 per-sequence inference state (research/dsv4-architecture.md §11),
// computed from ModelConfig. Two regions per sequence:
//  * a fixed-size *slot*: per layer the sliding-window ring, and per compressed layer the compressor
//    frontier (CSA: main + indexer); bounded, never shared, rewritten in place (ring / frontier rows are
//    indexed by position modulo their row count, so rejected speculative rows are simply overwritten);
//  * growing *token blocks*, each holding the state of `block_size` tokens of context for ALL compressed
//    layers: compressed entries (one per `ratio` tokens) and CSA indexer keys. Complete blocks are
//    content-stable, which is what lets a prefix cache share them with reference counts.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "dsinfer/engine.h"
#include "io/config.h"
#include "ops/kv_format/kv_format.h"

namespace dsinfer::cache {

struct StateCacheConfig {
  int64_t budget_bytes = 0;     // total bytes for slots + blocks
  int64_t block_size = 0;       // tokens per block; 0 = lcm of the compress ratios (128 for V4), min 16
  int32_t max_num_seqs = EngineOptions{}.max_num_seqs;  // most slots ever created (sequences holding state at once)
  int64_t max_model_len = 0;    // longest sequence (prompt + output); 0 = max_position_embeddings
  int32_t num_speculative_tokens = 0;  // drafts per step: extra ring/frontier rows so rollback is free
  // Ring rows, compressed entries, indexer keys: 4 (fp32 reference), 2 (bf16) or kFp8StateElem: DeepSeek's storage
  // format (ops/kv_format: 584-byte FP8 + bf16 rows, 132-byte FP8 indexer keys; DeepSeek-V4 with head_dim 512 only).
  int32_t kv_elem_bytes = 4;
  bool include_mtp = false;     // also give the num_nextn_predict_layers MTP layers a ring each
};

// kv_elem_bytes of the FP8 storage format. In that format a layer's ring is one page of ring_rows MODEL1 rows per slot
// (LayerState::ring_offset; page stride slot_bytes), its compressed entries and indexer keys one page of
// entries_per_block rows per token block (page stride block_bytes): StateLayout::ring_pages / entry_pages /
// index_key_pages, with row slot * ring_rows + pos % ring_rows and block * entries_per_block + j % entries_per_block.
inline constexpr int32_t kFp8StateElem = 1;

// Exact totals, without alignment padding (the numbers research §11.2 quotes).
struct StateSizes {
  double bytes_per_token = 0;   // compressed entries + indexer keys, summed over layers, per context token
  int64_t ring_bytes = 0;       // all layers' rings of one sequence
  int64_t frontier_bytes = 0;   // all compressor frontiers of one sequence (fp32)
  int64_t fixed_bytes() const { return ring_bytes + frontier_bytes; }
};
StateSizes compute_state_sizes(const io::ModelConfig& cfg, const StateCacheConfig& cc);

// Every region starts at a multiple of kAlign bytes so a kernel can use wide / TMA loads on any of them.
inline constexpr int64_t kAlign = 256;

struct LayerState {
  io::AttnType type = io::AttnType::Sliding;
  int64_t ratio = 0;                 // 0 for sliding layers
  // In the slot (byte offsets from the slot base):
  int64_t ring_offset = 0;           // [ring_rows, head_dim] kv_elem; row = position % ring_rows
  int64_t frontier_offset = -1;      // [frontier_rows, frontier_width] fp32, kv half then score half;
  int64_t frontier_width = 0;        //   row = position % frontier_rows; -1 = none (sliding layer)
  int64_t index_frontier_offset = -1;  // CSA only: [frontier_rows, index_frontier_width] fp32
  int64_t index_frontier_width = 0;
  int64_t frontier_rows = 0;
  // In every token block (byte offsets from the block base); -1 = none:
  int64_t entries_offset = -1;       // [entries_per_block, head_dim] kv_elem; entry j of the sequence lives
  int64_t entries_per_block = 0;     //   in table[j / entries_per_block], row j % entries_per_block
  int64_t index_keys_offset = -1;    // CSA only: [entries_per_block, index_head_dim] kv_elem
};

struct StateLayout {
  int64_t block_size = 0;            // tokens per block (a multiple of every compress ratio)
  int64_t block_bytes = 0;           // padded
  int64_t slot_bytes = 0;            // padded
  int64_t ring_rows = 0;             // sliding_window + num_speculative_tokens
  int64_t num_speculative_tokens = 0;  // a sequence may hold this many unverified tokens (speculative decoding)
  int64_t head_dim = 0, index_head_dim = 0, kv_elem_bytes = 0;
  std::vector<LayerState> layers;    // num_hidden_layers (+ MTP layers when include_mtp)
  // DeepSeek-V4.1 Engram n-gram history in the slot: [ngram_rows] int32 compressed token ids (-1 = image
  // token), row = position % ngram_rows; -1 offset when the model has no Engram layers.
  int64_t ngram_offset = -1, ngram_rows = 0;

  struct Loc {
    int64_t block_index;  // index into the sequence's block table
    int64_t offset;       // bytes from that block's base
  };
  Loc compressed_entry(int64_t layer, int64_t j) const;  // entry j (covers tokens [j*ratio, (j+1)*ratio)); FP8: data
  Loc indexer_key(int64_t layer, int64_t j) const;
  int64_t ring_row(int64_t layer, int64_t pos) const;      // byte offset in the slot (FP8: of the row's data)
  int64_t frontier_row(int64_t layer, int64_t pos) const;  // byte offset in the slot

  bool fp8() const { return kv_elem_bytes == kFp8StateElem; }
  // FP8 state: where a layer's rows live, relative to the slot pool / block pool base (see kFp8StateElem).
  ops::KvPages ring_pages(int64_t layer) const { return {ring_rows, slot_bytes, layers[size_t(layer)].ring_offset}; }
  ops::KvPages entry_pages(int64_t layer) const {
    const LayerState& l = layers[size_t(layer)];
    return {l.entries_per_block, block_bytes, l.entries_offset};
  }
  ops::KvPages index_key_pages(int64_t layer) const {
    const LayerState& l = layers[size_t(layer)];
    return {l.entries_per_block, block_bytes, l.index_keys_offset};
  }

  // The one per-sequence sizing rule: token blocks and bytes (slot + blocks) a sequence of up to max_len
  // tokens (plus num_speculative_tokens speculative ones) can need.
  int64_t blocks_per_sequence(int64_t max_len) const {
    return (max_len + num_speculative_tokens + block_size - 1) / block_size;
  }
  int64_t bytes_per_sequence(int64_t max_len) const { return slot_bytes + blocks_per_sequence(max_len) * block_bytes; }
};

// Fails (naming the value) on a block_size that is not a positive multiple of every compress ratio, or
// on configs without head_dim / sliding_window.
Result<StateLayout> compute_state_layout(const io::ModelConfig& cfg, const StateCacheConfig& cc);

// DeepSeek-V4.1 (state_layout_v41.cpp; used by the two functions above for arch DeepseekV41): every layer has a
// window ring; only KV-source layers own compressed state -- a compressor frontier (ratio > 1: `ratio` rows of
// kv | score, plus the speculative rows), compressed entries (head_dim) and indexer keys (index_head_dim) in the
// token blocks -- which the layers reusing that source read; the slot also holds the Engram n-gram history.
StateSizes compute_state_sizes_v41(const io::ModelConfig& cfg, const StateCacheConfig& cc);
Result<StateLayout> compute_state_layout_v41(const io::ModelConfig& cfg, const StateCacheConfig& cc);

}  // namespace dsinfer::cache
