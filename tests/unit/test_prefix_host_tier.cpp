// Prefix-cache host tier (cache/prefix_cache.h, StateCache::admit / take, cache/state_copy.h): blocks evicted from
// the state memory move to a bounded host pool and come back on a hit; the copies are planned once for both
// runners. Exact mode with a tiny block budget and a host tier gives the outputs of no caching (greedy and seeded,
// any order, host pool exhausted or not), host-tier hits really happen, and a host-tier hit never brings back a
// block whose tokens differ from the request's, even when every key collides.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cache/prefix_cache.h"
#include "cache/state_copy.h"
#include "prefix_test_util.h"
#include "test_util.h"

using namespace dsinfer;
using namespace dsinfer::prefix_test;
using K = cache::StateCopy::Kind;

TEST(PrefixHostTier, CopyRunsMergeAdjacentTransfersAndMatchOneByOneCopies) {
  const int64_t sb = 24, bb = 40, S = 3, B = 10, N = 2, H = 6;
  std::vector<uint8_t> mem(size_t(S * sb + B * bb + N * sb + H * bb));
  std::iota(mem.begin(), mem.end(), uint8_t(1));
  std::vector<uint8_t> ref = mem;
  auto layout = [&](std::vector<uint8_t>& m) {
    uint8_t* p = m.data();
    return cache::StateMemory{p, p + S * sb, p + S * sb + B * bb, p + S * sb + B * bb + N * sb, S, B, N, H, sb, bb};
  };
  const std::vector<cache::StateCopy> copies = {
      {K::kBlockToHost, 2, 0}, {K::kBlockToHost, 3, 1}, {K::kBlockToHost, 4, 2},  // one run
      {K::kBlockToHost, 7, 3},                                                     // source not adjacent
      {K::kHostToBlock, 0, 5}, {K::kHostToBlock, 1, 6},                            // one run, reads the spill
      {K::kBlockToBlock, 5, 8}, {K::kBlockToBlock, 6, 9},                          // same pool: never merged
      {K::kZeroSlot, -1, 0},    {K::kZeroSlot, -1, 1},
      {K::kSlotToSnapshot, 1, 0}, {K::kSlotToSnapshot, 2, 1},                      // one run
  };
  auto runs = cache::plan_copy_runs(copies, layout(mem));
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 8u);
  EXPECT_EQ((*runs)[0].dir, cache::CopyRun::Dir::kToHost);
  EXPECT_EQ((*runs)[0].bytes, size_t(3 * bb));
  EXPECT_EQ((*runs)[2].dir, cache::CopyRun::Dir::kToDevice);
  EXPECT_EQ((*runs)[2].bytes, size_t(2 * bb));
  EXPECT_EQ((*runs)[7].bytes, size_t(2 * sb));
  for (const cache::CopyRun& r : *runs) r.src ? void(std::memmove(r.dst, r.src, r.bytes)) : void(std::memset(r.dst, 0, r.bytes));
  // The same copies one at a time, each on its own.
  for (const cache::StateCopy& c : copies) {
    auto one = cache::plan_copy_runs(std::span<const cache::StateCopy>(&c, 1), layout(ref));
    ASSERT_TRUE(one.is_ok());
    for (const cache::CopyRun& r : *one) r.src ? void(std::memmove(r.dst, r.src, r.bytes)) : void(std::memset(r.dst, 0, r.bytes));
  }
  EXPECT_EQ(mem, ref);

  for (const cache::StateCopy bad : {cache::StateCopy{K::kBlockToHost, 10, 0}, cache::StateCopy{K::kBlockToHost, 0, 6},
                                     cache::StateCopy{K::kHostToBlock, -1, 0}, cache::StateCopy{K::kHostToBlock, 0, 10}}) {
    auto r = cache::plan_copy_runs(std::span<const cache::StateCopy>(&bad, 1), layout(mem));
    EXPECT_FALSE(r.is_ok());
  }
  cache::StateMemory no_host = layout(mem);
  no_host.host_blocks = nullptr;
  no_host.num_host_blocks = 0;
  EXPECT_FALSE(cache::plan_copy_runs(std::span<const cache::StateCopy>(copies.data(), 1), no_host).is_ok());
}

namespace {

cache::PrefixCacheConfig host_config(int32_t host_blocks, uint64_t mask = ~uint64_t(0)) {
  cache::PrefixCacheConfig c;
  c.mode = cache::PrefixMode::kExact;
  c.seed = 11;
  c.block_size = 16;
  c.num_host_blocks = host_blocks;
  c.block_bytes = 100;
  c.hash_mask = mask;
  return c;
}

cache::PrefixCache::Match match_all(const cache::PrefixCache& pc, const std::vector<int32_t>& t) {
  std::vector<uint64_t> keys;
  pc.extend_keys(t, keys);
  return pc.match(t, keys, int32_t(keys.size()));
}

}  // namespace

TEST(PrefixHostTier, EvictedBlocksMoveToTheHostComeBackAndTheHostEvictsLru) {
  cache::PrefixCache pc(host_config(2), 16);
  cache::BlockId next = 0;
  const std::vector<int32_t> a = seq_tokens(4 * 16, 1);
  insert_chain(pc, a, &next);  // blocks 0..3, oldest first
  const auto only_cache = [](cache::BlockId) { return 1; };
  const std::vector<uint64_t> gens = match_all(pc, a).gens;
  ASSERT_EQ(gens.size(), 4u);

  const auto e0 = pc.evict(only_cache);  // LRU: block 0 -> host block 0
  EXPECT_EQ(e0.block, 0);
  EXPECT_EQ(e0.host, 0);
  EXPECT_FALSE(pc.is_cached(0));
  auto m = match_all(pc, a);
  ASSERT_EQ(m.blocks.size(), 4u);  // the chain still matches: block 0 is in the host tier
  EXPECT_EQ(m.blocks[0], -1);
  EXPECT_EQ(m.blocks[1], 1);

  EXPECT_EQ(pc.restore(gens[0], 9), 0);  // back into device block 9, host block 0 free again
  EXPECT_TRUE(pc.is_cached(9));
  EXPECT_EQ(match_all(pc, a).blocks[0], 9);
  EXPECT_EQ(pc.restore(gens[0], 10), -1);  // not in the host tier any more
  cache::PrefixCacheStats st = pc.stats_now();
  EXPECT_EQ(st.host_spills, 1);
  EXPECT_EQ(st.host_hit_blocks, 1);
  EXPECT_EQ(st.host_hit_tokens, 16);
  EXPECT_EQ(st.bytes_to_host, 100);
  EXPECT_EQ(st.bytes_to_device, 100);
  EXPECT_EQ(st.host_blocks, 0);

  // Three spills into two host blocks: the least recently used host node (block 1's) is dropped.
  pc.touch({&gens[0], 1});  // block 9 (node 0) becomes the most recent
  EXPECT_EQ(pc.evict(only_cache).block, 1);
  EXPECT_EQ(pc.evict(only_cache).block, 2);
  const auto e3 = pc.evict(only_cache);
  EXPECT_EQ(e3.block, 3);
  EXPECT_GE(e3.host, 0);
  st = pc.stats_now();
  EXPECT_EQ(st.host_evictions, 1);
  EXPECT_EQ(st.host_blocks, 2);
  EXPECT_EQ(match_all(pc, a).blocks.size(), 1u);  // node 1 is gone: the chain ends after block 0

  // Pinned host nodes are never dropped: the next device eviction drops its node instead of spilling it.
  const std::vector<int32_t> b = seq_tokens(16, 7);
  insert_chain(pc, b, &next);
  pc.pin(gens[2], true);
  pc.pin(gens[3], true);
  pc.touch({&gens[0], 1});
  const auto drop = pc.evict(only_cache);
  EXPECT_EQ(drop.host, -1);
  EXPECT_EQ(pc.stats_now().host_evictions, 1);

  // A host-resident node computed again by a sequence takes the fresh device block (no copy back).
  pc.pin(gens[3], false);
  std::vector<uint64_t> keys;
  pc.extend_keys(a, keys);
  const auto ins = pc.insert(keys[3], gens[2], 3, std::span<const int32_t>(a.data() + 48, 16), 12);
  EXPECT_TRUE(ins.took);
  EXPECT_EQ(ins.gen, gens[3]);
  EXPECT_TRUE(pc.is_cached(12));
  EXPECT_EQ(pc.stats_now().host_blocks, 1);
}

TEST(PrefixHostTier, AnOrphanedBlockIsDroppedNotSpilled) {
  cache::PrefixCache pc(host_config(1), 8);
  cache::BlockId next = 0;
  const std::vector<int32_t> a = seq_tokens(2 * 16, 1), c = seq_tokens(16, 2);
  insert_chain(pc, a, &next);  // blocks 0, 1
  const std::vector<uint64_t> ga = match_all(pc, a).gens;
  const auto only_cache = [](cache::BlockId) { return 1; };
  EXPECT_EQ(pc.evict(only_cache).host, 0);  // a's block 0 -> the host
  insert_chain(pc, c, &next);               // block 2
  pc.touch({&ga[1], 1});
  const auto ec = pc.evict(only_cache);     // c's block: the full host tier drops a's block 0 for it
  EXPECT_EQ(ec.block, 2);
  EXPECT_EQ(ec.host, 0);
  const auto e1 = pc.evict(only_cache);     // a's block 1 can no longer be matched: dropped
  EXPECT_EQ(e1.block, 1);
  EXPECT_EQ(e1.host, -1);
  const cache::PrefixCacheStats st = pc.stats_now();
  EXPECT_EQ(st.host_spills, 2);
  EXPECT_EQ(st.host_evictions, 1);
  EXPECT_EQ(st.host_blocks, 1);
  EXPECT_EQ(match_all(pc, c).blocks.size(), 1u);
}

TEST(PrefixHostTier, HostHitNeverRestoresABlockWhoseTokensDiffer) {
  for (const uint64_t mask : {~uint64_t(0), uint64_t(0), uint64_t(3)}) {  // real keys; all collide; 4 keys
    cache::PrefixCache pc(host_config(8, mask), 16);
    cache::BlockId next = 0;
    const std::vector<int32_t> a = seq_tokens(3 * 16 + 5, 1);
    insert_chain(pc, a, &next);
    const std::vector<uint64_t> gens = match_all(pc, a).gens;
    while (pc.evict([](cache::BlockId) { return 1; }).block >= 0) {
    }
    ASSERT_EQ(pc.stats_now().host_blocks, int64_t(gens.size())) << mask;
    for (int pos = 0; pos < 3 * 16; ++pos) {
      std::vector<int32_t> b = a;
      b[size_t(pos)] += 1;
      const auto m = match_all(pc, b);
      EXPECT_LE(int(m.blocks.size()), pos / 16) << "mask " << mask << " position " << pos;
      for (size_t i = 0; i < m.blocks.size(); ++i) {
        EXPECT_EQ(m.blocks[i], -1);
        EXPECT_EQ(m.gens[i], gens[i]);  // only a's own nodes, which hold exactly b's tokens there
      }
    }
  }
}

namespace {

// Engine options with a tiny block budget (just above one max_model_len sequence: cached blocks are evicted
// again and again) and a host tier of `host_blocks` blocks.
EngineOptions tight(const std::string& model, int64_t host_blocks) {
  EngineOptions o = options(model, "exact", 100000.0 / double(1 << 30));
  if (host_blocks > 0) {
    auto probe = test::unwrap(engine::Engine::create(o));
    o.prefix_cache_host_bytes = host_blocks * probe->state_cache().layout().block_bytes;
  }
  return o;
}

std::vector<json> host_tier_requests() {
  std::vector<json> reqs = shared_prefix_requests(200);
  // A second conversation turn that resends request 5's prompt plus more, and a long unrelated prompt between
  // them whose blocks push the shared ones out of the state memory.
  std::vector<int32_t> turn2 = reqs[5]["prompt"].get<std::vector<int32_t>>();
  for (int32_t t : seq_tokens(21, 41)) turn2.push_back(t);
  reqs.push_back(body(turn2, 5, 7));
  reqs.push_back(body(seq_tokens(150, 77), 4, 8));
  return reqs;
}

}  // namespace

TEST(PrefixHostTierEngine, TinyBlockBudgetWithHostTierEqualsNoCacheInAnyOrder) {
  for (const std::string& m : {test::own_fixture("tiny-v4-a"), test::own_fixture("tiny-v4-b")}) {
    const std::vector<json> reqs = host_tier_requests();
    std::vector<size_t> fwd(reqs.size());
    std::iota(fwd.begin(), fwd.end(), size_t(0));
    const RunResult ref = run_in_order(options(m, "off"), reqs, fwd);
    const std::vector<size_t> mixed = {0, 7, 5, 1, 7, 6, 2, 7, 3, 0, 4, 6};
    const std::vector<size_t> rev(fwd.rbegin(), fwd.rend());
    for (const auto& order : {fwd, rev, mixed}) {
      const RunResult dropped = run_in_order(tight(m, 0), reqs, order);
      const RunResult host = run_in_order(tight(m, 64), reqs, order);
      EXPECT_EQ(host.tokens, ref.tokens) << m;
      EXPECT_EQ(dropped.tokens, ref.tokens) << m;
      EXPECT_GT(host.pm.host_spills, 0) << m;
      EXPECT_EQ(host.pm.host_evictions, 0) << m;
      EXPECT_EQ(host.pm.bytes_to_device, host.pm.host_hit_blocks * (host.pm.host_budget_bytes / 64)) << m;
      EXPECT_EQ(dropped.pm.host_spills, 0) << m;
      std::printf("[host tier] %s: hit tokens %lld (no host tier %lld), host hits %lld blocks, spills %lld\n",
                  m.substr(m.find_last_of('/') + 1).c_str(), (long long)host.pm.hit_tokens,
                  (long long)dropped.pm.hit_tokens, (long long)host.pm.host_hit_blocks, (long long)host.pm.host_spills);
      if (order == mixed) {
        // Revisited prompts whose blocks the tiny budget evicted: only the host tier brings them back.
        EXPECT_GT(host.pm.host_hit_blocks, 0) << m;
        EXPECT_GT(host.pm.hit_tokens, dropped.pm.hit_tokens) << m;
      }
    }
  }
}

TEST(PrefixHostTierEngine, ExhaustedHostPoolEvictsLruAndStaysCorrect) {
  const std::string m = test::own_fixture("tiny-v4-b");
  const std::vector<json> reqs = host_tier_requests();
  std::vector<size_t> fwd(reqs.size());
  std::iota(fwd.begin(), fwd.end(), size_t(0));
  const RunResult ref = run_in_order(options(m, "off"), reqs, fwd);
  const std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6, 7, 5, 0, 6, 2, 7, 1};
  for (const int64_t host_blocks : {1, 3, 6}) {
    const RunResult r = run_in_order(tight(m, host_blocks), reqs, order);
    EXPECT_EQ(r.tokens, ref.tokens) << host_blocks;
    EXPECT_GT(r.pm.host_evictions, 0) << host_blocks;
    EXPECT_LE(r.pm.host_blocks, host_blocks);
    EXPECT_EQ(r.pm.bytes_to_host, r.pm.host_spills * (r.pm.host_budget_bytes / host_blocks));
  }
  // Bounded replay restores host-tier blocks too (its scratch copies read the restored blocks): every request
  // completes, with host-tier hits.
  EngineOptions b = tight(m, 3);
  b.enable_prefix_caching = "bounded";
  const RunResult r = run_in_order(b, reqs, order);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(r.tokens[i].size(), ref.tokens[i].size()) << i;
  EXPECT_GT(r.pm.host_hit_blocks, 0);
  EXPECT_GT(r.pm.bounded_hits, 0);
}
