// State bytes in the storage formats (cache/state_format.h) against hand arithmetic on the V4-Flash config, and
// `dsinfer plan`'s FP8 line and column (the user's path). By hand, from configs/deepseek-v4-flash/config.json: 43
// layers (21 CSA ratio 4, 20 HCA ratio 128, 2 sliding), head_dim 512 (rope 64), index_head_dim 128, window 128.
// FP8 row: 448 codes + 128 bytes of bf16 RoPE + 8 scale bytes = 584 B (the runners' pages are unpadded: a ring of
// 128 rows is 74,752 B, not FlashMLA's two 37,440-byte blocks); FP8 indexer key 128 + 4 = 132 B.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cache/state_cache.h"
#include "cache/state_format.h"
#include "cache/state_layout.h"
#include "ops/kv_format/kv_format.h"
#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
#include "dsinfer/engine.h"
#include "engine/engine_config.h"
#include "io/config.h"
#include "test_util.h"

using namespace dsinfer;
using cache::StateFormat;

namespace {
io::ModelConfig flash() {
  return test::unwrap(io::load_model_config(test::source_dir() + "/configs/deepseek-v4-flash"));
}
}  // namespace

TEST(StateFormat, RowBytes) {
  EXPECT_EQ(test::unwrap(cache::kv_row_bytes(StateFormat::kFp32, 512, 64)), 2048.0);
  EXPECT_EQ(test::unwrap(cache::kv_row_bytes(StateFormat::kBf16, 512, 64)), 1024.0);
  EXPECT_EQ(test::unwrap(cache::kv_row_bytes(StateFormat::kFp8, 512, 64)), 584.0);
  EXPECT_EQ(cache::index_key_bytes(StateFormat::kFp8, 128), 132.0);
  EXPECT_EQ(cache::index_key_bytes(StateFormat::kBf16, 128), 256.0);
  const auto bad = cache::kv_row_bytes(StateFormat::kFp8, 64, 16);  // 48 NoPE channels: not whole 64-tiles
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("head_dim 64"), std::string::npos) << bad.status().message();
}

TEST(StateFormat, FlashBytesPerTokenAndRings) {
  const io::ModelConfig cfg = flash();
  cache::StateCacheConfig cc;
  const cache::StateSizes f32 = test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kFp32));
  cc.kv_elem_bytes = 4;
  EXPECT_DOUBLE_EQ(f32.bytes_per_token, cache::compute_state_sizes(cfg, cc).bytes_per_token);  // 13,760
  EXPECT_DOUBLE_EQ(f32.bytes_per_token, 21 * (2048.0 + 512) / 4 + 20 * 2048.0 / 128);
  const cache::StateSizes b16 = test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kBf16));
  EXPECT_DOUBLE_EQ(b16.bytes_per_token, 6880.0);  // research 11.2's bf16 figure
  const cache::StateSizes f8 = test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kFp8));
  EXPECT_DOUBLE_EQ(f8.bytes_per_token, 21 * (584.0 + 132) / 4 + 20 * 584.0 / 128);  // 3,850.25
  EXPECT_EQ(f32.ring_bytes, 43 * 128 * 2048);
  EXPECT_EQ(f8.ring_bytes, 43 * 128 * 584);
  EXPECT_EQ(f8.frontier_bytes, f32.frontier_bytes);         // frontiers stay fp32
  cc.num_speculative_tokens = 3;                            // 131 ring rows
  EXPECT_EQ(test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kFp8)).ring_bytes, 43 * 131 * 584);
  EXPECT_DOUBLE_EQ(cache::state_bytes_per_sequence(f8, 200, 128), double(f8.fixed_bytes()) + 256 * f8.bytes_per_token);
}

TEST(StateFormat, V41IsNamedNotCovered) {
  const auto cfg = test::unwrap(io::load_model_config(test::source_dir() + "/configs/deepseek-v4.1-flash"));
  const auto r = cache::compute_state_sizes_in(cfg, cache::StateCacheConfig{}, StateFormat::kFp8);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("V4.1"), std::string::npos);
}

// `dsinfer plan` on V4-Flash at 8K: the FP8 state's bytes and the sequences that fit with it, next to fp32's.
TEST(StateFormat, PlanPrintsTheFp8State) {
  MemoryPlanOptions o;
  o.model_dir = test::source_dir() + "/configs/deepseek-v4-flash";
  o.context = 8192;
  MemoryPlan p;
  std::string err;
  ASSERT_TRUE(plan_memory(o, &p, &err)) << err;
  EXPECT_DOUBLE_EQ(p.state_fp8_bytes_per_token, 21 * (584.0 + 132) / 4 + 20 * 584.0 / 128);
  EXPECT_DOUBLE_EQ(p.state_fp8_bytes_per_sequence, p.state_fp8_fixed_bytes + 8192 * p.state_fp8_bytes_per_token);
  for (const MemoryPlanRow& r : p.rows) {
    SCOPED_TRACE(r.gpus);
    // the step's activations come off before the state (parallel::step_activation_bytes), as for fp32 rows
    EXPECT_EQ(r.sequences_fp8,
              r.fits ? int64_t((r.limit_bytes - r.weight_bytes - r.activation_bytes) / p.state_fp8_bytes_per_sequence) : 0);
    if (r.fits) {
      EXPECT_GT(r.sequences_fp8, 2 * r.sequences);
    }
  }
  test::ScratchDir dir("plan_fp8");
  const test::CliResult c = test::run_cli(dir, "plan --model " + o.model_dir + " --gpus 2 --context 8192");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.out.find("state in DeepSeek's storage format"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find(std::to_string(p.rows[0].sequences_fp8)), std::string::npos) << c.out;
  // A model the format does not fit (the shipped dsv4-small: head_dim 64, rope 16) still plans, without the line.
  const test::CliResult small = test::run_cli(dir, "plan --model " + test::source_dir() + "/models/dsv4-small");
  ASSERT_EQ(small.rc, 0) << small.err;
  EXPECT_EQ(small.out.find("state in DeepSeek's storage format"), std::string::npos) << small.out;
}

// The state layout in the FP8 storage format (kv_elem_bytes = kFp8StateElem) on V4-Flash: its regions are the sizes
// compute_state_sizes_in reports (plus alignment), and a row encoded at any layer's ring / entry / indexer-key place
// through the layout's pages decodes back to what a standalone MODEL1 cache holds, with every layer's rows written
// before any is read (so regions do not overlap). Fails on a wrong page size, offset or stride.
TEST(StateFormat, Fp8LayoutPlacesEveryLayersRows) {
  const io::ModelConfig cfg = flash();
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = cache::kFp8StateElem;
  cc.num_speculative_tokens = 2;
  const cache::StateLayout L = test::unwrap(cache::compute_state_layout(cfg, cc));
  ASSERT_TRUE(L.fp8());
  const cache::StateSizes s = test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kFp8));
  const int64_t n_regions = 3 * int64_t(L.layers.size());  // at most ring + frontier + index frontier a layer
  EXPECT_GE(L.slot_bytes, s.fixed_bytes());
  EXPECT_LE(L.slot_bytes, s.fixed_bytes() + n_regions * cache::kAlign);
  EXPECT_GE(double(L.block_bytes), s.bytes_per_token * double(L.block_size));
  EXPECT_LE(double(L.block_bytes), s.bytes_per_token * double(L.block_size) + double(n_regions * cache::kAlign));
  const int64_t slots = 2, blocks = 3, R = L.ring_rows;
  std::vector<uint8_t> slot_pool(size_t(slots * L.slot_bytes)), block_pool(size_t(blocks * L.block_bytes));
  std::vector<float> x(ops::kKvDim), got(ops::kKvDim), want(ops::kKvDim);
  std::vector<uint8_t> model1(size_t(ops::kKvBlockBytes)), idx1(size_t(ops::kIdxBlockBytes));
  auto row_of = [&](int64_t l, int64_t kind) {  // deterministic values per (layer, kind)
    for (int64_t i = 0; i < ops::kKvDim; ++i)
      x[size_t(i)] = float(std::sin(0.37 * double(i + 1) * double(l + 2 + kind)));
    return x.data();
  };
  const int64_t slot = 1, pos = 5 * R + 7, blk = 2, j = 3;  // ring row slot * R + pos % R; entry row blk * epb + j
  for (size_t l = 0; l < L.layers.size(); ++l) {
    const int64_t li = int64_t(l);
    ops::kv_encode_row_ref(row_of(li, 0), slot_pool.data(), slot * R + pos % R, L.ring_pages(li));
    if (L.layers[l].entries_offset < 0) continue;
    const int64_t epb = L.layers[l].entries_per_block;
    ops::kv_encode_row_ref(row_of(li, 1), block_pool.data(), blk * epb + j % epb, L.entry_pages(li));
    if (L.layers[l].index_keys_offset >= 0)
      ops::idx_encode_row_ref(row_of(li, 2), block_pool.data(), blk * epb + j % epb, L.index_key_pages(li));
  }
  for (size_t l = 0; l < L.layers.size(); ++l) {
    SCOPED_TRACE(l);
    const int64_t li = int64_t(l);
    ops::kv_encode_row_ref(row_of(li, 0), model1.data(), 0);
    ops::kv_decode_row_ref(model1.data(), 0, want.data());
    ops::kv_decode_row_ref(slot_pool.data(), slot * R + pos % R, got.data(), L.ring_pages(li));
    EXPECT_EQ(got, want);
    EXPECT_EQ(L.ring_row(li, pos), ops::kv_data_offset(L.ring_pages(li), pos % R));  // byte offset in the slot
    if (L.layers[l].entries_offset < 0) continue;
    const int64_t epb = L.layers[l].entries_per_block;
    ops::kv_encode_row_ref(row_of(li, 1), model1.data(), 0);
    ops::kv_decode_row_ref(model1.data(), 0, want.data());
    ops::kv_decode_row_ref(block_pool.data(), blk * epb + j % epb, got.data(), L.entry_pages(li));
    EXPECT_EQ(got, want);
    const cache::StateLayout::Loc loc = L.compressed_entry(li, j);
    EXPECT_EQ(loc.offset, ops::kv_data_offset(L.entry_pages(li), j % epb));
    if (L.layers[l].index_keys_offset < 0) continue;
    std::vector<float> ki(ops::kIdxDim), kw(ops::kIdxDim);
    ops::idx_encode_row_ref(row_of(li, 2), idx1.data(), 0);
    ops::idx_decode_row_ref(idx1.data(), 0, kw.data());
    ops::idx_decode_row_ref(block_pool.data(), blk * epb + j % epb, ki.data(), L.index_key_pages(li));
    EXPECT_EQ(ki, kw);
  }
}

// The FP8 format is DeepSeek-V4's 512 / 128-wide rows: other shapes get an error naming the dimensions.
TEST(StateFormat, Fp8LayoutRefusesOtherShapes) {
  const io::ModelConfig small = test::unwrap(io::load_model_config(test::source_dir() + "/models/dsv4-small"));
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = cache::kFp8StateElem;
  const auto r = cache::compute_state_layout(small, cc);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("head_dim 512"), std::string::npos) << r.status().message();
  cc.kv_elem_bytes = 3;
  EXPECT_FALSE(cache::compute_state_layout(small, cc).is_ok());
}

// The engine's state budget in the FP8 format (the CUDA runner's kv_elem_bytes for V4-Flash `official`): the same
// 4 GiB hold ~2.9x the 8K-context sequences of fp32 state (a sequence: rings 11.3 -> 3.2 MB, fp32 frontiers 11.9 MB
// in both, 8,192 tokens x 13,760 -> 3,850 bytes), through the path the engine takes (resolve_engine_config ->
// StateCache::create). Bound 2.5x: below it the format is not what sizes the cache.
TEST(StateFormat, EngineStateBudgetHoldsMoreSequencesInFp8) {
  EngineOptions o;
  o.model_dir = test::source_dir() + "/configs/deepseek-v4-flash";
  o.state_memory_gb = 4;
  o.max_model_len = 8192;
  const io::ModelConfig cfg = flash();
  auto fits = [&](int32_t elem) {
    const engine::EngineConfig c = test::unwrap(engine::resolve_engine_config(o, cfg, elem));
    const cache::StateCache sc = test::unwrap(cache::StateCache::create(cfg, c.cache));
    const int64_t per_seq_blocks = sc.layout().blocks_per_sequence(8192);
    return std::min<int64_t>(sc.num_slots(), sc.num_blocks() / per_seq_blocks);
  };
  const int64_t f32 = fits(4), f8 = fits(cache::kFp8StateElem);
  EXPECT_GE(f32, 1);
  EXPECT_GE(f8 * 10, f32 * 25) << "fp32 " << f32 << " sequences, FP8 " << f8;
}
