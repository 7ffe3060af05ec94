// State sizes against research §11.2's hand-computed Flash numbers, layout invariants, budget split,
// block accounting (admit / grow / truncate / free), reference counts for shared prefix blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "cache/state_cache.h"

using namespace dsinfer;
using namespace dsinfer::cache;
using io::AttnType;

namespace {

// DeepSeek-V4-Flash attention schedule as far as state is concerned: 43 layers, 2 sliding, 21 CSA (4),
// 20 HCA (128); head_dim 512, index_head_dim 128, sliding_window 128 (research §11.2 / §19).
io::ModelConfig flash_like() {
  io::ModelConfig c;
  c.head_dim = 512;
  c.index_head_dim = 128;
  c.sliding_window = 128;
  c.max_position_embeddings = 1 << 20;
  for (int i = 0; i < 2; ++i) { c.layer_types.push_back(AttnType::Sliding); c.compress_ratios.push_back(0); }
  for (int i = 0; i < 21; ++i) { c.layer_types.push_back(AttnType::CSA); c.compress_ratios.push_back(4); }
  for (int i = 0; i < 20; ++i) { c.layer_types.push_back(AttnType::HCA); c.compress_ratios.push_back(128); }
  c.num_hidden_layers = 43;
  return c;
}

// HF unit-test tiny config (research §1.3): [HCA, CSA], head_dim 32, index_head_dim 16, window 8.
io::ModelConfig tiny() {
  io::ModelConfig c;
  c.head_dim = 32;
  c.index_head_dim = 16;
  c.sliding_window = 8;
  c.max_position_embeddings = 64;
  c.layer_types = {AttnType::HCA, AttnType::CSA};
  c.compress_ratios = {128, 4};
  c.num_hidden_layers = 2;
  return c;
}

}  // namespace

TEST(StateSizes, FlashMatchesResearchNumbers) {
  StateCacheConfig cc;
  cc.kv_elem_bytes = 2;  // bf16 rows, as §11.2 counts them
  StateSizes s = compute_state_sizes(flash_like(), cc);
  EXPECT_DOUBLE_EQ(s.bytes_per_token, 6880.0);        // 21 * (1024/4 + 256/4) + 20 * 1024/128
  EXPECT_EQ(s.ring_bytes, 43 * 128 * 1024);           // 43 x 128 KiB
  EXPECT_EQ(s.frontier_bytes, 21 * 80 * 1024 + 20 * 512 * 1024);
  cc.num_speculative_tokens = 4;  // speculative slack: 4 more rows in every ring and frontier
  StateSizes t = compute_state_sizes(flash_like(), cc);
  EXPECT_EQ(t.ring_bytes, 43 * 132 * 1024);
  EXPECT_EQ(t.frontier_bytes, 21 * 12 * (4096 + 1024) * 2 + 20 * 132 * 4096);
  EXPECT_DOUBLE_EQ(t.bytes_per_token, s.bytes_per_token);
}

TEST(StateLayout, FlashBlockHoldsBlockSizeTokensOfAllLayers) {
  StateCacheConfig cc;
  cc.kv_elem_bytes = 2;
  auto L = compute_state_layout(flash_like(), cc);
  ASSERT_TRUE(L.is_ok()) << L.status().message();
  EXPECT_EQ(L->block_size, 128);
  EXPECT_EQ(L->block_bytes, 6880 * 128);  // every region is already a multiple of 256 B: no padding
  EXPECT_EQ(L->ring_rows, 128);
}

TEST(StateLayout, RegionsAreAlignedDisjointAndAddressable) {
  for (int spec : {0, 3}) {
    StateCacheConfig cc;
    cc.num_speculative_tokens = spec;
    auto r = compute_state_layout(tiny(), cc);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const StateLayout& L = *r;
    EXPECT_EQ(L.block_size, 128);  // lcm(128, 4)
    // Collect [begin, end) of every region; they must not overlap and must start aligned.
    std::vector<std::pair<int64_t, int64_t>> slot, block;
    for (const LayerState& l : L.layers) {
      slot.push_back({l.ring_offset, l.ring_offset + L.ring_rows * L.head_dim * 4});
      if (l.frontier_offset >= 0) slot.push_back({l.frontier_offset, l.frontier_offset + l.frontier_rows * l.frontier_width * 4});
      if (l.index_frontier_offset >= 0)
        slot.push_back({l.index_frontier_offset, l.index_frontier_offset + l.frontier_rows * l.index_frontier_width * 4});
      if (l.entries_offset >= 0) block.push_back({l.entries_offset, l.entries_offset + l.entries_per_block * L.head_dim * 4});
      if (l.index_keys_offset >= 0)
        block.push_back({l.index_keys_offset, l.index_keys_offset + l.entries_per_block * L.index_head_dim * 4});
    }
    for (auto* regions : {&slot, &block}) {
      std::sort(regions->begin(), regions->end());
      for (size_t i = 0; i < regions->size(); ++i) {
        EXPECT_EQ((*regions)[i].first % kAlign, 0);
        if (i) {
          EXPECT_LE((*regions)[i - 1].second, (*regions)[i].first);
        }
      }
    }
    EXPECT_LE(slot.back().second, L.slot_bytes);
    EXPECT_LE(block.back().second, L.block_bytes);
    // HCA: 1 entry per block; CSA: 32. CSA frontier = 2*4 + spec rows of 2 * 2*32 floats.
    EXPECT_EQ(L.layers[0].entries_per_block, 1);
    EXPECT_EQ(L.layers[1].entries_per_block, 32);
    EXPECT_EQ(L.layers[1].frontier_rows, 8 + spec);
    EXPECT_EQ(L.layers[1].frontier_width, 128);
    EXPECT_EQ(L.layers[0].frontier_rows, 128 + spec);
    EXPECT_EQ(L.ring_rows, 8 + spec);
    // Addressing: CSA entry 70 -> block 2, row 6; ring row of position p -> slot p % ring_rows.
    auto loc = L.compressed_entry(1, 70);
    EXPECT_EQ(loc.block_index, 2);
    EXPECT_EQ(loc.offset, L.layers[1].entries_offset + 6 * 32 * 4);
    auto key = L.indexer_key(1, 33);
    EXPECT_EQ(key.block_index, 1);
    EXPECT_EQ(key.offset, L.layers[1].index_keys_offset + 1 * 16 * 4);
    EXPECT_EQ(L.ring_row(0, 8 + spec + 2), L.layers[0].ring_offset + 2 * 32 * 4);
    EXPECT_EQ(L.frontier_row(1, 9 + spec), L.layers[1].frontier_offset + 1 * 128 * 4);
  }
}

TEST(StateLayout, RejectsBadBlockSizeAndConfig) {
  StateCacheConfig cc;
  cc.block_size = 96;  // not a multiple of 128
  auto r = compute_state_layout(tiny(), cc);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("block_size 96"), std::string::npos) << r.status().message();
  io::ModelConfig bad = tiny();
  bad.index_head_dim = 0;
  auto r2 = compute_state_layout(bad, StateCacheConfig{});
  ASSERT_FALSE(r2.is_ok());
  EXPECT_NE(r2.status().message().find("index_head_dim"), std::string::npos);
}

TEST(StateCache, BudgetSplitAndTooSmallBudget) {
  StateCacheConfig cc;
  auto L = compute_state_layout(tiny(), cc);
  ASSERT_TRUE(L.is_ok());
  cc.max_model_len = 64;  // one block per sequence
  cc.max_num_seqs = 4;
  cc.budget_bytes = 4 * L->slot_bytes + 10 * L->block_bytes;
  auto c = StateCache::create(tiny(), cc);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->num_slots(), 4);
  EXPECT_EQ(c->num_blocks(), 4);  // capped: 4 slots x 1 block at max_model_len is all that can be used
  cc.max_model_len = 600;         // 5 blocks per sequence
  auto c2 = StateCache::create(tiny(), cc);
  ASSERT_TRUE(c2.is_ok());
  EXPECT_EQ(c2->num_slots(), 4);
  EXPECT_EQ(c2->num_blocks(), 10);
  cc.budget_bytes = L->slot_bytes + 4 * L->block_bytes;  // < 1 slot + 5 blocks
  auto bad = StateCache::create(tiny(), cc);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("max_model_len=600"), std::string::npos) << bad.status().message();
}

TEST(StateCache, AdmitGrowTruncateFreeAccounting) {
  StateCacheConfig cc;
  cc.block_size = 4;
  cc.max_model_len = 64;
  io::ModelConfig cfg = tiny();
  cfg.layer_types = {AttnType::Sliding, AttnType::CSA};  // block_size 4 is legal without the HCA layer
  cfg.compress_ratios = {0, 4};
  auto L = compute_state_layout(cfg, cc);
  ASSERT_TRUE(L.is_ok());
  cc.max_num_seqs = 2;
  cc.budget_bytes = 2 * L->slot_bytes + 20 * L->block_bytes;
  auto r = StateCache::create(cfg, cc);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  StateCache& c = *r;
  ASSERT_EQ(c.num_blocks(), 20);

  SlotId a = c.admit(10);  // 3 blocks
  ASSERT_GE(a, 0);
  EXPECT_EQ(c.table(a).size(), 3u);
  EXPECT_EQ(c.free_blocks(), 17);
  EXPECT_TRUE(c.allocate_for(a, 12));  // still 3 blocks
  EXPECT_EQ(c.free_blocks(), 17);
  EXPECT_TRUE(c.allocate_for(a, 13));
  EXPECT_EQ(c.table(a).size(), 4u);
  EXPECT_EQ(c.capacity_tokens(a), 16);

  SlotId b = c.admit(64);  // 16 blocks: all but 0 remaining
  ASSERT_GE(b, 0);
  EXPECT_EQ(c.free_blocks(), 0);
  EXPECT_FALSE(c.can_admit(1));  // no slot and no block
  EXPECT_FALSE(c.can_allocate(a, 17));
  EXPECT_FALSE(c.allocate_for(a, 17));
  EXPECT_EQ(c.table(a).size(), 4u);  // unchanged on failure

  // Rollback of 6 rejected positions of b: 64 -> 58 keeps 15 blocks.
  ASSERT_TRUE(c.truncate(b, 58).is_ok());
  EXPECT_EQ(c.table(b).size(), 15u);
  EXPECT_EQ(c.free_blocks(), 1);
  EXPECT_TRUE(c.allocate_for(a, 17));

  std::set<BlockId> all;
  for (SlotId s : {a, b})
    for (BlockId blk : c.table(s)) EXPECT_TRUE(all.insert(blk).second) << "block " << blk << " in two tables";
  c.free(b);
  EXPECT_EQ(c.free_blocks(), 15);
  EXPECT_EQ(c.free_slots(), 1);
  c.free(a);
  auto st = c.stats();
  EXPECT_EQ(st.free_blocks, 20);
  EXPECT_EQ(st.free_slots, 2);
  EXPECT_EQ(st.used_bytes, 0);
}

TEST(StateCache, SharedPrefixBlocksAreReferenceCounted) {
  StateCacheConfig cc;
  cc.max_model_len = 512;
  cc.max_num_seqs = 3;
  auto L = compute_state_layout(tiny(), cc);
  ASSERT_TRUE(L.is_ok());
  cc.budget_bytes = 3 * L->slot_bytes + 12 * L->block_bytes;
  auto r = StateCache::create(tiny(), cc);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  StateCache& c = *r;
  SlotId a = c.admit(256 + 5);  // 3 blocks, two complete
  ASSERT_GE(a, 0);
  std::vector<BlockId> prefix(c.table(a).begin(), c.table(a).begin() + 2);
  SlotId b = c.admit(0);
  ASSERT_TRUE(c.share_blocks(b, prefix).is_ok());
  EXPECT_EQ(c.refcount(prefix[0]), 2);
  EXPECT_EQ(c.stats().shared_blocks, 2);
  EXPECT_EQ(c.free_blocks(), 12 - 3);
  EXPECT_FALSE(c.share_blocks(b, prefix).is_ok());  // table not empty
  // b may not roll back into a shared block (the next write would corrupt a's entries) ...
  auto bad = c.truncate(b, 200);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("shared block"), std::string::npos);
  // ... but may grow past it and drop whole blocks.
  EXPECT_TRUE(c.allocate_for(b, 300));
  EXPECT_TRUE(c.truncate(b, 256).is_ok());
  EXPECT_EQ(c.table(b).size(), 2u);
  c.free(a);  // the shared blocks survive with b's reference
  EXPECT_EQ(c.refcount(prefix[0]), 1);
  EXPECT_EQ(c.free_blocks(), 12 - 2);
  c.free(b);
  EXPECT_EQ(c.free_blocks(), 12);
  SlotId d = c.admit(0);
  EXPECT_FALSE(c.share_blocks(d, prefix).is_ok());  // freed blocks cannot be shared
}
