// Engine::create's prefix-caching setup: parses EngineOptions::enable_prefix_caching, sizes the snapshot pool
// and seeds the block hash chain with the model's identity (config.json bytes, the runner / numerics, the state
// layout), so that blocks of two different models or numerics can never match.
#pragma once
#include <cstdint>

#include "cache/state_cache.h"
#include "dsinfer/engine.h"
#include "engine/model_runner.h"

namespace dsinfer::engine {

// Enables the prefix cache on `sc` (nothing when "off") and returns how many slot snapshots the runner must
// hold. Fails on an unknown mode, a negative snapshot budget, or speculative decoding (not combined yet).
Result<int32_t> setup_prefix_cache(const EngineOptions& o, const ModelRunner& runner, bool speculative,
                                   int64_t state_budget_bytes, cache::StateCache& sc);

}  // namespace dsinfer::engine
