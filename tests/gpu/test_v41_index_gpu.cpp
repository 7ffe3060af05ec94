// GPU parity of the CSA2 indexer at decode-sized shapes (ops/csa2/csa2_index.cu): scores over hundreds of keys
// with heads not a multiple of 32 and a key width not a multiple of 4 (the padded paths), many tokens (several
// key chunks per warp), and the radix top-k selection under heavy ties, -0 / +0, NaN and +-inf.
// Thresholds: scores are fp64 sums in which only the order of the head sum differs from the reference: 1e-6
// relative (as test_v41_ops_gpu.cpp). The fast mode's fp32 scores (Csa2IndexCudaParams::fast): a head's dot product
// is a 128-term fp32 FMA chain (worst case 128 * 2^-24 = 7.6e-6 of the sum of |terms|), the head sum up to 40 more
// fp32 adds (2.4e-6); with the sum of |terms| about twice the largest score on this data, ~2e-5 worst case:
// allowed 5e-5 of the largest score (measured value printed; typical errors are ~sqrt(n) smaller). The selections and candidate masks are compared exactly against the CPU
// reference run on the same scores (ties break toward the lower index on both sides).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "ops/csa2/csa2.h"
#include "ops/csa2/csa2_cuda.h"
#include "v41_test_util.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;
using ops::cuda::Csa2SelectMode;

namespace {

constexpr int64_t kBlock = 32;

TEST(GpuV41Index, ScoresManyKeysOddShapes) {
  DSI_SKIP_WITHOUT_GPU();
  // (40, 100): two head rounds with idle lanes, padded key width; (32, 128): the V4.1-Flash indexer.
  for (bool fast : {false, true})
  for (auto [r, heads, di] : {std::tuple<int64_t, int64_t, int64_t>{1, 40, 100}, {2, 40, 100}, {2, 32, 128}}) {
    SCOPED_TRACE(testing::Message() << "ratio " << r << " heads " << heads << " dim " << di << (fast ? " fast" : " exact"));
    // 70 decode-like tokens of one sequence deep in its context, plus a short and an empty-visible one.
    TestStep step({{0, 700, 70}, {1, 0, 1}, {2, 60, 3}}, kBlock);
    V41State st(r, 16, di, kBlock, 3, step.num_blocks(), 90);
    st.upload();
    const int64_t T = step.T, stride = 770 / r + 1;
    ops::cuda::Csa2IndexCudaParams xp;
    xp.heads = heads;
    xp.dim = di;
    xp.ratio = r;
    xp.topk = 64;
    xp.stride = stride;
    xp.fast = fast;
    const auto q = random_vec(size_t(T * heads * di), 91), w = random_vec(size_t(T * heads), 92);
    auto dq = to_device(q), dw = to_device(w);
    DeviceBuffer<float> dscores;
    ASSERT_TRUE(dscores.alloc(size_t(T * stride)).is_ok());
    ASSERT_TRUE(ops::cuda::csa2_index_scores(step.dev, st.device(), xp, dq.data(), dw.data(), dscores.data(), nullptr).is_ok());
    const auto got_all = to_host(dscores, size_t(T * stride));
    double worst = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = (step.pos[size_t(t)] + 1) / r;
      std::vector<float> keys(size_t(n * di));
      for (int64_t j = 0; j < n; ++j) std::copy_n(st.host().index_key(step.table(step.seq_index(t)), j), di, keys.data() + j * di);
      const auto want = ops::csa2_index_scores_ref(q.data() + t * heads * di, w.data() + t * heads, heads, di, keys.data(), n);
      const std::vector<float> got(got_all.begin() + t * stride, got_all.begin() + t * stride + n);
      const double e = max_rel(got, want);
      worst = std::max(worst, e);
      EXPECT_LE(e, fast ? 5e-5 : 1e-6) << "token " << t;
    }
    std::printf("csa2 index scores (%s) ratio %lld heads %lld dim %lld: worst max-relative error %.3g\n",
                fast ? "fast fp32" : "exact fp64", static_cast<long long>(r), static_cast<long long>(heads),
                static_cast<long long>(di), worst);
  }
  // The fast scores are not the official numerics: refused by name.
  ops::cuda::Csa2IndexCudaParams both;
  both.heads = 32;
  both.dim = 128;
  both.stride = 8;
  both.fast = true;
  both.official = true;
  TestStep step({{0, 10, 1}}, kBlock);
  V41State st(2, 16, 128, kBlock, 1, step.num_blocks(), 93);
  st.upload();
  DeviceBuffer<float> d1, d2;
  ASSERT_TRUE(d1.alloc(size_t(32 * 128)).is_ok() && d2.alloc(64).is_ok());
  EXPECT_FALSE(ops::cuda::csa2_index_scores(step.dev, st.device(), both, d1.data(), d1.data(), d2.data(), nullptr).is_ok());
}

// Scores with many exact ties and the special values the selection must treat as the reference does.
std::vector<float> tie_scores(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  const float pool[] = {0.0f, -0.0f, 1.0f, 1.0f, 2.0f, -3.0f, 0.5f, 7.0f, INFINITY, -INFINITY, NAN, 1e-30f};
  std::vector<float> v(n);
  for (auto& x : v) x = g() % 4 ? float(int(g() % 64)) * 0.25f : pool[g() % 12];
  return v;
}

TEST(GpuV41Index, RadixSelectTiesAndSpecialValues) {
  DSI_SKIP_WITHOUT_GPU();
  // Tokens see 1 .. ~3000 entries (ratio 1); topk both below and above the eligible counts.
  TestStep step({{0, 2990, 4}, {1, 0, 2}, {2, 300, 2}, {3, 1023, 2}}, kBlock);
  const int64_t T = step.T, stride = 3000, cand_blocks = 50, cand_bs = 8;
  for (int64_t topk : {int64_t(512), int64_t(4096)}) {
    SCOPED_TRACE(testing::Message() << "topk " << topk);
    ops::cuda::Csa2IndexCudaParams xp;
    xp.heads = 1;
    xp.dim = 1;
    xp.ratio = 1;
    xp.topk = topk;
    xp.stride = stride;
    xp.cand_topk_blocks = cand_blocks;
    xp.cand_block_size = cand_bs;
    DeviceBuffer<float> dblk;
    DeviceBuffer<uint8_t> dmask;
    DeviceBuffer<int32_t> dmask_n, dsel;
    ASSERT_TRUE(dblk.alloc(size_t(T * stride)).is_ok() && dmask.alloc(size_t(T * stride)).is_ok());
    ASSERT_TRUE(dmask_n.alloc(size_t(T)).is_ok() && dsel.alloc(size_t(T * topk)).is_ok());
    std::vector<std::vector<uint8_t>> cand(static_cast<size_t>(T));
    for (auto mode : {Csa2SelectMode::Plain, Csa2SelectMode::Candidate, Csa2SelectMode::Masked}) {
      SCOPED_TRACE(testing::Message() << "mode " << int(mode));
      xp.mode = mode;
      const auto scores = tie_scores(size_t(T * stride), 100 + uint32_t(mode) + uint32_t(topk));
      auto dscores = to_device(scores);
      ASSERT_TRUE(ops::cuda::csa2_index_select(step.dev, xp, dscores.data(), dmask.data(), dmask_n.data(), dblk.data(),
                                               dsel.data(), nullptr).is_ok());
      const auto gsel = to_host(dsel, size_t(T * topk));
      const auto gmask = to_host(dmask, size_t(T * stride));
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = step.pos[size_t(t)] + 1;
        const std::vector<float> sc(scores.begin() + t * stride, scores.begin() + t * stride + n);
        const uint8_t* mask = nullptr;
        if (mode == Csa2SelectMode::Candidate) {
          cand[size_t(t)] = ops::csa2_candidate_blocks_ref(sc, cand_blocks, cand_bs);
          const std::vector<uint8_t> gm(gmask.begin() + t * stride, gmask.begin() + t * stride + n);
          EXPECT_EQ(gm, cand[size_t(t)]) << "candidate mask of token " << t;
        }
        if (mode == Csa2SelectMode::Masked && !cand[size_t(t)].empty()) mask = cand[size_t(t)].data();
        std::vector<int32_t> want = ops::csa2_topk_ref(sc, topk, mask);
        want.resize(size_t(topk), -1);
        const std::vector<int32_t> got(gsel.begin() + t * topk, gsel.begin() + (t + 1) * topk);
        EXPECT_EQ(got, want) << "token " << t << " (" << n << " entries)";
      }
    }
  }
}

}  // namespace
