// StateCache: bookkeeping (no memory, no CUDA) for per-sequence DeepSeek-V4 state over a fixed byte budget:
// `num_slots` fixed-size slots (rings + compressor frontiers) and `num_blocks` token blocks (compressed
// entries + indexer keys of block_size tokens, all layers), see state_layout.h. A sequence holds one slot
// and a block table (list of block ids, position order). The runner owns the device memory and maps
// slot s -> slot_base + s * slot_bytes, block b -> block_base + b * block_bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/block_allocator.h"
#include "cache/prefix_cache.h"
#include "cache/state_layout.h"
#include "core/status.h"

namespace dsinfer::cache {

using SlotId = int32_t;

struct StateCacheStats {
  int32_t num_slots = 0, free_slots = 0;
  int32_t num_blocks = 0, free_blocks = 0;
  int32_t shared_blocks = 0;  // blocks with refcount > 1
  int64_t slot_bytes = 0, block_bytes = 0, block_size = 0;
  int64_t used_bytes = 0;     // slots in use * slot_bytes + blocks in use * block_bytes
  int64_t budget_bytes = 0;
};

class StateCache {
 public:
  // Splits the budget: slots for min(max_num_seqs, what fits) sequences, the rest in blocks (capped at
  // what every slot running to max_model_len could use). Fails, naming the numbers, when the budget cannot
  // hold one slot plus the blocks of one max_model_len sequence — below that a lone request could not
  // finish, and preemption could not guarantee progress.
  static Result<StateCache> create(const io::ModelConfig& cfg, const StateCacheConfig& cc);

  const StateLayout& layout() const { return layout_; }
  int64_t block_size() const { return layout_.block_size; }
  int64_t max_model_len() const { return max_model_len_; }
  int32_t num_slots() const { return int32_t(slot_used_.size()); }
  int32_t free_slots() const;
  int32_t num_blocks() const { return blocks_.num_blocks(); }
  // Free blocks, counting cached blocks that only the prefix cache references (evicted on demand, LRU).
  int32_t free_blocks() const;
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size() - 1) / block_size(); }

  // New sequence: a slot plus blocks for num_tokens tokens, leaving at least `reserve_blocks` free. `shared`:
  // complete cached blocks that start its table (a prefix-cache hit; one more reference each; -1: a block in
  // the host tier, node gens[i], restored into a fresh block), `extra`: blocks it needs beyond its table
  // (bounded-replay scratch copies).
  bool can_admit(int64_t num_tokens, int64_t reserve_blocks = 0, std::span<const BlockId> shared = {},
                 int64_t extra = 0) const {
    return admit_rank(num_tokens, reserve_blocks, shared, extra) >= 0;
  }
  // -1 (nothing taken) when !can_admit.
  SlotId admit(int64_t num_tokens, std::span<const BlockId> shared = {}, std::span<const uint64_t> gens = {});

  // Grow slot's table to cover new_len tokens (no-op when it already does).
  bool can_allocate(SlotId s, int64_t new_len) const {
    return blocks_needed(s, new_len) <= free_blocks(rank_of_slot(s));
  }
  bool allocate_for(SlotId s, int64_t new_len);  // false (and table unchanged) when blocks are short

  // Rollback (speculative decoding, rejected positions): keep blocks_for(len) blocks, release the rest.
  // Fails when it would leave a partially used *shared* block at the end of the table, since the next
  // write would corrupt the other owners (shared blocks are complete prefix blocks; copy-on-write is the
  // prefix cache's job).
  Status truncate(SlotId s, int64_t len);
  void free(SlotId s);  // releases the slot and drops one reference on each of its blocks

  // Prefix-cache hook: start slot s's (empty) table with already-filled complete blocks, one more
  // reference each. Fails when the table is not empty or a block id is not allocated.
  Status share_blocks(SlotId s, std::span<const BlockId> blocks);

  // ---- prefix caching (cache/prefix_cache.h) ----
  void enable_prefix_cache(const PrefixCacheConfig& cfg) { prefix_ = std::make_unique<PrefixCache>(cfg, num_blocks()); }
  PrefixCache* prefix() { return prefix_.get(); }
  const PrefixCache* prefix() const { return prefix_.get(); }
  // Drops every cached block (device and host tier) and snapshot: a fresh PrefixCache with the same config and the
  // counters so far. Only while no slot is in use (a sequence's table may hold cached blocks); returns the number of
  // device blocks that went back to the pool.
  Result<int64_t> flush_prefix_cache();
  // Offers block `index` of slot s's table (complete, never written again) to the prefix cache under `key`.
  PrefixCache::Insert cache_block(SlotId s, int64_t index, uint64_t key, uint64_t parent_gen,
                                  std::span<const int32_t> tokens);
  // Bounded replay: table entry `index` of slot s becomes a fresh private block (-1 when none is left); the
  // block it replaces is returned and keeps its reference (the caller's), to be put back by swap_back.
  BlockId swap_scratch(SlotId s, int64_t index);
  void swap_back(SlotId s, int64_t index, BlockId shared);  // frees the scratch block
  void release(BlockId b) { unref(b); }
  // State copies the runner must do before the next step, in order: host-tier spills of evicted blocks and
  // restores (queued here as blocks change hands), and the scheduler's own (push_copy). Not yet handed out when
  // no step ran since they were queued: the device blocks they read are only written by a step.
  void push_copy(const StateCopy& c) { copies_.push_back(c); }
  void take_copies(std::vector<StateCopy>& out) {
    out.insert(out.end(), copies_.begin(), copies_.end());
    copies_.clear();
  }

  std::span<const BlockId> table(SlotId s) const { return tables_[size_t(s)]; }
  int64_t capacity_tokens(SlotId s) const { return int64_t(tables_[size_t(s)].size()) * block_size(); }
  int32_t refcount(BlockId b) const { return blocks_.refcount(b); }
  bool slot_in_use(SlotId s) const { return slot_used_[size_t(s)]; }
  StateCacheStats stats() const;

  // ---- DP attention (docs/multi_gpu.md "DP attention"): the state split over `ranks` ----
  // Slots and blocks become `ranks` equal ranges, each sized from 1/ranks of the budget as create() sizes the whole
  // (so the sequences that fit grow with the ranks when each brings its own memory); rank r's memory holds only
  // range r. A sequence lives on one rank: its slot and every block of its table are in that rank's ranges.
  // Admission picks the rank (a prefix hit's device blocks fix it; else the least used state bytes, ties to the
  // lower rank); growth, scratch copies and restores take blocks of the sequence's rank, evicting only that rank's
  // cached blocks. Fails when a rank could not hold one max_model_len sequence. Call once, before anything is
  // allocated or the prefix cache is enabled.
  Status set_ranks(int32_t ranks);
  int32_t ranks() const { return ranks_; }
  int32_t slots_per_rank() const { return num_slots() / ranks_; }
  int32_t blocks_per_rank() const { return num_blocks() / ranks_; }
  int32_t rank_of_slot(SlotId s) const { return s / slots_per_rank(); }
  int32_t rank_of_block(BlockId b) const { return blocks_.part_of(b); }
  int32_t free_blocks(int32_t rank) const { return blocks_.num_free(rank) + evictable_[size_t(rank)]; }
  // The rank that admission would use (-1: no rank can take it); the arguments are can_admit's.
  int32_t admit_rank(int64_t num_tokens, int64_t reserve_blocks = 0, std::span<const BlockId> shared = {},
                     int64_t extra = 0) const;

 private:
  StateCache(StateLayout layout, int32_t num_slots, int32_t num_blocks, int64_t budget, int64_t max_model_len);
  // Every reference change goes through these, which keep evictable_ (cached blocks with refcount 1) true.
  BlockId take(int32_t rank);  // allocate, evicting the rank's LRU unreferenced cached block when its pool is empty
  void ref(BlockId b);
  void unref(BlockId b);
  int64_t blocks_needed(SlotId s, int64_t new_len) const {
    int64_t need = blocks_for(new_len) - int64_t(tables_[size_t(s)].size());
    return need > 0 ? need : 0;
  }

  StateLayout layout_;
  BlockAllocator blocks_;
  std::vector<std::vector<BlockId>> tables_;  // per slot
  std::vector<bool> slot_used_;
  std::vector<std::vector<SlotId>> free_slots_;  // per rank, LIFO
  int64_t budget_bytes_ = 0;
  int64_t max_model_len_ = 0;
  std::unique_ptr<PrefixCache> prefix_;
  std::vector<int32_t> evictable_;  // per rank
  int32_t ranks_ = 1;
  int32_t max_num_seqs_ = 1;
  std::vector<StateCopy> copies_;
};

}  // namespace dsinfer::cache
