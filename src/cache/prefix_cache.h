// PrefixCache: content-addressed token blocks (bookkeeping only; the StateCache owns the references and the
// runner the memory). A block is keyed by a hash chain over the token ids of every block up to it, seeded
// with the model / numerics identity; a node remembers its block's token ids and its parent node, and a
// lookup compares both, so a hash collision can never hand a sequence a block whose content it does not share.
// Exact mode also keeps *snapshots* of the per-sequence slot state (rings, compressor frontiers, overlap rows,
// n-gram history: the whole slot) taken when a sequence stood exactly at a block boundary; a hit on a block
// with a snapshot resumes bit-identically. Snapshots live in a fixed pool (the runner's memory) with LRU reuse.
// Host tier (num_host_blocks > 0): a block evicted from the device pool moves to a host-memory block instead of
// being dropped (the node stays, its block id becomes -1); a hit restores it into a fresh device block. The host
// tier drops its own least recently used node when full. Snapshots stay in their (device) pool either way.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/block_allocator.h"
#include "cache/state_copy.h"
#include "core/status.h"
#include "dsinfer/engine.h"

namespace dsinfer::cache {

// kExact: hits only where a snapshot exists (bit-identical); kBounded: also hits on blocks without a snapshot,
// rebuilding the sliding window by recomputing its last `window` tokens (not bit-identical).
enum class PrefixMode { kOff, kExact, kBounded };
Result<PrefixMode> parse_prefix_mode(const std::string& name);  // "off", "exact", "bounded"
const char* prefix_mode_name(PrefixMode m);

// The counters are the public API's (dsinfer/engine.h), filled here.
using PrefixCacheStats = PrefixCacheMetrics;

struct PrefixCacheConfig {
  PrefixMode mode = PrefixMode::kOff;
  uint64_t seed = 0;             // model / config / numerics identity: different models never share a key
  int64_t block_size = 0;
  int32_t num_snapshots = 0;     // snapshot pool size (0: no snapshots; exact mode then never hits)
  int64_t snapshot_bytes = 0;    // bytes of one snapshot (= slot_bytes)
  uint64_t hash_mask = ~uint64_t(0);  // tests: a narrow mask makes keys collide on purpose
  int32_t num_host_blocks = 0;   // host-tier pool size (0: evicted blocks are dropped)
  int64_t block_bytes = 0;       // bytes of one block (host-tier traffic metrics)
};

// 64-bit chain hash of one block: parent key and the block's token ids.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  PrefixCache(const PrefixCacheConfig& cfg, int32_t num_blocks);

  PrefixMode mode() const { return cfg_.mode; }
  const PrefixCacheConfig& config() const { return cfg_; }
  int64_t block_size() const { return cfg_.block_size; }
  uint64_t seed() const { return cfg_.seed; }
  bool has_snapshots() const { return !snap_owner_.empty(); }
  // Appends the chain keys of the complete blocks of tokens beyond the keys already in `keys`.
  void extend_keys(std::span<const int32_t> tokens, std::vector<uint64_t>& keys) const;

  struct Match {
    std::vector<BlockId> blocks;    // cached blocks matching the first blocks.size() blocks of the tokens
                                    // (-1: in the host tier; StateCache::admit restores it)
    std::vector<uint64_t> gens;     // their node generations (for registering later blocks under them)
    int32_t snapshot_blocks = 0;    // deepest prefix (in blocks) whose last block has a snapshot
    int32_t snapshot = -1;          // that snapshot
  };
  // Longest verified match of at most max_blocks blocks (keys: extend_keys of the same tokens).
  Match match(std::span<const int32_t> tokens, std::span<const uint64_t> keys, int32_t max_blocks) const;
  void touch(std::span<const uint64_t> gens);  // LRU: these nodes were just used

  // Registers block i (tokens = its token ids) under parent generation parent_gen (0 for i == 0). Returns the
  // node's generation and whether the cache took `b` (false: an equal node exists, whose generation is
  // returned; or a collision / stale parent, generation 0).
  struct Insert {
    uint64_t gen = 0;
    bool took = false;
  };
  Insert insert(uint64_t key, uint64_t parent_gen, int32_t depth, std::span<const int32_t> tokens, BlockId b);
  // The snapshot of node `gen` (-1 none); assigns one (LRU reuse) when it has none and returns {id, true}
  // when the caller must fill it; {-1, false} when the node is gone or the pool is empty.
  std::pair<int32_t, bool> snapshot_for(uint64_t gen);

  bool is_cached(BlockId b) const { return size_t(b) < key_of_.size() && key_of_[size_t(b)] != kNone; }
  // Removes the least recently used node whose block only the cache references (refcount(b) == 1), deepest
  // first among equals, from the device pool and returns its block (the caller drops the cache's reference);
  // block -1 when none. With a host tier the node moves there: `host` is its host block, which the caller must
  // fill from `block` before the block is written again (a StateCopy kBlockToHost); -1: the node was dropped.
  struct Evicted {
    BlockId block = -1;
    int32_t host = -1;
  };
  template <class RefFn>
  Evicted evict(RefFn refcount) {
    const Node* best = nullptr;
    for (const auto& [k, n] : nodes_)
      if (n.block >= 0 && refcount(n.block) == 1 &&
          (!best || n.tick < best->tick || (n.tick == best->tick && n.depth > best->depth)))
        best = &n;
    if (!best) return {};
    ++stats_.evictions;
    return evict_node(best->gen);
  }
  // Host tier: while pinned, a host-resident node is not dropped to make room (an admission restoring it).
  void pin(uint64_t gen, bool on);
  // Host-resident node `gen` now lives in device block b (refcount 1: the cache's); returns the host block the
  // caller copies from (kHostToBlock), -1 when the node is gone or not in the host tier.
  int32_t restore(uint64_t gen, BlockId b);

  PrefixCacheStats& stats() { return stats_; }
  PrefixCacheStats stats_now() const;

 private:
  static constexpr uint64_t kNone = ~uint64_t(0);
  struct Node {
    uint64_t gen = 0, parent_gen = 0;
    int32_t depth = 0;
    BlockId block = -1;
    int32_t snapshot = -1;
    int32_t host = -1;     // host-tier block (block == -1 then)
    bool pinned = false;
    uint64_t tick = 0;
    std::vector<int32_t> tokens;
  };
  void erase(uint64_t key);
  Evicted evict_node(uint64_t gen);
  int32_t host_block();  // a free host-tier block, dropping the LRU unpinned host node when full; -1 when none
  const Node* by_gen(uint64_t gen) const;

  PrefixCacheConfig cfg_;
  std::unordered_map<uint64_t, Node> nodes_;       // key -> node
  std::unordered_map<uint64_t, uint64_t> gen_key_;  // generation -> key
  std::vector<uint64_t> key_of_;                   // block -> key (kNone: not cached)
  std::vector<uint64_t> snap_owner_;               // snapshot -> owning generation (0: free)
  std::vector<int32_t> host_free_;                 // free host-tier blocks (LIFO)
  uint64_t next_gen_ = 1, tick_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace dsinfer::cache
