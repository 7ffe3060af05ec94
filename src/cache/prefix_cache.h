// PrefixCache: content-addressed token blocks (bookkeeping only; the StateCache owns the references and the
// runner the memory). A block is keyed by a hash chain over the token ids of every block up to it, seeded
// with the model / numerics identity; a node remembers its block's token ids and its parent node, and a
// lookup compares both, so a hash collision can never hand a sequence a block whose content it does not share.
// Exact mode also keeps *snapshots* of the per-sequence slot state (rings, compressor frontiers, overlap rows,
// n-gram history: the whole slot) taken when a sequence stood exactly at a block boundary; a hit on a block
// with a snapshot resumes bit-identically. Snapshots live in a fixed pool (the runner's memory) with LRU reuse.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/block_allocator.h"
#include "core/status.h"
#include "dsinfer/engine.h"

namespace dsinfer::cache {

// kExact: hits only where a snapshot exists (bit-identical); kBounded: also hits on blocks without a snapshot,
// rebuilding the sliding window by recomputing its last `window` tokens (not bit-identical).
enum class PrefixMode { kOff, kExact, kBounded };
Result<PrefixMode> parse_prefix_mode(const std::string& name);  // "off", "exact", "bounded"
const char* prefix_mode_name(PrefixMode m);

// A state copy the runner performs between steps (ModelRunner::copy_state). Slots, snapshots and blocks are
// each slot_bytes / slot_bytes / block_bytes long.
struct StateCopy {
  enum class Kind : uint8_t { kSlotToSnapshot, kSnapshotToSlot, kBlockToBlock, kZeroSlot };
  Kind kind = Kind::kZeroSlot;
  int32_t src = -1, dst = -1;  // kZeroSlot: dst only
};

// The counters are the public API's (dsinfer/engine.h), filled here.
using PrefixCacheStats = PrefixCacheMetrics;

struct PrefixCacheConfig {
  PrefixMode mode = PrefixMode::kOff;
  uint64_t seed = 0;             // model / config / numerics identity: different models never share a key
  int64_t block_size = 0;
  int32_t num_snapshots = 0;     // snapshot pool size (0: no snapshots; exact mode then never hits)
  int64_t snapshot_bytes = 0;    // bytes of one snapshot (= slot_bytes)
  uint64_t hash_mask = ~uint64_t(0);  // tests: a narrow mask makes keys collide on purpose
};

// 64-bit chain hash of one block: parent key and the block's token ids.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  PrefixCache(const PrefixCacheConfig& cfg, int32_t num_blocks);

  PrefixMode mode() const { return cfg_.mode; }
  int64_t block_size() const { return cfg_.block_size; }
  uint64_t seed() const { return cfg_.seed; }
  bool has_snapshots() const { return !snap_owner_.empty(); }
  // Appends the chain keys of the complete blocks of tokens beyond the keys already in `keys`.
  void extend_keys(std::span<const int32_t> tokens, std::vector<uint64_t>& keys) const;

  struct Match {
    std::vector<BlockId> blocks;    // cached blocks matching the first blocks.size() blocks of the tokens
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
  // first among equals, and returns its block (the caller drops the cache's reference); -1 when none.
  template <class RefFn>
  BlockId evict(RefFn refcount) {
    const Node* best = nullptr;
    for (const auto& [k, n] : nodes_)
      if (refcount(n.block) == 1 && (!best || n.tick < best->tick || (n.tick == best->tick && n.depth > best->depth)))
        best = &n;
    if (!best) return -1;
    const BlockId b = best->block;
    erase(key_of_[size_t(b)]);
    ++stats_.evictions;
    return b;
  }

  PrefixCacheStats& stats() { return stats_; }
  PrefixCacheStats stats_now() const;

 private:
  static constexpr uint64_t kNone = ~uint64_t(0);
  struct Node {
    uint64_t gen = 0, parent_gen = 0;
    int32_t depth = 0;
    BlockId block = -1;
    int32_t snapshot = -1;
    uint64_t tick = 0;
    std::vector<int32_t> tokens;
  };
  void erase(uint64_t key);
  const Node* by_gen(uint64_t gen) const;

  PrefixCacheConfig cfg_;
  std::unordered_map<uint64_t, Node> nodes_;       // key -> node
  std::unordered_map<uint64_t, uint64_t> gen_key_;  // generation -> key
  std::vector<uint64_t> key_of_;                   // block -> key (kNone: not cached)
  std::vector<uint64_t> snap_owner_;               // snapshot -> owning generation (0: free)
  uint64_t next_gen_ = 1, tick_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace dsinfer::cache
