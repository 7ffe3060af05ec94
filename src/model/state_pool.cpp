// The per-layer view of the state memory (see state_pool.h).
#include "model/state_pool.h"

namespace dsinfer::model {

ops::LayerStateView layer_view(const StatePool& pool, int64_t layer) {
  const cache::StateLayout& L = *pool.layout;
  const cache::LayerState& ls = L.layers[size_t(layer)];
  auto f = [](int64_t bytes) { return bytes < 0 ? int64_t(-1) : bytes / int64_t(sizeof(float)); };
  ops::LayerStateView v;
  v.slots = pool.slots;
  v.slot_stride = f(L.slot_bytes);
  v.blocks = pool.blocks;
  v.block_stride = f(L.block_bytes);
  v.ring_offset = f(ls.ring_offset);
  v.ring_rows = L.ring_rows;
  v.head_dim = L.head_dim;
  v.frontier_offset = f(ls.frontier_offset);
  v.frontier_rows = ls.frontier_rows;
  v.frontier_width = ls.frontier_width;
  v.index_frontier_offset = f(ls.index_frontier_offset);
  v.index_frontier_width = ls.index_frontier_width;
  v.entries_offset = f(ls.entries_offset);
  v.entries_per_block = ls.entries_per_block;
  v.index_keys_offset = f(ls.index_keys_offset);
  v.index_head_dim = L.index_head_dim;
  v.fp8 = L.fp8();
  return v;
}

}  // namespace dsinfer::model
