// CPU self-checks of the grouped MoE kernels' index logic (ops/moe/moe_grouped_common.h, shared with
// moe_grouped.cu): the chunk layout is a permutation with grp_slot its inverse, and an emulation of one warp's
// 128-k stage (A = chunk-layout activations as ldmatrix delivers them, B = FP4 weight fragments decoded per lane from
// the raw row bytes as compute_stage does) reproduces the plain dot product of the logical vectors; the tile bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/small_float.h"
#include "ops/moe/moe_grouped_common.h"

namespace md = dsinfer::ops::moe_detail;
namespace sf = dsinfer::small_float;

namespace {

double bf16_value(uint32_t bits16) { return double(sf::from_bits((bits16 & 0xFFFFu) << 16)); }

TEST(MoeGrouped, ChunkLayoutIsAPermutation) {
  std::vector<int> seen(128, 0);
  for (int p = 0; p < 128; ++p) {
    const int k = md::grp_elem(p);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, 128);
    ++seen[size_t(k)];
    EXPECT_EQ(md::grp_slot(k), p);
  }
  for (int v : seen) EXPECT_EQ(v, 1);
}

// One weight row (128 FP4 codes, 4 scale bytes) and one activation row: the sum over k-steps s and mma columns c of
// A[c] * B[c] with A[c] = x[grp_elem(16s + c)] (memory order, as ldmatrix feeds columns) and B[c] the bf16 the lane
// t = (c & 7) / 2 decodes (b0 for c < 8, b1 above; low half for even c) equals sum_k x[k] * w[k].
TEST(MoeGrouped, StageEmulationMatchesDotProduct) {
  uint64_t rng = 77;
  auto next = [&] {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  for (int trial = 0; trial < 20; ++trial) {
    uint8_t bytes[64], scale[4];
    for (auto& b : bytes) b = uint8_t(next());
    for (auto& s : scale) s = uint8_t(117 + next() % 12);
    std::vector<double> x(128), w(128);
    for (int k = 0; k < 128; ++k) {
      x[size_t(k)] = double(int(next() % 2001) - 1000) / 1024.0;  // exact in double, small integers / 2^10
      const uint32_t code = (k & 1) ? (bytes[k / 2] >> 4) : (bytes[k / 2] & 0xFu);
      w[size_t(k)] = double(sf::from_bits(sf::e2m1_f32_bits(code))) *
                     double(sf::from_bits(sf::e8m0_f32_bits(scale[k / 32])));
    }
    double want = 0, got = 0;
    for (int k = 0; k < 128; ++k) want += x[size_t(k)] * w[size_t(k)];
    for (int s = 0; s < 8; ++s)
      for (int c = 0; c < 16; ++c) {
        const int t = (c & 7) >> 1, h = c & 1, pp = 2 * (s & 1) + (c >> 3);
        uint32_t word = 0;  // word (s >> 1) of lane t's 16-byte FP4 vector, little endian
        for (int b = 0; b < 4; ++b) word |= uint32_t(bytes[16 * t + 4 * (s >> 1) + b]) << (8 * b);
        const uint32_t bits = md::fp4_pair_bits(word, pp);
        const double wv = bf16_value(h ? bits >> 16 : bits) * bf16_value(md::fp4_scale_bf16(scale[t])) *
                          std::ldexp(1.0, md::kFastScaleShift);
        got += x[size_t(md::grp_elem(16 * s + c))] * wv;
      }
    EXPECT_NEAR(got, want, 1e-9 * (1.0 + std::fabs(want))) << "trial " << trial;
  }
}

TEST(MoeGrouped, TileBoundCoversRaggedGroups) {
  // sum_e ceil(c_e / BM) for a few ragged distributions stays within grp_max_tiles
  const std::vector<std::vector<int64_t>> cases = {{0, 1, 300, 128, 129, 0}, {1, 1, 1, 1}, {1000}, {0, 0, 0}};
  for (const auto& c : cases) {
    int64_t n = 0, tiles = 0;
    for (int64_t v : c) n += v, tiles += (v + md::kGrpBM - 1) / md::kGrpBM;
    EXPECT_LE(tiles, md::grp_max_tiles(n, int64_t(c.size())));
  }
}

}  // namespace
