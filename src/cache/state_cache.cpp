// StateCache (see header): slot + block bookkeeping over a byte budget.
#include "cache/state_cache.h"

#include <algorithm>
#include <cassert>

namespace dsinfer::cache {

StateCache::StateCache(StateLayout layout, int32_t num_slots, int32_t num_blocks, int64_t budget,
                       int64_t max_model_len)
    : layout_(std::move(layout)),
      blocks_(num_blocks),
      tables_(size_t(num_slots)),
      slot_used_(size_t(num_slots), false),
      budget_bytes_(budget),
      max_model_len_(max_model_len) {
  for (SlotId s = num_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

Result<StateCache> StateCache::create(const io::ModelConfig& cfg, const StateCacheConfig& cc) {
  DSI_ASSIGN_OR_RETURN(StateLayout layout, compute_state_layout(cfg, cc));
  const int64_t max_len = cc.max_model_len > 0 ? cc.max_model_len : cfg.max_position_embeddings;
  if (max_len <= 0)
    return Status::errorf("state cache: max_model_len must be > 0 (config max_position_embeddings = {})",
                          cfg.max_position_embeddings);
  if (cc.max_num_seqs < 1) return Status::errorf("state cache: max_num_seqs must be >= 1, found {}", cc.max_num_seqs);
  // One sequence at max_model_len, plus the speculative tokens of its last step.
  const int64_t per_seq_blocks = layout.blocks_per_sequence(max_len);
  const int64_t min_bytes = layout.bytes_per_sequence(max_len);
  if (cc.budget_bytes < min_bytes)
    return Status::errorf("state cache: budget_bytes {} is below the {} bytes one max_model_len={} sequence needs "
                          "(slot {} B + {} blocks x {} B)", cc.budget_bytes, min_bytes, max_len, layout.slot_bytes,
                          per_seq_blocks, layout.block_bytes);
  const int64_t slots = std::min<int64_t>(
      cc.max_num_seqs, layout.slot_bytes > 0 ? (cc.budget_bytes - per_seq_blocks * layout.block_bytes) / layout.slot_bytes
                                             : cc.max_num_seqs);
  const int64_t cap = slots * per_seq_blocks;  // more blocks than this could never be used
  int64_t blocks = layout.block_bytes > 0 ? (cc.budget_bytes - slots * layout.slot_bytes) / layout.block_bytes : cap;
  blocks = std::min(blocks, cap);
  if (blocks > INT32_MAX - 1) blocks = INT32_MAX - 1;
  return StateCache(std::move(layout), int32_t(slots), int32_t(blocks), cc.budget_bytes, max_len);
}

bool StateCache::can_admit(int64_t num_tokens, int64_t reserve_blocks) const {
  return !free_slots_.empty() && blocks_for(num_tokens) + reserve_blocks <= free_blocks();
}

SlotId StateCache::admit(int64_t num_tokens) {
  if (!can_admit(num_tokens)) return -1;
  SlotId s = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[size_t(s)] = true;
  assert(tables_[size_t(s)].empty());
  bool ok = allocate_for(s, num_tokens);
  assert(ok);
  (void)ok;
  return s;
}

bool StateCache::allocate_for(SlotId s, int64_t new_len) {
  const int64_t need = blocks_needed(s, new_len);
  if (need > free_blocks()) return false;
  auto& t = tables_[size_t(s)];
  for (int64_t i = 0; i < need; ++i) t.push_back(blocks_.allocate());
  return true;
}

Status StateCache::truncate(SlotId s, int64_t len) {
  if (len < 0) return Status::errorf("state cache: truncate length must be >= 0, found {}", len);
  auto& t = tables_[size_t(s)];
  const size_t keep = size_t(std::min<int64_t>(blocks_for(len), int64_t(t.size())));
  if (keep > 0 && len % block_size() != 0 && blocks_.refcount(t[keep - 1]) > 1)
    return Status::errorf("state cache: truncate to {} tokens would leave shared block {} (refcount {}) partially "
                          "used", len, t[keep - 1], blocks_.refcount(t[keep - 1]));
  for (size_t i = keep; i < t.size(); ++i) blocks_.decref(t[i]);
  t.resize(keep);
  return Status::ok();
}

void StateCache::free(SlotId s) {
  assert(slot_used_[size_t(s)]);
  auto& t = tables_[size_t(s)];
  for (BlockId b : t) blocks_.decref(b);
  t.clear();
  slot_used_[size_t(s)] = false;
  free_slots_.push_back(s);
}

Status StateCache::share_blocks(SlotId s, std::span<const BlockId> blocks) {
  auto& t = tables_[size_t(s)];
  if (!t.empty()) return Status::errorf("state cache: share_blocks into slot {} whose table has {} blocks", s, t.size());
  for (BlockId b : blocks)
    if (b < 0 || b >= num_blocks() || blocks_.refcount(b) == 0)
      return Status::errorf("state cache: share_blocks of block {} which is not allocated", b);
  for (BlockId b : blocks) {
    blocks_.incref(b);
    t.push_back(b);
  }
  return Status::ok();
}

StateCacheStats StateCache::stats() const {
  StateCacheStats st;
  st.num_slots = num_slots();
  st.free_slots = free_slots();
  st.num_blocks = num_blocks();
  st.free_blocks = free_blocks();
  for (BlockId b = 0; b < num_blocks(); ++b) st.shared_blocks += blocks_.refcount(b) > 1;
  st.slot_bytes = layout_.slot_bytes;
  st.block_bytes = layout_.block_bytes;
  st.block_size = layout_.block_size;
  st.used_bytes = int64_t(st.num_slots - st.free_slots) * st.slot_bytes +
                  int64_t(st.num_blocks - st.free_blocks) * st.block_bytes;
  st.budget_bytes = budget_bytes_;
  return st;
}

}  // namespace dsinfer::cache
