// State bytes in the storage formats (cache/state_format.h) against hand arithmetic on the V4-Flash config, and
// `dsinfer plan`'s FP8 line and column (the user's path). By hand, from configs/deepseek-v4-flash/config.json: 43
// layers (21 CSA ratio 4, 20 HCA ratio 128, 2 sliding), head_dim 512 (rope 64), index_head_dim 128, window 128.
// FP8 row: 448 codes + 128 bytes of bf16 RoPE + 8 scale bytes = 584 B, a block of 64 rows 37,440 B (65 x 576), so
// 585 B a row; FP8 indexer key 128 + 4 = 132 B.
#include <gtest/gtest.h>

#include <string>

#include "cache/state_format.h"
#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
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
  EXPECT_EQ(test::unwrap(cache::kv_row_bytes(StateFormat::kFp8, 512, 64)), 585.0);
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
  EXPECT_DOUBLE_EQ(f8.bytes_per_token, 21 * (585.0 + 132) / 4 + 20 * 585.0 / 128);  // 3,855.66
  EXPECT_EQ(f32.ring_bytes, 43 * 128 * 2048);
  EXPECT_EQ(f8.ring_bytes, 43 * 2 * 37440);                 // 128 rows = two blocks a layer
  EXPECT_EQ(f8.frontier_bytes, f32.frontier_bytes);         // frontiers stay fp32
  cc.num_speculative_tokens = 3;                            // 131 ring rows: three FP8 blocks
  EXPECT_EQ(test::unwrap(cache::compute_state_sizes_in(cfg, cc, StateFormat::kFp8)).ring_bytes, 43 * 3 * 37440);
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
  EXPECT_DOUBLE_EQ(p.state_fp8_bytes_per_token, 21 * (585.0 + 132) / 4 + 20 * 585.0 / 128);
  EXPECT_DOUBLE_EQ(p.state_fp8_bytes_per_sequence, p.state_fp8_fixed_bytes + 8192 * p.state_fp8_bytes_per_token);
  for (const MemoryPlanRow& r : p.rows) {
    SCOPED_TRACE(r.gpus);
    EXPECT_EQ(r.sequences_fp8, r.fits ? int64_t((r.limit_bytes - r.weight_bytes) / p.state_fp8_bytes_per_sequence) : 0);
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
