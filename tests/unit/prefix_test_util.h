// Shared by the prefix-caching tests (test_prefix_cache.cpp, test_prefix_host_tier.cpp): synthetic token
// sequences, engine options, request bodies, a set of requests sharing prefixes, and a run that sends requests one
// at a time (so that later ones can hit) and collects their tokens and the prefix-cache metrics.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "api/request.h"
#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "test_util.h"

namespace dsinfer::prefix_test {

using nlohmann::json;

inline std::vector<int32_t> seq_tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(2 + (i * 37 + salt * 11 + i * i) % 200);
  return t;
}

// Registers every complete block of `toks` as one chain (block ids from *next).
inline void insert_chain(cache::PrefixCache& pc, const std::vector<int32_t>& toks, cache::BlockId* next) {
  std::vector<uint64_t> keys;
  pc.extend_keys(toks, keys);
  uint64_t parent = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::span<const int32_t> bt(toks.data() + i * size_t(pc.block_size()), size_t(pc.block_size()));
    parent = pc.insert(keys[i], parent, int32_t(i), bt, (*next)++).gen;
    if (parent == 0) break;
  }
}

inline EngineOptions options(const std::string& model, const std::string& mode, double state_gb = 0, double snap_gb = 0.01) {
  EngineOptions o;
  o.model_dir = model;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 512;
  o.max_model_len = 256;
  o.seed = 5;
  o.state_memory_gb = state_gb;
  o.enable_prefix_caching = mode;
  o.prefix_snapshot_memory_gb = snap_gb;
  return o;
}

inline json body(const std::vector<int32_t>& prompt, int max_tokens, int variant) {
  json b = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
  if (variant % 2) b.update({{"temperature", 0.8}, {"top_p", 0.9}, {"seed", 300 + variant}});
  else b["temperature"] = 0.0;
  return b;
}

// Requests sharing prefixes: a common system prefix, then branches of different lengths (one token apart at
// every offset of a block), and a multi-turn extension of an earlier prompt plus its reply.
inline std::vector<json> shared_prefix_requests(int vocab_cap) {
  std::vector<json> out;
  const std::vector<int32_t> sys = seq_tokens(40, 9);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = sys;
    for (int32_t t : seq_tokens(5 + 13 * i, 20 + i)) p.push_back(t % vocab_cap);
    if (i == 3) p[size_t(16 + 7)] += 1;  // differs from the others inside block 1 only
    out.push_back(body(p, 6 + i % 3, i));
  }
  return out;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;  // per request (choice 0), in request order
  PrefixCacheMetrics pm;
};

// One request at a time (so later ones can hit), in the given order.
inline RunResult run_in_order(const EngineOptions& o, const std::vector<json>& bodies, const std::vector<size_t>& order) {
  auto e = test::unwrap(engine::Engine::create(o));
  RunResult r;
  r.tokens.resize(bodies.size());
  for (size_t i : order) {
    Request req;
    test::require_ok(api::parse_request_body(nlohmann::ordered_json::parse(bodies[i].dump()), std::nullopt, req));
    test::unwrap(e->add(req));
    for (int guard = 0; e->has_unfinished() && guard < 5000; ++guard) test::require_ok(e->step());
    for (auto& f : e->take_finished()) r.tokens[i] = f.choices.at(0).token_ids;
  }
  r.pm = e->prefix_stats();
  return r;
}

}  // namespace dsinfer::prefix_test
