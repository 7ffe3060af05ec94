// PrefixCache (see header).
#include "cache/prefix_cache.h"

#include <algorithm>

namespace dsinfer::cache {

Result<PrefixMode> parse_prefix_mode(const std::string& name) {
  if (name == "off" || name.empty()) return PrefixMode::kOff;
  if (name == "exact") return PrefixMode::kExact;
  if (name == "bounded") return PrefixMode::kBounded;
  return Status::errorf("unknown prefix caching mode '{}' (expected exact, bounded or off)", name);
}

const char* prefix_mode_name(PrefixMode m) {
  switch (m) {
    case PrefixMode::kOff: return "off";
    case PrefixMode::kExact: return "exact";
    case PrefixMode::kBounded: return "bounded";
  }
  return "?";
}

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64 finaliser over (running state ^ token): cheap, and every token moves every bit.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9E3779B97F4A7C15ull);
  for (int32_t t : tokens) h = mix(h ^ (uint64_t(uint32_t(t)) + 0x9E3779B97F4A7C15ull));
  return mix(h ^ uint64_t(tokens.size()));
}

PrefixCache::PrefixCache(const PrefixCacheConfig& cfg, int32_t num_blocks)
    : cfg_(cfg), key_of_(size_t(num_blocks), kNone), snap_owner_(size_t(std::max(cfg.num_snapshots, 0)), 0) {
  stats_.mode = prefix_mode_name(cfg.mode);
  for (int32_t h = cfg.num_host_blocks - 1; h >= 0; --h) host_free_.push_back(h);  // hands out 0, 1, 2, ...
}

void PrefixCache::extend_keys(std::span<const int32_t> tokens, std::vector<uint64_t>& keys) const {
  const size_t bs = size_t(cfg_.block_size);
  for (size_t i = keys.size(); (i + 1) * bs <= tokens.size(); ++i) {
    uint64_t k = hash_block(i == 0 ? cfg_.seed : keys[i - 1], tokens.subspan(i * bs, bs)) & cfg_.hash_mask;
    if (k == kNone) k = kNone - 1;
    keys.push_back(k);
  }
}

const PrefixCache::Node* PrefixCache::by_gen(uint64_t gen) const {
  auto g = gen_key_.find(gen);
  if (g == gen_key_.end()) return nullptr;
  auto it = nodes_.find(g->second);
  return it == nodes_.end() || it->second.gen != gen ? nullptr : &it->second;
}

PrefixCache::Match PrefixCache::match(std::span<const int32_t> tokens, std::span<const uint64_t> keys,
                                      int32_t max_blocks) const {
  Match m;
  const size_t bs = size_t(cfg_.block_size);
  uint64_t parent = 0;
  for (int32_t i = 0; i < max_blocks && size_t(i) < keys.size() && (size_t(i) + 1) * bs <= tokens.size(); ++i) {
    auto it = nodes_.find(keys[size_t(i)]);
    if (it == nodes_.end()) break;
    const Node& n = it->second;
    // The key only finds the candidate: its parent node and its own token ids must be ours.
    if (n.depth != i || n.parent_gen != parent || !std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin() + i * bs))
      break;
    m.blocks.push_back(n.block);
    m.gens.push_back(n.gen);
    if (n.snapshot >= 0) {
      m.snapshot_blocks = i + 1;
      m.snapshot = n.snapshot;
    }
    parent = n.gen;
  }
  return m;
}

void PrefixCache::touch(std::span<const uint64_t> gens) {
  ++tick_;
  for (uint64_t g : gens) {
    auto k = gen_key_.find(g);
    if (k == gen_key_.end()) continue;
    auto it = nodes_.find(k->second);
    if (it != nodes_.end()) it->second.tick = tick_;
  }
}

PrefixCache::Insert PrefixCache::insert(uint64_t key, uint64_t parent_gen, int32_t depth, std::span<const int32_t> tokens,
                                        BlockId b) {
  if (depth > 0 && !by_gen(parent_gen)) return {};  // the parent was evicted: the chain is broken here
  auto it = nodes_.find(key);
  if (it != nodes_.end()) {
    const Node& n = it->second;
    const bool same = n.depth == depth && n.parent_gen == parent_gen &&
                      std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin(), tokens.end());
    if (same && n.block < 0 && !n.pinned) {  // in the host tier: the fresh device copy replaces it (no copy back)
      Node& m = it->second;
      host_free_.push_back(m.host);
      m.host = -1;
      m.block = b;
      m.tick = ++tick_;
      key_of_[size_t(b)] = key;
      return {m.gen, true};
    }
    return {same ? n.gen : 0, false};  // not same: a collision; the first owner of the key keeps it
  }
  Node n;
  n.gen = next_gen_++;
  n.parent_gen = parent_gen;
  n.depth = depth;
  n.block = b;
  n.tick = ++tick_;
  n.tokens.assign(tokens.begin(), tokens.end());
  key_of_[size_t(b)] = key;
  gen_key_[n.gen] = key;
  const uint64_t g = n.gen;
  nodes_.emplace(key, std::move(n));
  return {g, true};
}

std::pair<int32_t, bool> PrefixCache::snapshot_for(uint64_t gen) {
  const Node* cn = by_gen(gen);
  if (!cn || snap_owner_.empty()) return {-1, false};
  Node& n = nodes_.at(gen_key_.at(gen));
  if (n.snapshot >= 0) return {n.snapshot, false};
  int32_t s = -1;
  for (size_t i = 0; i < snap_owner_.size() && s < 0; ++i)
    if (snap_owner_[i] == 0) s = int32_t(i);
  if (s < 0) {  // reuse the least recently used node's snapshot
    Node* victim = nullptr;
    for (auto& [k, o] : nodes_)
      if (o.snapshot >= 0 && o.gen != gen && (!victim || o.tick < victim->tick)) victim = &o;
    if (!victim) return {-1, false};
    s = victim->snapshot;
    victim->snapshot = -1;
    ++stats_.snapshot_evictions;
  }
  snap_owner_[size_t(s)] = gen;
  n.snapshot = s;
  return {s, true};
}

PrefixCache::Evicted PrefixCache::evict_node(uint64_t gen) {
  Node& n = nodes_.at(gen_key_.at(gen));
  const BlockId b = n.block;
  // An orphan (its parent was dropped) can never be matched again: drop it rather than spend host memory on it.
  const bool orphan = n.depth > 0 && !by_gen(n.parent_gen);
  const int32_t h = orphan ? -1 : host_block();  // never n's own: n is on the device
  if (h < 0) {
    erase(key_of_[size_t(b)]);
    return {b, -1};
  }
  key_of_[size_t(b)] = kNone;
  n.block = -1;
  n.host = h;
  ++stats_.host_spills;
  stats_.bytes_to_host += cfg_.block_bytes;
  return {b, h};
}

int32_t PrefixCache::host_block() {
  if (cfg_.num_host_blocks <= 0) return -1;
  if (host_free_.empty()) {
    const Node* victim = nullptr;
    for (const auto& [k, n] : nodes_)
      if (n.host >= 0 && !n.pinned &&
          (!victim || n.tick < victim->tick || (n.tick == victim->tick && n.depth > victim->depth)))
        victim = &n;
    if (!victim) return -1;
    ++stats_.host_evictions;
    erase(gen_key_.at(victim->gen));  // frees its host block
  }
  const int32_t h = host_free_.back();
  host_free_.pop_back();
  return h;
}

void PrefixCache::pin(uint64_t gen, bool on) {
  auto g = gen_key_.find(gen);
  if (g != gen_key_.end()) nodes_.at(g->second).pinned = on;
}

int32_t PrefixCache::restore(uint64_t gen, BlockId b) {
  auto g = gen_key_.find(gen);
  if (g == gen_key_.end()) return -1;
  Node& n = nodes_.at(g->second);
  if (n.host < 0) return -1;
  const int32_t h = n.host;
  host_free_.push_back(h);
  n.host = -1;
  n.pinned = false;
  n.block = b;
  key_of_[size_t(b)] = g->second;
  ++stats_.host_hit_blocks;
  stats_.host_hit_tokens += cfg_.block_size;
  stats_.bytes_to_device += cfg_.block_bytes;
  return h;
}

void PrefixCache::erase(uint64_t key) {
  auto it = nodes_.find(key);
  if (it == nodes_.end()) return;
  if (it->second.snapshot >= 0) snap_owner_[size_t(it->second.snapshot)] = 0;
  if (it->second.host >= 0) host_free_.push_back(it->second.host);
  if (it->second.block >= 0) key_of_[size_t(it->second.block)] = kNone;
  gen_key_.erase(it->second.gen);
  nodes_.erase(it);
}

PrefixCacheStats PrefixCache::stats_now() const {
  PrefixCacheStats s = stats_;
  s.cached_blocks = int64_t(nodes_.size());
  s.snapshots = std::count_if(snap_owner_.begin(), snap_owner_.end(), [](uint64_t g) { return g != 0; });
  s.snapshot_bytes = s.snapshots * cfg_.snapshot_bytes;
  s.snapshot_budget_bytes = int64_t(snap_owner_.size()) * cfg_.snapshot_bytes;
  s.host_blocks = std::max<int64_t>(cfg_.num_host_blocks, 0) - int64_t(host_free_.size());
  s.host_bytes = s.host_blocks * cfg_.block_bytes;
  s.host_budget_bytes = std::max<int64_t>(cfg_.num_host_blocks, 0) * cfg_.block_bytes;
  return s;
}

}  // namespace dsinfer::cache
