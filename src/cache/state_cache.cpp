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
  free_slots_.resize(1);
  evictable_.assign(1, 0);
  for (SlotId s = num_slots - 1; s >= 0; --s) free_slots_[0].push_back(s);
}

Status StateCache::set_ranks(int32_t ranks) {
  if (ranks < 1) return Status::errorf("state cache: {} ranks", ranks);
  if (prefix_ || free_slots() != num_slots() || blocks_.num_free() != num_blocks())
    return Status::error("state cache: set_ranks after allocations or the prefix cache");
  // Each rank splits its 1/ranks of the budget as create() splits the whole one (at most ceil(max_num_seqs / ranks)
  // slots, the rest in blocks, capped at what its slots could use).
  const int64_t per_seq = layout_.blocks_per_sequence(max_model_len_), budget = budget_bytes_ / ranks;
  const int64_t cap = (max_num_seqs_ + ranks - 1) / ranks;
  const int64_t fit = layout_.slot_bytes > 0 ? (budget - per_seq * layout_.block_bytes) / layout_.slot_bytes : cap;
  const int32_t spr = int32_t(std::max<int64_t>(std::min(cap, fit), 0));
  const int64_t fit_blocks = layout_.block_bytes > 0 ? (budget - spr * layout_.slot_bytes) / layout_.block_bytes
                                                     : spr * per_seq;
  const int32_t bpr = int32_t(std::min<int64_t>({fit_blocks, spr * per_seq, (INT32_MAX - 1) / ranks}));
  if (spr < 1 || bpr < per_seq)
    return Status::errorf("state cache: split over {} ranks, a rank holds {} slot(s) and {} blocks, below one "
                          "max_model_len={} sequence (1 slot + {} blocks): raise the state memory or lower "
                          "max_model_len", ranks, spr, bpr, max_model_len_, per_seq);
  ranks_ = ranks;
  tables_.assign(size_t(spr) * size_t(ranks), {});
  slot_used_.assign(size_t(spr) * size_t(ranks), false);
  free_slots_.assign(size_t(ranks), {});
  for (int32_t r = 0; r < ranks; ++r)
    for (SlotId s = (r + 1) * spr - 1; s >= r * spr; --s) free_slots_[size_t(r)].push_back(s);
  blocks_ = BlockAllocator(bpr * ranks, ranks);
  evictable_.assign(size_t(ranks), 0);
  return Status::ok();
}

int32_t StateCache::free_slots() const {
  size_t n = 0;
  for (const auto& f : free_slots_) n += f.size();
  return int32_t(n);
}

int32_t StateCache::free_blocks() const {
  int32_t n = blocks_.num_free();
  for (int32_t e : evictable_) n += e;
  return n;
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
  StateCache sc(std::move(layout), int32_t(slots), int32_t(blocks), cc.budget_bytes, max_len);
  sc.max_num_seqs_ = cc.max_num_seqs;
  return sc;
}

int32_t StateCache::admit_rank(int64_t num_tokens, int64_t reserve_blocks, std::span<const BlockId> shared,
                               int64_t extra) const {
  // Shared blocks that only the cache holds count as free, but this admission takes them.
  // Host-tier blocks each need a fresh block to come back into.
  int64_t held = 0, restores = 0;
  int32_t fixed = -1;  // the rank of the hit's device blocks
  for (BlockId b : shared) {
    if (b < 0) {
      ++restores;
      continue;
    }
    held += blocks_.refcount(b) == 1 && prefix_ && prefix_->is_cached(b);
    if (fixed >= 0 && rank_of_block(b) != fixed) return -1;  // a table never spans ranks
    fixed = rank_of_block(b);
  }
  const int64_t need = std::max<int64_t>(blocks_for(num_tokens) - int64_t(shared.size()), 0) + extra + restores;
  const int64_t reserve = reserve_blocks / ranks_;
  int32_t best = -1;
  int64_t best_used = 0;
  for (int32_t r = fixed >= 0 ? fixed : 0; r < (fixed >= 0 ? fixed + 1 : ranks_); ++r) {
    if (free_slots_[size_t(r)].empty() || need + reserve > free_blocks(r) - (r == fixed ? held : 0)) continue;
    const int64_t used = int64_t(slots_per_rank() - int32_t(free_slots_[size_t(r)].size())) * layout_.slot_bytes +
                         int64_t(blocks_per_rank() - free_blocks(r)) * layout_.block_bytes;
    if (best < 0 || used < best_used) {
      best = r;
      best_used = used;
    }
  }
  return best;
}

SlotId StateCache::admit(int64_t num_tokens, std::span<const BlockId> shared, std::span<const uint64_t> gens) {
  const int32_t rank = admit_rank(num_tokens, 0, shared);
  if (rank < 0) return -1;
  const bool restoring = std::any_of(shared.begin(), shared.end(), [](BlockId b) { return b < 0; });
  if (restoring && (!prefix_ || gens.size() != shared.size())) return -1;
  SlotId s = free_slots_[size_t(rank)].back();
  free_slots_[size_t(rank)].pop_back();
  slot_used_[size_t(s)] = true;
  auto& t = tables_[size_t(s)];
  assert(t.empty());
  // Device blocks first (referenced, they cannot be evicted by the restores' allocations), then the host-tier
  // ones: pinned so that no spill drops them, each restored into a fresh block (its refcount 1 is the cache's).
  for (BlockId b : shared) {
    if (b >= 0) ref(b);
    t.push_back(b);
  }
  if (restoring) {
    for (size_t i = 0; i < shared.size(); ++i)
      if (shared[i] < 0) prefix_->pin(gens[i], true);
    for (size_t i = 0; i < shared.size(); ++i) {
      if (shared[i] >= 0) continue;
      const BlockId b = take(rank);  // can_admit counted it
      assert(b >= 0);
      const int32_t h = prefix_->restore(gens[i], b);
      assert(h >= 0);
      copies_.push_back({StateCopy::Kind::kHostToBlock, h, b});
      blocks_.incref(b);  // the sequence's reference (cached with refcount 2: not evictable)
      t[i] = b;
    }
  }
  bool ok = allocate_for(s, num_tokens);
  assert(ok);
  (void)ok;
  return s;
}

bool StateCache::allocate_for(SlotId s, int64_t new_len) {
  const int64_t need = blocks_needed(s, new_len);
  const int32_t rank = rank_of_slot(s);
  if (need > free_blocks(rank)) return false;
  auto& t = tables_[size_t(s)];
  for (int64_t i = 0; i < need; ++i) t.push_back(take(rank));
  return true;
}

Result<int64_t> StateCache::flush_prefix_cache() {
  if (!prefix_) return Status::error("prefix caching is off (serve --enable-prefix-caching exact|bounded turns it on)");
  if (free_slots() != num_slots())
    return Status::errorf("{} sequences hold state; the prefix cache can only be flushed when none does",
                          num_slots() - free_slots());
  int64_t dropped = 0;
  for (BlockId b = 0; b < num_blocks(); ++b)
    if (prefix_->is_cached(b)) dropped += blocks_.decref(b);  // the cache's reference, the only one left
  auto fresh = std::make_unique<PrefixCache>(prefix_->config(), num_blocks());
  fresh->stats() = prefix_->stats();
  prefix_ = std::move(fresh);
  std::fill(evictable_.begin(), evictable_.end(), 0);
  return dropped;
}

BlockId StateCache::take(int32_t rank) {
  BlockId b = blocks_.allocate(rank);
  if (b >= 0 || !prefix_) return b;
  // Only this rank's blocks are candidates (another rank's count as referenced).
  const PrefixCache::Evicted v = prefix_->evict(
      [this, rank](BlockId x) { return rank_of_block(x) == rank ? blocks_.refcount(x) : 0; });
  if (v.block < 0) return -1;
  // Host tier: the block's content moves out before anything (a step, a later copy) writes the block again.
  if (v.host >= 0) copies_.push_back({StateCopy::Kind::kBlockToHost, v.block, v.host});
  --evictable_[size_t(rank)];
  blocks_.decref(v.block);
  return blocks_.allocate(rank);
}

void StateCache::ref(BlockId b) {
  blocks_.incref(b);
  if (blocks_.refcount(b) == 2 && prefix_ && prefix_->is_cached(b)) --evictable_[size_t(rank_of_block(b))];
}

void StateCache::unref(BlockId b) {
  blocks_.decref(b);
  if (blocks_.refcount(b) == 1 && prefix_ && prefix_->is_cached(b)) ++evictable_[size_t(rank_of_block(b))];
}

PrefixCache::Insert StateCache::cache_block(SlotId s, int64_t index, uint64_t key, uint64_t parent_gen,
                                            std::span<const int32_t> tokens) {
  const BlockId b = tables_[size_t(s)][size_t(index)];
  if (!prefix_ || prefix_->is_cached(b)) return {};
  PrefixCache::Insert r = prefix_->insert(key, parent_gen, int32_t(index), tokens, b);
  if (r.took) blocks_.incref(b);  // the cache's own reference; the sequence holds one, so not evictable
  return r;
}

BlockId StateCache::swap_scratch(SlotId s, int64_t index) {
  const BlockId fresh = take(rank_of_slot(s));
  if (fresh < 0) return -1;
  BlockId& e = tables_[size_t(s)][size_t(index)];
  const BlockId old = e;
  e = fresh;
  return old;
}

void StateCache::swap_back(SlotId s, int64_t index, BlockId shared) {
  BlockId& e = tables_[size_t(s)][size_t(index)];
  unref(e);
  e = shared;
}

Status StateCache::truncate(SlotId s, int64_t len) {
  if (len < 0) return Status::errorf("state cache: truncate length must be >= 0, found {}", len);
  auto& t = tables_[size_t(s)];
  const size_t keep = size_t(std::min<int64_t>(blocks_for(len), int64_t(t.size())));
  if (keep > 0 && len % block_size() != 0 && blocks_.refcount(t[keep - 1]) > 1)
    return Status::errorf("state cache: truncate to {} tokens would leave shared block {} (refcount {}) partially "
                          "used", len, t[keep - 1], blocks_.refcount(t[keep - 1]));
  for (size_t i = keep; i < t.size(); ++i) unref(t[i]);
  t.resize(keep);
  return Status::ok();
}

void StateCache::free(SlotId s) {
  assert(slot_used_[size_t(s)]);
  auto& t = tables_[size_t(s)];
  for (BlockId b : t) unref(b);
  t.clear();
  slot_used_[size_t(s)] = false;
  free_slots_[size_t(rank_of_slot(s))].push_back(s);
}

Status StateCache::share_blocks(SlotId s, std::span<const BlockId> blocks) {
  auto& t = tables_[size_t(s)];
  if (!t.empty()) return Status::errorf("state cache: share_blocks into slot {} whose table has {} blocks", s, t.size());
  for (BlockId b : blocks)
    if (b < 0 || b >= num_blocks() || blocks_.refcount(b) == 0)
      return Status::errorf("state cache: share_blocks of block {} which is not allocated", b);
  for (BlockId b : blocks) {
    ref(b);
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
