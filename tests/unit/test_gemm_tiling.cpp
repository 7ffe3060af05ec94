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
