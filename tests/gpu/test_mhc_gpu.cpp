// GPU parity: embed, hc_pre + norm, hc_post, hc_head + final norm, argmax against the CPU reference.
// Thresholds: the mixes are double dot products on both sides (different summation order), the Sinkhorn runs in
// fp32 with the same op order but the GPU's expf differs from glibc's by an ulp: 1e-5 on y / post / comb.
// hc_post is a double accumulation of the same products: 1e-6. embed and argmax compare exactly.
#include <gtest/gtest.h>

#include "attn_test_util.h"
#include "core/dtypes.h"
#include "ops/argmax/argmax_cuda.h"
#include "ops/embed/embed_cuda.h"
#include "ops/mhc/mhc.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {
constexpr int64_t kN = 4, kD = 4096;

struct HcFixture {
  std::vector<float> fn, base, scale, norm_w;
  cuda::DeviceBuffer<float> dfn, dbase, dscale, dnorm;
  HcFixture(int64_t rows, int64_t nscale, uint32_t seed) {
    fn = random_vec(size_t(rows * kN * kD), seed, 0.02f);
    base = random_vec(size_t(rows), seed + 1);
    scale = random_vec(size_t(nscale), seed + 2);
    norm_w = random_vec(size_t(kD), seed + 3);
    dfn = to_device(fn);
    dbase = to_device(base);
    dscale = to_device(scale);
    dnorm = to_device(norm_w);
  }
  ops::HcParams host() const { return {fn.data(), base.data(), scale.data(), kN, kD, 20, 1e-6f, 1e-6f}; }
  ops::cuda::HcNormParams device() {
    ops::cuda::HcNormParams p;
    p.fn = dfn.data();
    p.base = dbase.data();
    p.scale = dscale.data();
    p.n = kN;
    p.dim = kD;
    p.sinkhorn_iters = 20;
    p.norm_w = dnorm.data();
    return p;
  }
};

template <typename T>
cuda::DeviceBuffer<T> poisoned(size_t n) {
  cuda::DeviceBuffer<T> b;
  EXPECT_TRUE(b.alloc(n).is_ok());
  cudaMemset(b.data(), 0xff, n * sizeof(T));  // NaN for floats, -1 for ints
  return b;
}
}  // namespace

TEST(GpuMhc, PreNormMatchesReference) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 5;
  HcFixture f((2 + kN) * kN, 3, 10);
  auto X = random_vec(size_t(T * kN * kD), 11, 2.0f);
  std::vector<float> y(size_t(T * kD)), post(size_t(T * kN)), comb(size_t(T * kN * kN));
  for (int64_t t = 0; t < T; ++t)
    ops::hc_pre_ref(f.host(), X.data() + t * kN * kD, y.data() + t * kD, post.data() + t * kN, comb.data() + t * kN * kN);
  ops::rmsnorm_ref(y.data(), T, kD, f.norm_w.data(), 1e-6f, y.data());
  auto dX = to_device(X);
  auto dy = poisoned<float>(y.size()), dpost = poisoned<float>(post.size()), dcomb = poisoned<float>(comb.size());
  ASSERT_TRUE(ops::cuda::hc_pre_norm(f.device(), dX.data(), T, dy.data(), dpost.data(), dcomb.data(), nullptr).is_ok());
  EXPECT_LT(normalized_error(to_host(dy, y.size()), y), 1e-5);
  EXPECT_LT(normalized_error(to_host(dpost, post.size()), post), 1e-5);
  EXPECT_LT(normalized_error(to_host(dcomb, comb.size()), comb), 1e-5);
}

TEST(GpuMhc, PostMatchesReferenceInPlace) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 6;
  auto X = random_vec(size_t(T * kN * kD), 12), fo = random_vec(size_t(T * kD), 13);
  auto post = random_vec(size_t(T * kN), 14), comb = random_vec(size_t(T * kN * kN), 15);
  std::vector<float> ref = X;
  for (int64_t t = 0; t < T; ++t)
    ops::hc_post_ref(kN, kD, fo.data() + t * kD, post.data() + t * kN, comb.data() + t * kN * kN, ref.data() + t * kN * kD);
  auto dX = to_device(X), df = to_device(fo), dp = to_device(post), dc = to_device(comb);
  ASSERT_TRUE(ops::cuda::hc_post(T, kN, kD, df.data(), dp.data(), dc.data(), dX.data(), nullptr).is_ok());
  EXPECT_LT(normalized_error(to_host(dX, X.size()), ref), 1e-6);
}

TEST(GpuMhc, HeadNormForSelectedRows) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 4;
  HcFixture f(kN, 1, 20);
  auto X = random_vec(size_t(T * kN * kD), 21, 2.0f);
  const std::vector<int32_t> rows = {3, 0, 2};
  std::vector<float> ref(rows.size() * size_t(kD));
  for (size_t r = 0; r < rows.size(); ++r) ops::hc_head_ref(f.host(), X.data() + rows[r] * kN * kD, ref.data() + r * kD);
  ops::rmsnorm_ref(ref.data(), int64_t(rows.size()), kD, f.norm_w.data(), 1e-6f, ref.data());
  auto dX = to_device(X);
  auto drows = to_device(rows);
  auto dy = poisoned<float>(ref.size());
  ASSERT_TRUE(ops::cuda::hc_head_norm(f.device(), dX.data(), drows.data(), int64_t(rows.size()), dy.data(), nullptr).is_ok());
  EXPECT_LT(normalized_error(to_host(dy, ref.size()), ref), 1e-5);
}

TEST(GpuEmbed, F32AndBf16TablesIntoAllStreams) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t V = 50, D = 264, T = 7;
  auto table = random_vec(size_t(V * D), 30);
  std::vector<uint16_t> table16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table16[i] = f32_to_bf16(table[i]);
  const std::vector<int32_t> tok = {0, 49, 7, 7, 13, 1, 48};
  auto dtok = to_device(tok);
  for (bool bf16 : {false, true}) {
    auto dt32 = to_device(table);
    auto dt16 = to_device(table16);
    auto dX = poisoned<float>(size_t(T * kN * D));
    ASSERT_TRUE(ops::cuda::embed(bf16 ? static_cast<const void*>(dt16.data()) : dt32.data(),
                                 bf16 ? ops::cuda::EmbedDType::BF16 : ops::cuda::EmbedDType::F32, V, D, dtok.data(), T, kN,
                                 dX.data(), nullptr)
                    .is_ok());
    auto X = to_host(dX, size_t(T * kN * D));
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < kN; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const size_t src = size_t(tok[size_t(t)] * D + d);
          const float want = bf16 ? bf16_to_f32(table16[src]) : table[src];
          bad += X[size_t((t * kN + j) * D + d)] != want;
        }
    EXPECT_EQ(bad, 0) << "bf16 " << bf16;
  }
}

TEST(GpuArgmax, LowestIndexWinsTiesAndNaNNeverWins) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t R = 5, V = 129280;
  auto logits = random_vec(size_t(R * V), 40, 10.0f);
  logits[size_t(0 * V + 100000)] = 50.0f;  // row 0: two equal maxima, the lower id wins
  logits[size_t(0 * V + 70000)] = 50.0f;
  logits[size_t(1 * V + 0)] = 60.0f;       // row 1: maximum at id 0
  logits[size_t(2 * V + V - 1)] = 60.0f;   // row 2: maximum at the last id, NaN elsewhere
  logits[size_t(2 * V + 5)] = NAN;
  for (int64_t i = 0; i < V; ++i) logits[size_t(3 * V + i)] = 1.0f;  // row 3: all equal -> 0
  logits[size_t(4 * V + 3)] = INFINITY;
  std::vector<int32_t> want(R);
  for (int64_t r = 0; r < R; ++r) {  // the CPU sampler's rule: strict >, ties keep the lower id
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[size_t(r * V + i)] > logits[size_t(r * V + best)]) best = int32_t(i);
    want[size_t(r)] = best;
  }
  auto dl = to_device(logits);
  auto dout = poisoned<int32_t>(size_t(R));
  ASSERT_TRUE(ops::cuda::argmax_rows(dl.data(), R, V, dout.data(), nullptr).is_ok());
  EXPECT_EQ(to_host(dout, size_t(R)), want);
  EXPECT_EQ(want[0], 70000);
}
