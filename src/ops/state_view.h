// Addressing of one layer's per-sequence inference state inside the state cache's memory (layout:
// cache/state_layout.h), shared by the CPU reference and the CUDA kernels. Rows are fp32 (kv_elem_bytes = 4), or, with
// fp8 set (the CUDA runner's `official` state, cache::kFp8StateElem), the window ring, the compressed entries and the
// indexer keys are rows of DeepSeek's storage format (ops/kv_format) addressed by the *_pages / *_index helpers below;
// the float accessors ring_row / entry / index_key are then invalid (frontiers stay fp32 either way). Bounded state
// lives in the sequence's *slot* (rows indexed by position modulo the row count); growing state (compressed
// entries, indexer keys) in *token blocks* reached through the sequence's block table. Plain data with inline
// accessors usable on host and device.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "ops/kv_format/kv_format.h"

namespace dsinfer::ops {

struct LayerStateView {
  float* slots = nullptr;        // slot pool base
  int64_t slot_stride = 0;       // floats per slot
  float* blocks = nullptr;       // block pool base
  int64_t block_stride = 0;      // floats per block
  // Window ring: [ring_rows, head_dim], row = pos % ring_rows (ring_rows >= sliding_window).
  int64_t ring_offset = 0, ring_rows = 0, head_dim = 0;
  // Compressor frontier: [frontier_rows, frontier_width], row = pos % frontier_rows; a row holds the token's
  // kv projection (c*d floats) then its gate incl. ape (c*d floats). index_* the same for the CSA indexer.
  int64_t frontier_offset = -1, frontier_rows = 0, frontier_width = 0;
  int64_t index_frontier_offset = -1, index_frontier_width = 0;
  // Token blocks: compressed entry j at table[j / entries_per_block], row j % entries_per_block.
  int64_t entries_offset = -1, entries_per_block = 0;
  int64_t index_keys_offset = -1, index_head_dim = 0;
  bool fp8 = false;  // ring / entries / indexer keys in the FP8 storage format

  // FP8 state: pages of the ring (base: slots), of the entries and of the indexer keys (base: blocks), in bytes.
  DSI_HD KvPages ring_pages() const { return {ring_rows, slot_stride * 4, ring_offset * 4}; }
  DSI_HD KvPages entry_pages() const { return {entries_per_block, block_stride * 4, entries_offset * 4}; }
  DSI_HD KvPages index_key_pages() const { return {entries_per_block, block_stride * 4, index_keys_offset * 4}; }
  // Row numbers in those pages: position pos of a slot's ring, entry (or indexer key) j of a block table.
  DSI_HD int64_t ring_index(int32_t slot, int64_t pos) const { return int64_t(slot) * ring_rows + pos % ring_rows; }
  DSI_HD int64_t entry_index(const int32_t* table, int64_t j) const {
    return int64_t(table[j / entries_per_block]) * entries_per_block + j % entries_per_block;
  }

  DSI_HD float* ring_row(int32_t slot, int64_t pos) const {
    return slots + slot * slot_stride + ring_offset + (pos % ring_rows) * head_dim;
  }
  DSI_HD float* frontier(int32_t slot) const { return slots + slot * slot_stride + frontier_offset; }
  DSI_HD float* index_frontier(int32_t slot) const { return slots + slot * slot_stride + index_frontier_offset; }
  DSI_HD float* frontier_row(int32_t slot, int64_t pos) const {
    return slots + slot * slot_stride + frontier_offset + (pos % frontier_rows) * frontier_width;
  }
  DSI_HD float* index_frontier_row(int32_t slot, int64_t pos) const {
    return slots + slot * slot_stride + index_frontier_offset + (pos % frontier_rows) * index_frontier_width;
  }
  DSI_HD float* entry(const int32_t* table, int64_t j) const {
    return blocks + table[j / entries_per_block] * block_stride + entries_offset + (j % entries_per_block) * head_dim;
  }
  DSI_HD float* index_key(const int32_t* table, int64_t j) const {
    return blocks + table[j / entries_per_block] * block_stride + index_keys_offset +
           (j % entries_per_block) * index_head_dim;
  }
};

}  // namespace dsinfer::ops
