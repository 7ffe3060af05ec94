// CPU self-checks of the GPU GEMM/MoE index and bit logic (ops/gemm/gemm_common.h, shared with the kernels):
// the FP4 nibble order vs io::dequant_fp4_e2m1, tile-loader coverage, an emulation
// of the tiled kernel's mma.sync fragment traffic against the PTX-specified layout, and the MoE permutation ref.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtypes.h"
#include "core/small_float.h"
#include "io/quant.h"
#include "ops/gemm/gemm_common.h"
#include "ops/moe/moe.h"

namespace gd = dsinfer::ops::gemm_detail;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(GemmTiling, Fp4WordOrderMatchesDequant) {
  // 16 packed bytes (one 16-byte vector = 32 elements) read as 4 little-endian words.
  uint8_t packed[16];
  for (int i = 0; i < 16; ++i) packed[i] = uint8_t(i * 37 + 11);
  uint8_t scale = 127;
  float ref[32];
  dsinfer::io::dequant_fp4_e2m1(packed, 1, 32, &scale, dsinfer::DType::F8_E8M0, 32, ref);
  for (int w = 0; w < 4; ++w) {
    uint32_t word;
    std::memcpy(&word, packed + 4 * w, 4);
    for (int j = 0; j < 8; ++j) EXPECT_EQ(from_bits(dsinfer::small_float::e2m1_f32_bits(gd::fp4_code_in_word(word, j))), ref[8 * w + j]);
  }
}

// Streaming kernel: the e4m3 -> bf16 bit move is the e4m3 value times 2^-120 for every non-NaN code, even and odd
// bytes of a word land in the low / high bf16 halves as documented.
TEST(GemmTiling, StreamE4m3ToBf16BitsAreExact) {
  for (uint32_t b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // NaN codes (documented: not propagated)
    const float ref = from_bits(dsinfer::small_float::e4m3_f32_bits(b));
    const uint32_t word = b | (b << 16), word_odd = (b << 8) | (b << 24);
    for (uint32_t v : {gd::st_e4m3_even_bf16(word), gd::st_e4m3_odd_bf16(word_odd)}) {
      EXPECT_EQ(v & 0xFFFFu, v >> 16) << b;
      EXPECT_EQ(std::ldexp(double(from_bits((v & 0xFFFFu) << 16)), 120), double(ref)) << "code " << b;
    }
  }
  // bytes 0..3 = codes 0x38 (1.0), 0x40 (2.0), 0x44 (3.0), 0xB8 (-1.0): even -> (b0, b2), odd -> (b1, b3)
  const uint32_t w = 0x38u | (0x40u << 8) | (0x44u << 16) | (0xB8u << 24);
  auto half = [](uint32_t v, int h) { return std::ldexp(double(from_bits(((v >> (16 * h)) & 0xFFFFu) << 16)), 120); };
  EXPECT_EQ(half(gd::st_e4m3_even_bf16(w), 0), 1.0);
  EXPECT_EQ(half(gd::st_e4m3_even_bf16(w), 1), 3.0);
  EXPECT_EQ(half(gd::st_e4m3_odd_bf16(w), 0), 2.0);
  EXPECT_EQ(half(gd::st_e4m3_odd_bf16(w), 1), -1.0);
}

// Streaming kernel k order: A fragment k (2t + h + 8w) of step s is weight byte 16t + 4s + w + 2h of the chunk (even
// bytes for w = 0, odd for w = 1), and x element st_x_slot of that offset is element 4s + 2w + h of the lane's 16
// (its B register w of step s, half h): both operands see the same k, and the chunk is covered exactly once.
TEST(GemmTiling, StreamChunkOrderMatchesFragments) {
  std::vector<int> seen(gd::kStChunk, 0);
  for (int s = 0; s < 4; ++s)
    for (int kk = 0; kk < 16; ++kk) {
      const int t = kk % 8 / 2, h = kk % 2, w = kk / 8, off = gd::st_chunk_k(s, kk);
      ASSERT_TRUE(off >= 0 && off < gd::kStChunk);
      ++seen[size_t(off)];
      EXPECT_EQ(off, 16 * t + 4 * s + w + 2 * h);
      EXPECT_EQ(gd::st_x_slot(off), 16 * t + 4 * s + 2 * w + h);
    }
  for (int c : seen) EXPECT_EQ(c, 1);
}

TEST(GemmTiling, LoadersCoverTheTilesOnce) {
  std::vector<int> xs(gd::kBM * gd::kBK, 0), ws(gd::kBN * gd::kBK, 0);
  for (int t = 0; t < gd::kTiledThreads; ++t) {
    const gd::Coord x = gd::x_load_coord(t), w = gd::w_load_coord(t);
    ASSERT_EQ(x.col % gd::kXLoadRun, 0);
    ASSERT_EQ(w.col % gd::kWLoadRun, 0);
    for (int i = 0; i < gd::kXLoadRun; ++i) ++xs[size_t(x.row * gd::kBK + x.col + i)];
    for (int i = 0; i < gd::kWLoadRun; ++i) ++ws[size_t(w.row * gd::kBK + w.col + i)];
  }
  for (int v : xs) EXPECT_EQ(v, 1);
  for (int v : ws) EXPECT_EQ(v, 1);
  EXPECT_EQ(gd::kLds % 8, 0);  // 16-byte aligned shared rows (uint4 stores)
}

// PTX ISA m16n8k16 layouts written independently of gemm_common.h: element i of a lane's fragment.
gd::Coord spec_a(int lane, int i) {  // i in 0..7, register i/2
  const int g = lane / 4, t = lane % 4;
  const int row = (i == 0 || i == 1 || i == 4 || i == 5) ? g : g + 8;
  const int col = i < 4 ? t * 2 + (i & 1) : t * 2 + 8 + (i & 1);
  return {row, col};
}
gd::Coord spec_b(int lane, int i) {  // i in 0..3 -> {k, n}
  const int g = lane / 4, t = lane % 4;
  return {i < 2 ? t * 2 + (i & 1) : t * 2 + 8 + (i & 1), g};
}
gd::Coord spec_c(int lane, int i) {
  const int g = lane / 4, t = lane % 4;
  return {i < 2 ? g : g + 8, t * 2 + (i & 1)};
}

// Emulates one block tile of gemm_tiled_kernel: shared A [BM][BK], B [BN][BK] (weight rows); each warp loads its
// fragments at the kernel's coordinates, the "hardware" multiplies by the PTX layout, the epilogue stores at the
// kernel's coordinates. Must equal the plain product.
TEST(GemmTiling, MmaFragmentEmulationMatchesMatmul) {
  std::vector<float> A(gd::kBM * gd::kBK), B(gd::kBN * gd::kBK);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i * 7 % 13) - 6);
  for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i * 5 % 11) - 5);
  std::vector<float> C(gd::kBM * gd::kBN, 0.0f);
  for (int warp = 0; warp < gd::kTiledThreads / 32; ++warp) {
    const gd::Coord wo = gd::warp_origin(warp);
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 4; ++ni) {
        float acc[32][4] = {};
        for (int ks = 0; ks < gd::kBK; ks += 16) {
          float areg[32][8], breg[32][4];  // per lane: 4 (A) / 2 (B) registers of 2 values each
          for (int lane = 0; lane < 32; ++lane) {
            for (int r = 0; r < 4; ++r)
              for (int h = 0; h < 2; ++h) {
                const gd::Coord c = gd::frag_a(lane, r);
                areg[lane][2 * r + h] = A[size_t((wo.row + mi * 16 + c.row) * gd::kBK + ks + c.col + h)];
              }
            for (int r = 0; r < 2; ++r)
              for (int h = 0; h < 2; ++h) {
                const gd::Coord c = gd::frag_b(lane, r);
                breg[lane][2 * r + h] = B[size_t((wo.col + ni * 8 + c.row) * gd::kBK + ks + c.col + h)];
              }
          }
          float a16[16][16], b16[16][8];
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 8; ++i) a16[spec_a(lane, i).row][spec_a(lane, i).col] = areg[lane][i];
            for (int i = 0; i < 4; ++i) b16[spec_b(lane, i).row][spec_b(lane, i).col] = breg[lane][i];
          }
          for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < 4; ++i) {
              const gd::Coord c = spec_c(lane, i);
              for (int k = 0; k < 16; ++k) acc[lane][i] += a16[c.row][k] * b16[k][c.col];
            }
        }
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < 4; ++j) {
            const gd::Coord c = gd::frag_c(lane, j);
            C[size_t((wo.row + mi * 16 + c.row) * gd::kBN + wo.col + ni * 8 + c.col)] += acc[lane][j];
          }
      }
  }
  for (int m = 0; m < gd::kBM; ++m)
    for (int n = 0; n < gd::kBN; ++n) {
      float ref = 0.0f;
      for (int k = 0; k < gd::kBK; ++k) ref += A[size_t(m * gd::kBK + k)] * B[size_t(n * gd::kBK + k)];
      ASSERT_EQ(C[size_t(m * gd::kBN + n)], ref) << m << "," << n;
    }
}

TEST(GemmTiling, MoePermutationRef) {
  // T = 4, topk = 2, E = 3; ids: t0 {2,0}, t1 {0,1}, t2 {-1,2}, t3 {2,5 (invalid)}
  const std::vector<int32_t> idx = {2, 0, 0, 1, -1, 2, 2, 5};
  std::vector<int32_t> off(4), perm(8, -9), pos(8);
  dsinfer::ops::moe_permutation_ref(idx.data(), 4, 2, 3, off.data(), perm.data(), pos.data());
  EXPECT_EQ(off, (std::vector<int32_t>{0, 2, 3, 6}));
  EXPECT_EQ(std::vector<int32_t>(perm.begin(), perm.begin() + 6), (std::vector<int32_t>{0, 1, 1, 0, 2, 3}));
  EXPECT_EQ(pos, (std::vector<int32_t>{3, 0, 1, 2, -1, 4, 5, -1}));
}

}  // namespace
