// CPU self-checks of the fast MoE kernels' index and bit logic (ops/moe/moe_fast_common.h, shared with
// moe_fast.cu): the pair layout is a permutation, the table-free FP4 -> bf16 decode times the scale factor gives
// exactly e2m1 * 2^(s-127) (against core/small_float.h), and an emulation of one warp k-chunk's mma fragment
// pairing (A from FP4 words, B from pair-layout activations) reproduces the plain dot product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/small_float.h"
#include "ops/moe/moe_fast_common.h"

namespace md = dsinfer::ops::moe_detail;
namespace sf = dsinfer::small_float;

namespace {

double bf16_value(uint32_t bits16) { return double(sf::from_bits((bits16 & 0xFFFFu) << 16)); }

// The gate/up kernel's direct read of fp32 x (moe_fast.cu load_x): word c of uint4 i of a lane's 32-element group
// packs (element 8i + c, element 8i + c + 4), i.e. components c of the float4s at elements 8i and 8i + 4; that must be
// pair-layout slots 8i + 2c (low half) and 8i + 2c + 1 (high half), as moe_x_bf16_row writes them.
TEST(MoeFast, DirectFp32ReadMatchesPairLayout) {
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 4; ++c)
      for (int h = 0; h < 2; ++h) EXPECT_EQ(md::pair_src(8 * i + 2 * c + h), 8 * i + c + 4 * h) << i << c << h;
}

TEST(MoeFast, PairLayoutIsAPermutation) {
  std::vector<int> seen(32, 0);
  for (int i = 0; i < 32; ++i) {
    const int e = md::pair_src(i);
    ASSERT_GE(e, 0);
    ASSERT_LT(e, 32);
    ++seen[size_t(e)];
    EXPECT_EQ(md::pair_dst(e), i);
  }
  for (int v : seen) EXPECT_EQ(v, 1);
}

TEST(MoeFast, Fp4DecodeTimesScaleIsExact) {
  for (uint32_t s : {66u, 80u, 100u, 118u, 127u, 128u, 150u, 192u}) {  // the exact range (moe_fast_common.h)
    const double f = bf16_value(md::fp4_scale_bf16(s));
    const double scale = double(sf::from_bits(sf::e8m0_f32_bits(s)));
    for (uint32_t w : {0x76543210u, 0xFEDCBA98u, 0x19E3C5A7u, 0x8F0F1E2Du}) {
      for (int p = 0; p < 4; ++p) {
        const uint32_t bits = md::fp4_pair_bits(w, p);
        const double lo = bf16_value(bits) * f * std::ldexp(1.0, md::kFastScaleShift);
        const double hi = bf16_value(bits >> 16) * f * std::ldexp(1.0, md::kFastScaleShift);
        const double want_lo = double(sf::from_bits(sf::e2m1_f32_bits((w >> (4 * p)) & 0xFu))) * scale;
        const double want_hi = double(sf::from_bits(sf::e2m1_f32_bits((w >> (4 * p + 16)) & 0xFu))) * scale;
        EXPECT_EQ(lo, want_lo) << "s=" << s << " w=" << w << " p=" << p;
        EXPECT_EQ(hi, want_hi) << "s=" << s << " w=" << w << " p=" << p;
        // the kernel's bf16 product (lo * 2^-shift) must be a normal bf16 (no rounding, no underflow): at most 8
        // significant bits, magnitude >= 2^-126
        if (lo != 0) {
          int ex = 0;
          const double v = std::fabs(lo) * std::ldexp(1.0, -md::kFastScaleShift), m = std::frexp(v, &ex);
          EXPECT_EQ(std::ldexp(m, 8), std::floor(std::ldexp(m, 8)));
          EXPECT_GE(v, std::ldexp(1.0, -126));
        }
      }
    }
  }
  EXPECT_TRUE(std::isnan(bf16_value(md::fp4_scale_bf16(255))));
}

// The word decode of the kernels (fp4_word_pairs, four pairs at once) gives fp4_pair_bits's bits. Both are shifts,
// masks and constant-mask bit-selects, i.e. linear maps of the word's bits, so the 32 one-bit words (and 0) prove it
// for every word; the random words check the same once more.
TEST(MoeFast, Fp4WordDecodeMatchesPairDecode) {
  std::vector<uint32_t> words{0u, 0xFFFFFFFFu, 0x76543210u, 0xFEDCBA98u};
  for (int b = 0; b < 32; ++b) words.push_back(1u << b);
  uint32_t r = 12345u;
  for (int i = 0; i < 200000; ++i) {
    r = r * 1664525u + 1013904223u;
    words.push_back(r);
  }
  for (uint32_t w : words) {
    uint32_t out[4];
    md::fp4_word_pairs(w, out);
    for (int p = 0; p < 4; ++p) ASSERT_EQ(out[p], md::fp4_pair_bits(w, p)) << "w=" << w << " p=" << p;
  }
}

// The RS grouped kernels' step decode (fp4_half_pairs, moe_grouped_rs_decode.cuh rs_decode_step_word: pairs 2h and
// 2h + 1 of a word from one bit-select) gives fp4_pair_bits's bits. Every output bit is one input bit or zero (shifts,
// constant masks, a constant-mask bit-select), so the map is linear over GF(2) and the 32 one-bit words prove it for
// every word; also checked: each pair's two nibbles in all 256 combinations with noise in the other six, and random
// words.
TEST(MoeFast, Fp4HalfPairsMatchPairDecode) {
  std::vector<uint32_t> words{0u, 0xFFFFFFFFu, 0x76543210u, 0xFEDCBA98u};
  for (int b = 0; b < 32; ++b) words.push_back(1u << b);
  uint32_t r = 777u;
  for (int p = 0; p < 4; ++p)
    for (uint32_t lo = 0; lo < 16; ++lo)
      for (uint32_t hi = 0; hi < 16; ++hi) {
        r = r * 1664525u + 1013904223u;
        const uint32_t keep = (0xFu << (4 * p)) | (0xFu << (4 * p + 16));
        words.push_back((r & ~keep) | (lo << (4 * p)) | (hi << (4 * p + 16)));
      }
  for (int i = 0; i < 200000; ++i) {
    r = r * 1664525u + 1013904223u;
    words.push_back(r);
  }
  for (uint32_t w : words)
    for (int h = 0; h < 2; ++h) {
      uint32_t out[2];
      md::fp4_half_pairs(w, h, out);
      ASSERT_EQ(out[0], md::fp4_pair_bits(w, 2 * h)) << "w=" << w << " h=" << h;
      ASSERT_EQ(out[1], md::fp4_pair_bits(w, 2 * h + 1)) << "w=" << w << " h=" << h;
    }
}

// The kernels' bf16x2 scale factor of the word decode (fp4_scale_bf16x2) is fp4_scale_bf16 in both halves for every
// scale byte, the inf (193..254) and NaN (255) factors included.
TEST(MoeFast, Fp4ScalePairMatchesScale) {
  for (uint32_t s = 0; s < 256; ++s) {
    const uint32_t f = md::fp4_scale_bf16(s);
    EXPECT_EQ(md::fp4_scale_bf16x2(s), f | (f << 16)) << "s=" << s;
  }
}

// The FP8 shared expert's decode (moe_fast.cu shared_block): every e4m3 byte, in each byte slot p, decodes through
// e4m3_pair_bits times e4m3_scale_bf16 to exactly e4m3 * 2^(s-127) (against core/small_float.h), as a normal bf16
// product with at most 8 significant bits over the documented scale range.
TEST(MoeFast, E4m3DecodeTimesScaleIsExact) {
  for (uint32_t s : {74u, 90u, 110u, 118u, 127u, 140u, 170u, 198u}) {
    const double f = bf16_value(md::e4m3_scale_bf16(s));
    const double scale = double(sf::from_bits(sf::e8m0_f32_bits(s)));
    for (uint32_t lo = 0; lo < 256; ++lo) {
      if ((lo & 0x7Fu) == 0x7Fu) continue;  // e4m3fn NaN: not held by real weights (moe_fast_common.h)
      const uint32_t hi = (lo * 37u + 11u) & 0xFFu;
      if ((hi & 0x7Fu) == 0x7Fu) continue;
      for (int p = 0; p < 4; ++p) {
        // the other bytes of the words hold noise the decode must ignore
        const uint32_t a = (lo << (8 * p)) | (0xA5u << (8 * ((p + 1) & 3)));
        const uint32_t b = (hi << (8 * p)) | (0x5Au << (8 * ((p + 2) & 3)));
        const uint32_t bits = md::e4m3_pair_bits(a, b, p);
        const double vlo = bf16_value(bits) * f * std::ldexp(1.0, md::kFastScaleShift);
        const double vhi = bf16_value(bits >> 16) * f * std::ldexp(1.0, md::kFastScaleShift);
        EXPECT_EQ(vlo, double(sf::from_bits(sf::e4m3_f32_bits(lo))) * scale) << "s=" << s << " lo=" << lo << " p=" << p;
        EXPECT_EQ(vhi, double(sf::from_bits(sf::e4m3_f32_bits(hi))) * scale) << "s=" << s << " hi=" << hi << " p=" << p;
        if (vlo != 0) {
          int ex = 0;
          const double v = std::fabs(vlo) * std::ldexp(1.0, -md::kFastScaleShift), m = std::frexp(v, &ex);
          EXPECT_EQ(std::ldexp(m, 8), std::floor(std::ldexp(m, 8)));
          EXPECT_GE(v, std::ldexp(1.0, -126));
        }
      }
    }
  }
  EXPECT_TRUE(std::isnan(bf16_value(md::e4m3_scale_bf16(255))));
}

// Emulates moe_fast.cu's compute_chunk for one weight row and one token: for each lane t and k-step s the pairs
// the kernel multiplies (A: fp4_pair_bits of word s/2, pairs 2(s%2), 2(s%2)+1; B: slots of pairs 2s, 2s+1 of the
// pair-layout group) must cover each k exactly once, matching element by element.
TEST(MoeFast, ChunkPairingCoversEveryK) {
  std::vector<int> used(md::kFastChunk, 0);
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 8; ++s)
      for (int half = 0; half < 2; ++half) {  // cols (2t, 2t+1) then (2t+8, 2t+9)
        const int q = s / 2, p = 2 * (s % 2) + half;  // A: word q, pair p
        const int P = 2 * s + half;                   // B: pair P of the lane's group
        for (int h = 0; h < 2; ++h) {
          const int a_elem = 8 * q + p + 4 * h;           // nibble p (+4) of word q
          const int b_elem = md::pair_src(2 * P + h);     // slot 2P + h
          EXPECT_EQ(a_elem, b_elem) << "t=" << t << " s=" << s;
          ++used[size_t(32 * t + a_elem)];
        }
      }
  for (int v : used) EXPECT_EQ(v, 1);
}

}  // namespace
