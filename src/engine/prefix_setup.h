// Engine::create's prefix-caching setup: parses EngineOptions::enable_prefix_caching, sizes the snapshot pool
// and the host tier, and seeds the block hash chain with the model's identity (config.json bytes, the runner / numerics, the state
// layout), so that blocks of two different models or numerics can never match.
#pragma once
#include <cstdint>

#include "cache/state_cache.h"
#include "dsinfer/engine.h"
#include "runner/model_runner.h"

namespace dsinfer::engine {

// What the runner must hold for the prefix cache (runner::ModelRunner::bind_snapshots / bind_host_blocks).
struct PrefixMemory {
  int32_t num_snapshots = 0;
  int32_t num_host_blocks = 0;
};

// Enables the prefix cache on `sc` (nothing when "off") and sizes its snapshot pool and host tier. Fails on an
// unknown mode, a negative snapshot or host budget, or speculative decoding (not combined yet).
Result<PrefixMemory> setup_prefix_cache(const EngineOptions& o, const runner::ModelRunner& runner, bool speculative,
                                   int64_t state_budget_bytes, cache::StateCache& sc);

}  // namespace dsinfer::engine
