// setup_prefix_cache (see prefix_setup.h).
#include "engine/prefix_setup.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dsinfer::engine {

namespace {

uint64_t hash_bytes(uint64_t h, const std::string& bytes) {
  std::vector<int32_t> v(bytes.begin(), bytes.end());
  return cache::hash_block(h, v);
}

uint64_t identity_seed(const EngineOptions& o, const runner::ModelRunner& runner, const cache::StateLayout& L) {
  std::string config;
  std::ifstream f(std::filesystem::path(o.model_dir) / "config.json", std::ios::binary);
  if (f) config.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  uint64_t h = hash_bytes(0x64736966ull, config);  // model / config identity
  h = hash_bytes(h, runner.name());                   // backend and numerics profile
  h = hash_bytes(h, o.numerics + "|" + o.load_format);
  const std::vector<int32_t> shape = {int32_t(L.block_size), int32_t(L.block_bytes), int32_t(L.slot_bytes),
                                      int32_t(L.kv_elem_bytes), int32_t(L.ring_rows)};
  return cache::hash_block(h, shape);
}

}  // namespace

Result<PrefixMemory> setup_prefix_cache(const EngineOptions& o, const runner::ModelRunner& runner, bool speculative,
                                        int64_t state_budget_bytes, cache::StateCache& sc) {
  DSI_ASSIGN_OR_RETURN(const cache::PrefixMode mode, cache::parse_prefix_mode(o.enable_prefix_caching));
  if (o.prefix_cache_host_bytes < 0)
    return Status::errorf("prefix_cache_host_bytes must be >= 0, found {}", o.prefix_cache_host_bytes);
  if (mode == cache::PrefixMode::kOff) return PrefixMemory{};
  if (speculative)
    return Status::errorf("enable_prefix_caching '{}' cannot be combined with speculative decoding yet (the drafter's "
                          "own state is not snapshot)", o.enable_prefix_caching);
  if (!(o.prefix_snapshot_memory_gb >= 0))
    return Status::errorf("prefix_snapshot_memory_gb must be >= 0, found {}", o.prefix_snapshot_memory_gb);
  const cache::StateLayout& L = sc.layout();
  const int64_t budget = o.prefix_snapshot_memory_gb > 0 ? int64_t(o.prefix_snapshot_memory_gb * double(int64_t(1) << 30))
                                                         : state_budget_bytes / 4;
  cache::PrefixCacheConfig pc;
  pc.mode = mode;
  pc.seed = identity_seed(o, runner, L);
  pc.block_size = L.block_size;
  pc.snapshot_bytes = L.slot_bytes;
  pc.num_snapshots = L.slot_bytes > 0 ? int32_t(std::min<int64_t>(budget / L.slot_bytes, INT32_MAX / 2)) : 0;
  pc.block_bytes = L.block_bytes;
  pc.num_host_blocks =
      L.block_bytes > 0 ? int32_t(std::min<int64_t>(o.prefix_cache_host_bytes / L.block_bytes, INT32_MAX / 2)) : 0;
  sc.enable_prefix_cache(pc);
  return PrefixMemory{pc.num_snapshots, pc.num_host_blocks};
}

}  // namespace dsinfer::engine
