// GPU: the fused epilogues of issue 31 (decode launches) against the separate ops they replace, bit for bit: the
// pair launch of the query / window kv norm + RoPE with the kv's FP8 block simulation (V4), the bf16 rounding of
// the RoPE channels (V4.1 official), and the bf16 rounding fused into rmsnorm and hc_post. The separate ops keep
// their own CPU parity tests (test_norm_rope_gpu.cpp, test_mhc_gpu.cpp); a fused kernel must give their bits, so
// every comparison here is exact (0 differing values), and each checks that the epilogue changed something.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attn_test_util.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/quant_sim/quant_sim.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using ops::cuda::HeadNorm;
using ops::cuda::HeadNormRopeParams;

namespace {
// Random values whose magnitudes spread over 2^-30 .. 2^20 by vector, so FP8 scales, subnormals and the amax floor
// all occur.
std::vector<float> spread_vec(int64_t vecs, int64_t dim, uint32_t seed) {
  auto x = random_vec(size_t(vecs * dim), seed, 2.0f);
  std::mt19937 g(seed + 1);
  for (int64_t v = 0; v < vecs; ++v) {
    const float s = std::ldexp(1.0f, int(v % 51) - 30 + int(g() % 3));
    for (int64_t i = 0; i < dim; ++i) x[size_t(v * dim + i)] *= s;
  }
  return x;
}

int64_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += !same(a[i], b[i]);
  return bad + int64_t(a.size() != b.size());
}

std::vector<float> inv_freq(int64_t rope_dim) {
  io::RopeParams r;
  r.theta = 160000.0;
  r.yarn = true;
  r.factor = 16.0;
  r.original_max_position_embeddings = 65536;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  return ops::rope_inv_freq(r, rope_dim);
}
}  // namespace

// V4's attention: q (H heads, unweighted norm) and kv (1 head, kv_norm) + FP8 simulation of kv's NoPE channels in
// one launch == q_norm_rope, kv_norm_rope, kv_fp8_sim. Shapes: V4-Flash (512 / 64, NoPE 448 = 7 blocks of 64), the
// fixtures' (64 / 16 and 48 / 16: NoPE 48 and 32, one partial block), and other block sizes (128: a partial last
// block of 448; 4 and 32).
TEST(GpuFusedEpilogues, NormRopePairWithFp8EqualsSeparateOps) {
  DSI_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t T, H, hd, rd, block;
  };
  for (const Case& c : {Case{5, 64, 512, 64, 64}, Case{37, 4, 64, 16, 64}, Case{3, 6, 48, 16, 64},
                        Case{4, 8, 512, 64, 128}, Case{2, 3, 68, 20, 4}, Case{9, 2, 128, 64, 32}}) {
    const int64_t nope = c.hd - c.rd;
    std::vector<int64_t> pos(size_t(c.T));
    for (int64_t t = 0; t < c.T; ++t) pos[size_t(t)] = (t * 7919) % 70000;
    const auto q = spread_vec(c.T * c.H, c.hd, 1), kv = spread_vec(c.T, c.hd, 2), w = random_vec(size_t(c.hd), 3);
    const auto inv = inv_freq(c.rd);
    auto dinv = to_device(inv), dw = to_device(w);
    auto dpos = to_device(pos);
    const HeadNormRopeParams qp{c.T, c.H, c.hd, HeadNorm::Unweighted, nullptr, 1e-6f, c.rd, dinv.data(), 1.0f, false};
    // kv_norm as in the model; without a norm (the spread magnitudes survive: tiny scales and the amax floor)
    for (HeadNorm kv_norm : {HeadNorm::Weighted, HeadNorm::None}) {
      HeadNormRopeParams kp{c.T, 1, c.hd, kv_norm, dw.data(), 1e-6f, c.rd, dinv.data(), 1.0f, false};
      // separate ops
      auto sq = to_device(q), skv = to_device(kv);
      ASSERT_TRUE(ops::cuda::head_norm_rope(qp, sq.data(), dpos.data(), nullptr).is_ok());
      ASSERT_TRUE(ops::cuda::head_norm_rope(kp, skv.data(), dpos.data(), nullptr).is_ok());
      const auto kv_unsim = to_host(skv, kv.size());
      ASSERT_TRUE(ops::cuda::fp8_block_sim(skv.data(), c.T, c.hd, nope, c.block, nullptr).is_ok());
      // fused
      kp.fp8_dims = nope;
      kp.fp8_block = c.block;
      auto fq = to_device(q), fkv = to_device(kv);
      ASSERT_TRUE(ops::cuda::head_norm_rope_pair(qp, fq.data(), kp, fkv.data(), dpos.data(), nullptr).is_ok());
      const auto want_kv = to_host(skv, kv.size());
      EXPECT_EQ(mismatches(to_host(fq, q.size()), to_host(sq, q.size())), 0) << "q, hd " << c.hd;
      EXPECT_EQ(mismatches(to_host(fkv, kv.size()), want_kv), 0) << "kv, hd " << c.hd << " block " << c.block;
      EXPECT_GT(mismatches(kv_unsim, want_kv), 0) << "the FP8 simulation changed nothing (vacuous case)";
      // the single-tensor launch with the FP8 epilogue too
      auto gkv = to_device(kv);
      ASSERT_TRUE(ops::cuda::head_norm_rope(kp, gkv.data(), dpos.data(), nullptr).is_ok());
      EXPECT_EQ(mismatches(to_host(gkv, kv.size()), want_kv), 0) << "single launch, hd " << c.hd;
    }
  }
}

// V4's indexer query: RoPE then hadamard_fp4_sim == the fused Hadamard + FP4 epilogue (di 128 as V4-Flash, the
// fixtures' 32 and 64; block 32 as the model, and 8 / 128 for the lane groups' edges).
TEST(GpuFusedEpilogues, RopeHadamardFp4EqualsSeparateOps) {
  DSI_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t T, H, di, rd, block;
  };
  for (const Case& c : {Case{5, 64, 128, 64, 32}, Case{33, 4, 32, 16, 32}, Case{6, 4, 64, 16, 32},
                        Case{3, 5, 128, 64, 8}, Case{3, 5, 128, 64, 128}, Case{2, 3, 4, 4, 4}}) {
    std::vector<int64_t> pos(size_t(c.T));
    for (int64_t t = 0; t < c.T; ++t) pos[size_t(t)] = (t * 104729) % 131072;
    const auto x = spread_vec(c.T * c.H, c.di, 51);
    const auto inv = inv_freq(c.rd);
    auto dinv = to_device(inv);
    auto dpos = to_device(pos);
    HeadNormRopeParams p{c.T, c.H, c.di, HeadNorm::None, nullptr, 1e-6f, c.rd, dinv.data(), 1.0f, false};
    auto sx = to_device(x), fx = to_device(x);
    ASSERT_TRUE(ops::cuda::head_norm_rope(p, sx.data(), dpos.data(), nullptr).is_ok());
    const auto roped = to_host(sx, x.size());
    ASSERT_TRUE(ops::cuda::hadamard_fp4_sim(sx.data(), c.T * c.H, c.di, c.block, nullptr).is_ok());
    const auto want = to_host(sx, x.size());
    EXPECT_GT(mismatches(roped, want), 0);
    p.fp4_block = c.block;
    ASSERT_TRUE(ops::cuda::head_norm_rope(p, fx.data(), dpos.data(), nullptr).is_ok());
    EXPECT_EQ(mismatches(to_host(fx, x.size()), want), 0) << "di " << c.di << " block " << c.block;
  }
}

// V4.1 official: RoPE then round_bf16_cuda over the rotated channels == round_rope_bf16 (q and the indexer q:
// no norm; kv: after its separate rmsnorm, so no norm here either), single and pair launches.
TEST(GpuFusedEpilogues, RopeBf16RoundingEqualsSeparateOps) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 7, H = 16, hd = 512, rd = 64;
  std::vector<int64_t> pos = {0, 1, 5, 127, 4000, 65535, 131071};
  const auto q = spread_vec(T * H, hd, 11), kv = spread_vec(T, hd, 12);
  const auto inv = inv_freq(rd);
  auto dinv = to_device(inv);
  auto dpos = to_device(pos);
  HeadNormRopeParams qp{T, H, hd, HeadNorm::None, nullptr, 1e-6f, rd, dinv.data(), 1.0f, false};
  HeadNormRopeParams kp{T, 1, hd, HeadNorm::None, nullptr, 1e-6f, rd, dinv.data(), 1.0f, false};
  auto sq = to_device(q), skv = to_device(kv);
  ASSERT_TRUE(ops::cuda::head_norm_rope(qp, sq.data(), dpos.data(), nullptr).is_ok());
  ASSERT_TRUE(ops::cuda::head_norm_rope(kp, skv.data(), dpos.data(), nullptr).is_ok());
  const auto q_unrounded = to_host(sq, q.size());
  ASSERT_TRUE(ops::cuda::round_bf16_cuda(sq.data(), T * H, hd, hd - rd, hd, nullptr).is_ok());
  ASSERT_TRUE(ops::cuda::round_bf16_cuda(skv.data(), T, hd, hd - rd, hd, nullptr).is_ok());
  const auto want_q = to_host(sq, q.size()), want_kv = to_host(skv, kv.size());
  EXPECT_GT(mismatches(q_unrounded, want_q), 0);
  qp.round_rope_bf16 = true;
  kp.round_rope_bf16 = true;
  auto fq = to_device(q), fkv = to_device(kv), gq = to_device(q);
  ASSERT_TRUE(ops::cuda::head_norm_rope_pair(qp, fq.data(), kp, fkv.data(), dpos.data(), nullptr).is_ok());
  ASSERT_TRUE(ops::cuda::head_norm_rope(qp, gq.data(), dpos.data(), nullptr).is_ok());
  EXPECT_EQ(mismatches(to_host(fq, q.size()), want_q), 0);
  EXPECT_EQ(mismatches(to_host(fkv, kv.size()), want_kv), 0);
  EXPECT_EQ(mismatches(to_host(gq, q.size()), want_q), 0);
}

// rmsnorm(round_bf16) == rmsnorm then round_bf16_cuda; hc_post(round_bf16) == hc_post then round_bf16_cuda.
TEST(GpuFusedEpilogues, RmsnormAndHcPostBf16RoundingEqualSeparateOps) {
  DSI_SKIP_WITHOUT_GPU();
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1024}, {33, 512}, {5, 100}}) {
    const auto x = spread_vec(rows, dim, 21), w = random_vec(size_t(dim), 22);
    auto dx = to_device(x), dw = to_device(w);
    cuda::DeviceBuffer<float> sep, fused;
    ASSERT_TRUE(sep.alloc(x.size()).is_ok());
    ASSERT_TRUE(fused.alloc(x.size()).is_ok());
    ASSERT_TRUE(ops::cuda::rmsnorm(dx.data(), rows, dim, dw.data(), 1e-6f, sep.data(), nullptr).is_ok());
    const auto unrounded = to_host(sep, x.size());
    ASSERT_TRUE(ops::cuda::round_bf16_cuda(sep.data(), rows, dim, 0, dim, nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::rmsnorm(dx.data(), rows, dim, dw.data(), 1e-6f, fused.data(), nullptr, true).is_ok());
    const auto want = to_host(sep, x.size());
    EXPECT_GT(mismatches(unrounded, want), 0);
    EXPECT_EQ(mismatches(to_host(fused, x.size()), want), 0) << "rmsnorm rows " << rows << " dim " << dim;
    // in place (x == y), as the V4.1 runner calls it
    ASSERT_TRUE(ops::cuda::rmsnorm(dx.data(), rows, dim, dw.data(), 1e-6f, dx.data(), nullptr, true).is_ok());
    EXPECT_EQ(mismatches(to_host(dx, x.size()), want), 0) << "rmsnorm in place, rows " << rows;
  }
  for (auto [T, n, dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 4, 4096}, {70, 4, 256}, {3, 2, 68}}) {
    const auto X = spread_vec(T * n, dim, 31), f = random_vec(size_t(T * dim), 32);
    const auto post = random_vec(size_t(T * n), 33), comb = random_vec(size_t(T * n * n), 34);
    auto sX = to_device(X), fX = to_device(X), df = to_device(f), dp = to_device(post), dc = to_device(comb);
    ASSERT_TRUE(ops::cuda::hc_post(T, n, dim, df.data(), dp.data(), dc.data(), sX.data(), nullptr).is_ok());
    const auto unrounded = to_host(sX, X.size());
    ASSERT_TRUE(ops::cuda::round_bf16_cuda(sX.data(), T * n, dim, 0, dim, nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::hc_post(T, n, dim, df.data(), dp.data(), dc.data(), fX.data(), nullptr, true).is_ok());
    const auto want = to_host(sX, X.size());
    EXPECT_GT(mismatches(unrounded, want), 0);
    EXPECT_EQ(mismatches(to_host(fX, X.size()), want), 0) << "hc_post T " << T << " n " << n << " dim " << dim;
  }
}

// Epilogue parameters the kernel cannot take, and overlapping pairs, are errors naming the problem, not launches.
TEST(GpuFusedEpilogues, BadEpilogueParametersAreErrors) {
  DSI_SKIP_WITHOUT_GPU();
  const auto inv = inv_freq(16);
  auto dinv = to_device(inv);
  auto dpos = to_device(std::vector<int64_t>{0, 1});
  auto dx = to_device(random_vec(2 * 64, 41)), dy = to_device(random_vec(2 * 64, 42));
  HeadNormRopeParams p{2, 1, 64, HeadNorm::Unweighted, nullptr, 1e-6f, 16, dinv.data(), 1.0f, false};
  p.fp8_dims = 46;  // not a multiple of 4
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp8_dims = 68;  // beyond dim
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp8_dims = 48;
  p.fp8_block = 48;  // not a power of two
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp8_block = 256;  // wider than a warp's 32 chunks
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp8_block = 64;
  EXPECT_TRUE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp4_block = 32;  // with the FP8 epilogue
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  p.fp8_dims = 0;
  p.fp4_block = 24;  // not a power of two
  EXPECT_FALSE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
  HeadNormRopeParams wide{1, 1, 256, HeadNorm::None, nullptr, 1e-6f, 16, dinv.data(), 1.0f, false};
  wide.fp4_block = 32;  // 256 channels: more than one warp step
  EXPECT_FALSE(ops::cuda::head_norm_rope(wide, dx.data(), dpos.data(), nullptr).is_ok());
  const HeadNormRopeParams one{1, 1, 64, HeadNorm::None, nullptr, 1e-6f, 16, dinv.data(), 1.0f, false};
  EXPECT_FALSE(ops::cuda::head_norm_rope_pair(one, dx.data(), one, dx.data() + 32, dpos.data(), nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::head_norm_rope_pair(one, dx.data(), one, nullptr, dpos.data(), nullptr).is_ok());
  EXPECT_TRUE(ops::cuda::head_norm_rope_pair(one, dx.data(), one, dy.data(), dpos.data(), nullptr).is_ok());
  EXPECT_TRUE(cudaDeviceSynchronize() == cudaSuccess);
}
