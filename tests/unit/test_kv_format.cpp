// The KV storage formats (ops/kv_format/kv_format.h) on the CPU: the FlashMLA MODEL1 byte layout pinned by hand-made
// rows (codes, then bf16 RoPE channels in a block's data area; 7 UE8M0 scales + a zero pad after the block's 64 data
// rows; blocks of 37,440 bytes), decode(encode(x)) equal to the official FP8 simulation bit for bit on rows built to
// hit its edge cases (amax at exact powers of two, below the 1e-4 floor, zero tiles, e4m3 subnormals, ties),
// simulated rows decoding to themselves, non-finite tiles, and FP8 indexer keys exact on Hadamard + FP4-simulated
// rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/small_float.h"
#include "ops/kv_format/kv_format.h"
#include "ops/quant_sim/quant_sim.h"

using namespace dsinfer;
using namespace dsinfer::ops;

namespace {
uint32_t bits(float f) { return small_float::to_bits(f); }
float bf16_round(float f) { return small_float::from_bits(uint32_t(small_float::f32_to_bf16_bits(f)) << 16); }

// A row whose tiles span the simulation's edge cases: tile t of row `seed` gets its own magnitude.
std::vector<float> edge_row(uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kKvDim));
  for (int64_t t = 0; t < kKvTiles + 1; ++t) {
    const int kind = int((seed + uint32_t(t)) % 7);
    const float mag = kind == 0 ? 1e-6f : std::ldexp(1.0f, int(g() % 40) - 20);
    for (int64_t i = 0; i < kKvTile; ++i) x[size_t(t * kKvTile + i)] = kind == 1 ? 0.0f : u(g) * mag;
    if (kind == 2) x[size_t(t * kKvTile + 5)] = 448.0f * std::ldexp(1.0f, int(g() % 9) - 4);  // amax 448 * 2^k
    if (kind == 3) x[size_t(t * kKvTile + 7)] = -1e-4f;                                        // at the floor
    if (kind == 4) x[size_t(t * kKvTile + 9)] = mag * 1.0625f;  // halfway between two e4m3 values: a tie
  }
  return x;
}
}  // namespace

TEST(KvFormat, BlockLayoutOffsets) {
  EXPECT_EQ(kKvRowBytes, 584);
  EXPECT_EQ(kKvBlockBytes, 37440);  // 64 * 584 = 37,376 padded to 65 * 576
  EXPECT_EQ(kv_data_offset(0), 0);
  EXPECT_EQ(kv_scale_offset(0), 64 * 576);
  EXPECT_EQ(kv_data_offset(65), 37440 + 576);
  EXPECT_EQ(kv_scale_offset(65), 37440 + 64 * 576 + 8);
  EXPECT_EQ(idx_code_offset(130), 2 * 8448 + 2 * 128);
  EXPECT_EQ(idx_scale_offset(130), 2 * 8448 + 64 * 128 + 2 * 4);
  EXPECT_EQ(kv_cache_bytes(1), 37440);
  EXPECT_EQ(kv_cache_bytes(129), 3 * 37440);
}

// Pages of other sizes (the runners' state: a ring of 130 rows per slot, 32 entries per token block): row r is row
// r % page_rows of page r / page_rows, data first then scales, from `offset`, pages page_stride apart.
TEST(KvFormat, PagedOffsets) {
  const KvPages ring{130, 1 << 20, 4096};
  EXPECT_EQ(kv_data_offset(ring, 0), 4096);
  EXPECT_EQ(kv_scale_offset(ring, 0), 4096 + 130 * 576);
  EXPECT_EQ(kv_data_offset(ring, 131), 4096 + (1 << 20) + 576);
  EXPECT_EQ(kv_scale_offset(ring, 131), 4096 + (1 << 20) + 130 * 576 + 8);
  EXPECT_EQ(kv_page_bytes(130), 130 * 584);
  const KvPages keys{32, 100000, 256};
  EXPECT_EQ(idx_code_offset(keys, 33), 256 + 100000 + 128);
  EXPECT_EQ(idx_scale_offset(keys, 33), 256 + 100000 + 32 * 128 + 4);
  EXPECT_EQ(idx_page_bytes(32), 32 * 132);
  // The default pages are FlashMLA's blocks.
  EXPECT_EQ(kv_data_offset(kModel1Pages, 65), kv_data_offset(65));
  EXPECT_EQ(idx_scale_offset(kIdxPages, 130), idx_scale_offset(130));
}

// Hand-made row: every byte where FlashMLA's MODEL1_FP8Sparse puts it.
TEST(KvFormat, BytesOfAHandMadeRow) {
  std::vector<float> x(size_t(kKvDim), 0.0f);
  x[0] = 448.0f;   // tile 0: amax 448 -> scale 2^0 (byte 127); code of 448 = 0x7E
  x[1] = 1.0f;     // 0x38
  x[2] = -2.0f;    // 0xC0
  x[64] = 3.0f;    // tile 1: amax 3 -> scale 2^ceil(log2(3/448)) = 2^-7 (byte 120); 3 / 2^-7 = 384 -> 0x7C
  x[448] = 1.0f;   // bf16 0x3F80, little-endian
  x[511] = -3.0f;  // bf16 0xC040
  std::vector<uint8_t> cache(size_t(kv_cache_bytes(128)), 0xAA);
  kv_encode_row_ref(x.data(), cache.data(), 70);  // block 1, row 6
  const uint8_t* d = cache.data() + 37440 + 6 * 576;
  const uint8_t* s = cache.data() + 37440 + 64 * 576 + 6 * 8;
  EXPECT_EQ(d[0], 0x7E);
  EXPECT_EQ(d[1], 0x38);
  EXPECT_EQ(d[2], 0xC0);
  EXPECT_EQ(d[3], 0x00);
  EXPECT_EQ(d[64], 0x7C);
  EXPECT_EQ(d[448], 0x80);
  EXPECT_EQ(d[449], 0x3F);
  EXPECT_EQ(d[574], 0x40);
  EXPECT_EQ(d[575], 0xC0);
  EXPECT_EQ(s[0], 127);
  EXPECT_EQ(s[1], 120);
  EXPECT_EQ(s[2], uint8_t(127 + kv_pow2_exponent(1e-4f, 448.0f)));  // an all-zero tile takes the floor's scale
  EXPECT_EQ(s[7], 0);                                                  // the pad byte
  EXPECT_EQ(d[-1], 0xAA);                                              // neighbours untouched
  EXPECT_EQ(d[576], 0xAA);
  EXPECT_EQ(s[8], 0xAA);
  std::vector<float> back(static_cast<size_t>(kKvDim));
  kv_decode_row_ref(cache.data(), 70, back.data());
  EXPECT_EQ(back[0], 448.0f);
  EXPECT_EQ(back[2], -2.0f);
  EXPECT_EQ(back[64], 3.0f);
  EXPECT_EQ(back[511], -3.0f);
}

TEST(KvFormat, DecodeEqualsTheFp8SimulationBitForBit) {
  std::vector<uint8_t> cache(size_t(kv_cache_bytes(200)));
  std::vector<uint8_t> again(cache.size());
  std::vector<float> back(static_cast<size_t>(kKvDim));
  for (uint32_t seed = 0; seed < 200; ++seed) {
    std::vector<float> x = edge_row(seed), sim = x;
    fp8_block_sim_ref(sim.data(), kKvNope, kKvTile);
    kv_encode_row_ref(x.data(), cache.data(), seed);
    kv_decode_row_ref(cache.data(), seed, back.data());
    for (int64_t i = 0; i < kKvNope; ++i)
      ASSERT_EQ(bits(back[size_t(i)]), bits(sim[size_t(i)])) << "row " << seed << " channel " << i << " x " << x[i];
    for (int64_t i = kKvNope; i < kKvDim; ++i) ASSERT_EQ(bits(back[size_t(i)]), bits(bf16_round(x[size_t(i)])));
    // A simulated row decodes back to itself (its bytes may differ: a tile whose amax rounds down to 448 * 2^(k-1)
    // takes the smaller scale).
    kv_encode_row_ref(sim.data(), again.data(), seed);
    kv_decode_row_ref(again.data(), seed, back.data());
    for (int64_t i = 0; i < kKvNope; ++i) ASSERT_EQ(bits(back[size_t(i)]), bits(sim[size_t(i)])) << seed << " " << i;
  }
}

TEST(KvFormat, NonFiniteTileDecodesToNan) {
  std::vector<float> x = edge_row(3);
  x[70] = NAN;      // tile 1
  x[200] = INFINITY;  // tile 3
  std::vector<uint8_t> cache(size_t(kv_cache_bytes(1)));
  kv_encode_row_ref(x.data(), cache.data(), 0);
  EXPECT_EQ(cache[size_t(kv_scale_offset(0)) + 1], 0xFF);
  EXPECT_EQ(cache[size_t(kv_scale_offset(0)) + 3], 0xFF);
  std::vector<float> back(static_cast<size_t>(kKvDim));
  kv_decode_row_ref(cache.data(), 0, back.data());
  EXPECT_TRUE(std::isnan(back[64]) && std::isnan(back[255]));
  EXPECT_TRUE(std::isfinite(back[0]) && std::isfinite(back[256]));
}

// Indexer keys after the official Hadamard + FP4 1x32 simulation are stored exactly as FP8 with one fp32 scale.
TEST(IdxFormat, Fp4SimulatedKeysAreExact) {
  std::mt19937 g(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint8_t> cache(size_t(idx_cache_bytes(300)));
  std::vector<float> back(static_cast<size_t>(kIdxDim));
  for (int64_t r = 0; r < 300; ++r) {
    std::vector<float> x(static_cast<size_t>(kIdxDim));
    const float mag = std::ldexp(1.0f, int(r % 30) - 15);
    for (auto& v : x) v = n(g) * mag;
    if (r % 5 == 0)  // one 32-channel block 2^10 smaller than the rest: still within the 2^14 spread
      for (int i = 64; i < 96; ++i) x[size_t(i)] *= 1.0f / 1024.0f;
    hadamard_ref(x.data(), kIdxDim);
    fp4_block_sim_ref(x.data(), kIdxDim, 32);
    idx_encode_row_ref(x.data(), cache.data(), r);
    idx_decode_row_ref(cache.data(), r, back.data());
    for (int64_t i = 0; i < kIdxDim; ++i) ASSERT_EQ(bits(back[size_t(i)]), bits(x[size_t(i)])) << r << " " << i;
  }
  float s;
  std::memcpy(&s, cache.data() + idx_scale_offset(0), 4);
  int e = 0;
  EXPECT_EQ(std::frexp(s, &e), 0.5f);  // a power of two
}

// Outside the exact range (a block 2^20 below the row's largest), values round to e4m3 under the row scale.
TEST(IdxFormat, WideSpreadRoundsUnderTheRowScale) {
  std::vector<float> x(size_t(kIdxDim), 6.0f);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = 1.5f * std::ldexp(1.0f, -20);
  std::vector<uint8_t> cache(size_t(idx_cache_bytes(1)));
  idx_encode_row_ref(x.data(), cache.data(), 0);
  std::vector<float> back(static_cast<size_t>(kIdxDim));
  idx_decode_row_ref(cache.data(), 0, back.data());
  EXPECT_EQ(back[100], 6.0f);
  EXPECT_EQ(back[0], 0.0f);  // 1.5 * 2^-20 / 2^-6 = 1.5 * 2^-14: below e4m3's smallest subnormal 2^-9 / 2
}
