// GPU parity: embed, hc_pre + norm, hc_post, hc_head + final norm, argmax against the CPU reference.
// Thresholds: the mixes are double dot products on both sides (exact products of floats; the GPU adds them on the
// fp64 tensor cores in another order: per warp k-slice, then warps, then splits, a relative difference ~1e-15),
// the Sinkhorn runs in fp32 with the same op order but the GPU's expf differs from glibc's by an ulp and a mu that
// lands on a float rounding boundary may round the other way: 1e-5 on y / post / comb.
// hc_post is a double accumulation of the same products: 1e-6. embed and argmax compare exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "attn_test_util.h"
#include "core/dtypes.h"
#include "core/small_float.h"
#include "ops/argmax/argmax_cuda.h"
#include "ops/embed/embed_cuda.h"
#include "ops/mhc/mhc.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {
constexpr int64_t kN = 4, kD = 4096;  // DeepSeek-V4-Flash: hc_mult 4, hidden 4096

struct HcFixture {
  int64_t n, dim;
  std::vector<float> fn, base, scale, norm_w;
  cuda::DeviceBuffer<float> dfn, dbase, dscale, dnorm;
  HcFixture(int64_t n_, int64_t dim_, bool head, uint32_t seed) : n(n_), dim(dim_) {
    const int64_t rows = head ? n : (2 + n) * n;
    fn = random_vec(size_t(rows * n * dim), seed, 0.02f);
    base = random_vec(size_t(rows), seed + 1);
    scale = random_vec(size_t(head ? 1 : 3), seed + 2);
    norm_w = random_vec(size_t(dim), seed + 3);
    dfn = to_device(fn);
    dbase = to_device(base);
    dscale = to_device(scale);
    dnorm = to_device(norm_w);
  }
  ops::HcParams host() const { return {fn.data(), base.data(), scale.data(), n, dim, 20, 1e-6f, 1e-6f}; }
  ops::cuda::HcNormParams device() {
    ops::cuda::HcNormParams p;
    p.fn = dfn.data();
    p.base = dbase.data();
    p.scale = dscale.data();
    p.n = n;
    p.dim = dim;
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

// The outputs of one hc_pre finalize (y, post, comb, V4.1's pre_out) in poisoned buffers, and their host copies.
struct PreBuffers {
  int64_t T, n, dim;
  cuda::DeviceBuffer<float> y, post, comb, pre;
  PreBuffers(int64_t T_, int64_t n_, int64_t dim_)
      : T(T_), n(n_), dim(dim_), y(poisoned<float>(size_t(T * dim))), post(poisoned<float>(size_t(T * n))),
        comb(poisoned<float>(size_t(T * n * n))), pre(poisoned<float>(size_t(T * n))) {}
  std::array<std::vector<float>, 4> host() const {
    return {to_host(y, size_t(T * dim)), to_host(post, size_t(T * n)), to_host(comb, size_t(T * n * n)),
            to_host(pre, size_t(T * n))};
  }
};

void expect_same_bits(const std::array<std::vector<float>, 4>& a, const std::array<std::vector<float>, 4>& b,
                      const std::string& what) {
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(std::memcmp(a[size_t(k)].data(), b[size_t(k)].data(), a[size_t(k)].size() * sizeof(float)), 0)
        << what << " out " << k;
}

struct PreOut {
  std::vector<float> y, post, comb;
};

PreOut run_pre(HcFixture& f, const cuda::DeviceBuffer<float>& dX, int64_t T, bool invariant = false) {
  auto dy = poisoned<float>(size_t(T * f.dim)), dpost = poisoned<float>(size_t(T * f.n));
  auto dcomb = poisoned<float>(size_t(T * f.n * f.n));
  ops::cuda::HcNormParams p = f.device();
  p.batch_invariant = invariant;
  EXPECT_TRUE(ops::cuda::hc_pre_norm(p, dX.data(), T, dy.data(), dpost.data(), dcomb.data(), nullptr).is_ok());
  return {to_host(dy, size_t(T * f.dim)), to_host(dpost, size_t(T * f.n)), to_host(dcomb, size_t(T * f.n * f.n))};
}

// hc_pre + norm against the CPU reference for T tokens of n streams of dim channels.
void check_pre(int64_t T, int64_t n, int64_t dim, uint32_t seed) {
  HcFixture f(n, dim, false, seed);
  auto X = random_vec(size_t(T * n * dim), seed + 7, 2.0f);
  std::vector<float> y(size_t(T * dim)), post(size_t(T * n)), comb(size_t(T * n * n));
  for (int64_t t = 0; t < T; ++t)
    ops::hc_pre_ref(f.host(), X.data() + t * n * dim, y.data() + t * dim, post.data() + t * n, comb.data() + t * n * n);
  ops::rmsnorm_ref(y.data(), T, dim, f.norm_w.data(), 1e-6f, y.data());
  auto dX = to_device(X);
  const PreOut g = run_pre(f, dX, T);
  EXPECT_LT(normalized_error(g.y, y), 1e-5) << "T " << T << " n " << n << " dim " << dim;
  EXPECT_LT(normalized_error(g.post, post), 1e-5) << "T " << T << " n " << n << " dim " << dim;
  EXPECT_LT(normalized_error(g.comb, comb), 1e-5) << "T " << T << " n " << n << " dim " << dim;
}

// One finalize case of the tests below: hc_pre (or hc_head, `head`) over T tokens of n x dim, V4.1's rounded
// arithmetic with carried coefficients (`v41`); rows: a scrambled row list for hc_head.
struct FinalizeCase {
  int64_t T, n, dim;
  bool head, v41;
};
struct FinalizeInputs {
  HcFixture f;
  cuda::DeviceBuffer<float> dX, pre_in;
  cuda::DeviceBuffer<int32_t> drows;
  ops::cuda::HcNormParams p;
  int64_t mixes;
  const int32_t* rows;  // hc_head's list, else null
  std::string what;
  FinalizeInputs(const FinalizeCase& c, uint32_t seed)
      : f(c.n, c.dim, c.head, seed), dX(to_device(random_vec(size_t(c.T * c.n * c.dim), seed + 1, 2.0f))),
        pre_in(to_device(random_vec(size_t(c.T * c.n), seed + 2))), p(f.device()),
        mixes(c.head ? c.n : (2 + c.n) * c.n) {
    std::vector<int32_t> r(static_cast<size_t>(c.T));
    for (int64_t i = 0; i < c.T; ++i) r[size_t(i)] = int32_t((i * 7 + 3) % c.T);
    drows = to_device(r);
    rows = c.head ? drows.data() : nullptr;
    if (c.v41) {
      p.pre_in = pre_in.data();
      p.round_bf16 = true;
    }
    what = "T " + std::to_string(c.T) + " n " + std::to_string(c.n) + " dim " + std::to_string(c.dim) + " head " +
           std::to_string(c.head) + " v41 " + std::to_string(c.v41);
  }
};

}  // namespace

// T = 1 / 5 take 8-token mixing tiles (one m-tile), T >= 9 32-token tiles (four m-tiles; 9 and 300 end in a
// partial tile); the finalize runs a whole block per token up to T = 512 and one warp per token above (T = 1000 /
// 600). n = 4 takes the unrolled finalize, n = 2 / 3 / 8 the generic one (n = 3: 15 mixes in 3 n-tiles; n = 8: 80
// mixes in 10 n-tiles, two comb elements per lane). dim 256 (the shipped model) and 64 (the tiny fixtures) leave
// room for few splits in the output row. dim 68 / 52 end the n * dim reduction in a partial chunk.
TEST(GpuMhc, PreNormMatchesReference) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 5, 9, 64, 300, 1000}) check_pre(T, kN, kD, 10);
  for (int64_t T : {3, 300, 600}) check_pre(T, kN, 256, 11);
  check_pre(7, kN, 64, 12);
  check_pre(5, 2, 64, 13);
  check_pre(600, 2, 64, 15);
  check_pre(20, 3, 256, 16);
  check_pre(70, 8, 256, 14);
  // n * dim not a multiple of the 128-float chunk: the last chunk is partial (its columns past n * dim zero-filled)
  check_pre(9, 3, 68, 17);
  check_pre(40, kN, 52, 18);
}

// Batch-invariant mode: a token's outputs are bitwise the same alone (T = 1, one m-tile) and as token 0 of 600
// (four m-tiles, other tokens in the tile), for hc_pre and hc_head.
TEST(GpuMhc, InvariantTokenDoesNotDependOnT) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 600;
  HcFixture f(kN, kD, false, 50), h(kN, kD, true, 52);
  auto X = random_vec(size_t(T * kN * kD), 51, 2.0f);
  auto dX = to_device(X);
  const PreOut big = run_pre(f, dX, T, true), one = run_pre(f, dX, 1, true);
  EXPECT_TRUE(std::equal(one.y.begin(), one.y.end(), big.y.begin()));
  EXPECT_TRUE(std::equal(one.post.begin(), one.post.end(), big.post.begin()));
  EXPECT_TRUE(std::equal(one.comb.begin(), one.comb.end(), big.comb.begin()));
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t r = 0; r < T; ++r) rows[size_t(r)] = int32_t(r);
  auto drows = to_device(rows);
  ops::cuda::HcNormParams p = h.device();
  p.batch_invariant = true;
  std::vector<float> yh[2];
  for (int k = 0; k < 2; ++k) {
    const int64_t R = k == 0 ? 1 : T;
    auto dy = poisoned<float>(size_t(R * kD));
    ASSERT_TRUE(ops::cuda::hc_head_norm(p, dX.data(), drows.data(), R, dy.data(), nullptr).is_ok());
    yh[k] = to_host(dy, size_t(kD));  // row 0 only
  }
  EXPECT_EQ(yh[0], yh[1]);
}

// The mixing kernel's partials (the split reduction parked in y) are bitwise the same on sm_90's m16n8k4 shape
// (the 32-token tile's m-tiles in pairs) as on m8n8k4 (the same tile one m-tile at a time) and on the 8-token tile,
// for hc_pre (24 mixes, 3 n-tiles) and hc_head (4 mixes): the batch-invariant mode's tile follows T, and the exact
// numerics rely on the mixes' bits. T = 70 ends in a partial tile.
TEST(GpuMhc, MixM16EqualsM8) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 70;
  auto X = random_vec(size_t(T * kN * kD), 61, 2.0f);
  auto dX = to_device(X);
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t r = 0; r < T; ++r) rows[size_t(r)] = int32_t(T - 1 - r);
  auto drows = to_device(rows);
  for (bool head : {false, true}) {
    HcFixture f(kN, kD, head, 60);
    const ops::cuda::HcNormParams p = f.device();
    const int64_t mixes = head ? kN : (2 + kN) * kN;
    std::vector<float> out[3];
    for (int v = 0; v < 3; ++v) {
      ops::cuda::detail::HcSplit sp = ops::cuda::detail::hc_default_split(T, kN, kD, mixes);
      ASSERT_EQ(sp.tile, 32);
      sp.mma16 = v == 0;
      if (v == 2) sp.tile = 8;
      auto dy = poisoned<float>(size_t(T * kD));
      ops::cuda::detail::launch_hc_mix(p, dX.data(), head ? drows.data() : nullptr, T, sp, dy.data(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out[v] = to_host(dy, size_t(T * kD));
    }
    for (int v = 1; v < 3; ++v)
      EXPECT_EQ(std::memcmp(out[0].data(), out[v].data(), out[0].size() * sizeof(float)), 0)
          << "head " << head << " variant " << v;
  }
}

// The narrow finalize split in two kernels (coefficients, then the collapse + norm from a shared-memory row) gives
// the bits of the fused narrow kernel: y, post, comb (and V4.1's pre_out, with pre_in and the bf16 rounding) for
// hc_pre at n = 4 / dim 4,096 (8 passes per lane), n = 2 / dim 64 and n = 8 / dim 256 (the generic N = 0 kernels),
// and hc_head over scrambled rows. T = 70 and 5 force the narrow team (below 512 the default is the wide one).
TEST(GpuMhc, SplitFinalizeEqualsFused) {
  DSI_SKIP_WITHOUT_GPU();
  using C = FinalizeCase;
  for (const C c : {C{1000, kN, kD, false, false}, C{600, kN, kD, false, true}, C{600, 2, 64, false, false},
                    C{70, 8, 256, false, false}, C{5, kN, kD, false, false}, C{600, kN, kD, true, false}}) {
    FinalizeInputs in(c, 70);
    ops::cuda::detail::HcSplit sp = ops::cuda::detail::hc_default_split(c.T, c.n, c.dim, in.mixes);
    sp.wide = false;
    auto parts = poisoned<float>(size_t(c.T * c.dim));
    ops::cuda::detail::launch_hc_mix(in.p, in.dX.data(), in.rows, c.T, sp, parts.data(), nullptr);
    std::array<std::vector<float>, 4> out[2];
    for (int v = 0; v < 2; ++v) {
      PreBuffers b(c.T, c.n, c.dim);
      ASSERT_EQ(cudaMemcpy(b.y.data(), parts.data(), size_t(c.T * c.dim) * sizeof(float), cudaMemcpyDeviceToDevice),
                cudaSuccess);
      in.p.pre_out = c.v41 ? b.pre.data() : nullptr;
      sp.split_fin = v == 0;
      ops::cuda::detail::launch_hc_finalize(in.p, in.dX.data(), in.rows, c.T, sp, b.y.data(),
                                            c.head ? nullptr : b.post.data(), c.head ? nullptr : b.comb.data(),
                                            nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out[v] = b.host();
    }
    expect_same_bits(out[0], out[1], in.what);
    EXPECT_FALSE(std::isnan(out[0][0][0])) << "y written";
  }
}

// The deferred coefficients (HcNormParams::defer_comb, then hc_comb on a second stream, as the V4 forward runs them
// at decode) give y, post and comb bit for bit as the plain call: the same functions on the same mixes. The wide
// finalize (T = 1, 64, 512), the narrow one (T = 600, coefficients kernel), n = 4 and the generic n (2, 8), and V4.1's
// exact arithmetic (round_bf16, pre_in / pre_out). hc_comb refuses parameters without defer_comb.
TEST(GpuMhc, DeferredCoefficientsEqualPlain) {
  DSI_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t T, n, dim;
    bool v41;
  };
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  for (const Case c : {Case{1, kN, kD, false}, Case{64, kN, kD, false}, Case{512, kN, kD, true},
                       Case{600, kN, kD, false}, Case{64, kN, kD, true}, Case{9, 2, 256, false},
                       Case{70, 8, 256, false}}) {
    HcFixture f(c.n, c.dim, false, 80);
    auto dX = to_device(random_vec(size_t(c.T * c.n * c.dim), 81, 2.0f));
    auto pre_in = to_device(random_vec(size_t(c.T * c.n), 82));
    std::array<std::vector<float>, 4> out[2];
    for (int v = 0; v < 2; ++v) {
      PreBuffers b(c.T, c.n, c.dim);
      ops::cuda::HcNormParams p = f.device();
      if (c.v41) {
        p.pre_in = pre_in.data();
        p.pre_out = b.pre.data();
        p.round_bf16 = true;
      }
      p.defer_comb = v == 1;
      ASSERT_TRUE(
          ops::cuda::hc_pre_norm(p, dX.data(), c.T, b.y.data(), b.post.data(), b.comb.data(), nullptr).is_ok());
      if (p.defer_comb) {
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_TRUE(ops::cuda::hc_comb(p, c.T, b.post.data(), b.comb.data(), side).is_ok());
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out[v] = b.host();
    }
    expect_same_bits(out[0], out[1], "T " + std::to_string(c.T) + " n " + std::to_string(c.n) + " dim " +
                                         std::to_string(c.dim) + " v41 " + std::to_string(c.v41));
    EXPECT_FALSE(std::isnan(out[1][2][0])) << "comb written";
  }
  HcFixture f(kN, kD, false, 83);
  auto dpost = poisoned<float>(size_t(kN)), dcomb = poisoned<float>(size_t(kN * kN));
  EXPECT_FALSE(ops::cuda::hc_comb(f.device(), 1, dpost.data(), dcomb.data(), side).is_ok());
  cudaStreamDestroy(side);
}

// HcNormParams::y_bf16: every finalize form (the wide one, the fused narrow one, the split narrow one; hc_pre and
// hc_head, V4.1's rounded arithmetic) writes y rounded to bf16 (small_float::f32_to_bf16_bits, the cuBLASLt engine's
// rounding of an fp32 x) for every element, and y, post and comb keep the bits of the call without it.
TEST(GpuMhc, Bf16CopyIsTheRoundedOutput) {
  DSI_SKIP_WITHOUT_GPU();
  using C = FinalizeCase;
  for (const C c : {C{64, kN, kD, false, false}, C{600, kN, kD, false, true}, C{70, 8, 256, false, false},
                    C{600, kN, kD, true, false}, C{9, 2, 64, false, false}}) {
    FinalizeInputs in(c, 90);
    for (int form = 0; form < 3; ++form) {  // wide, narrow fused, narrow split
      ops::cuda::detail::HcSplit sp = ops::cuda::detail::hc_default_split(c.T, c.n, c.dim, in.mixes);
      sp.wide = form == 0;
      sp.split_fin = form == 2;
      auto parts = poisoned<float>(size_t(c.T * c.dim));
      ops::cuda::detail::launch_hc_mix(in.p, in.dX.data(), in.rows, c.T, sp, parts.data(), nullptr);
      // v = 0 plain, 1 with the bf16 copy, 2 the bf16 copy only (y_bf16_only: no fp32 y stored)
      std::array<std::vector<float>, 4> out[3];
      auto y16 = poisoned<uint16_t>(size_t(c.T * c.dim));
      auto y16_only = poisoned<uint16_t>(size_t(c.T * c.dim));
      for (int v = 0; v < 3; ++v) {
        PreBuffers b(c.T, c.n, c.dim);
        ASSERT_EQ(cudaMemcpy(b.y.data(), parts.data(), size_t(c.T * c.dim) * sizeof(float), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        in.p.y_bf16 = v == 1 ? y16.data() : v == 2 ? y16_only.data() : nullptr;
        in.p.y_bf16_only = v == 2;
        ops::cuda::detail::launch_hc_finalize(in.p, in.dX.data(), in.rows, c.T, sp, b.y.data(),
                                              c.head ? nullptr : b.post.data(), c.head ? nullptr : b.comb.data(),
                                              nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        out[v] = b.host();
      }
      in.p.y_bf16 = nullptr;
      in.p.y_bf16_only = false;
      expect_same_bits(out[0], out[1], in.what + " form " + std::to_string(form));
      out[2][0] = out[0][0];  // y's fp32 row is not the output there
      expect_same_bits(out[0], out[2], in.what + " form " + std::to_string(form) + " bf16 only");
      EXPECT_EQ(to_host(y16_only, size_t(c.T * c.dim)), to_host(y16, size_t(c.T * c.dim)))
          << in.what << " form " << form << ": the bf16-only copy";
      const std::vector<uint16_t> h16 = to_host(y16, size_t(c.T * c.dim));
      int64_t bad = 0;
      for (size_t i = 0; i < h16.size(); ++i) bad += h16[i] != small_float::f32_to_bf16_bits(out[1][0][i]);
      EXPECT_EQ(bad, 0) << in.what << " form " << form;
      EXPECT_FALSE(std::isnan(out[1][0][0])) << "y written";
    }
  }
}

// Same input twice (the second time into outputs holding the first run's values): bitwise the same results.
TEST(GpuMhc, PreNormIsDeterministic) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 300, 1000}) {
    HcFixture f(kN, kD, false, 30);
    auto dX = to_device(random_vec(size_t(T * kN * kD), 31, 2.0f));
    const PreOut a = run_pre(f, dX, T), b = run_pre(f, dX, T);
    EXPECT_EQ(a.y, b.y) << T;
    EXPECT_EQ(a.post, b.post) << T;
    EXPECT_EQ(a.comb, b.comb) << T;
  }
}

TEST(GpuMhc, PostMatchesReferenceInPlace) {
  DSI_SKIP_WITHOUT_GPU();
  for (auto [T, n, dim] : {std::tuple<int64_t, int64_t, int64_t>{1, kN, kD}, {6, kN, kD}, {64, kN, kD}, {300, kN, kD},
                           {5, 8, 256}, {3, 2, 68}}) {
    auto X = random_vec(size_t(T * n * dim), 12), fo = random_vec(size_t(T * dim), 13);
    auto post = random_vec(size_t(T * n), 14), comb = random_vec(size_t(T * n * n), 15);
    std::vector<float> ref = X;
    for (int64_t t = 0; t < T; ++t)
      ops::hc_post_ref(n, dim, fo.data() + t * dim, post.data() + t * n, comb.data() + t * n * n, ref.data() + t * n * dim);
    auto dX = to_device(X), df = to_device(fo), dp = to_device(post), dc = to_device(comb);
    ASSERT_TRUE(ops::cuda::hc_post(T, n, dim, df.data(), dp.data(), dc.data(), dX.data(), nullptr).is_ok());
    EXPECT_LT(normalized_error(to_host(dX, X.size()), ref), 1e-6) << "T " << T << " n " << n << " dim " << dim;
  }
}

TEST(GpuMhc, HeadNormForSelectedRows) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t T : {4, 600}) {
    HcFixture f(kN, kD, true, 20);
    auto X = random_vec(size_t(T * kN * kD), 21, 2.0f);
    std::vector<int32_t> rows = {3, 0, 2};
    if (T > 4) {  // 599 rows (more than 512: the one-warp-per-row path), in a scrambled order
      rows.clear();
      for (int64_t r = 0; r + 1 < T; ++r) rows.push_back(int32_t((r * 7 + 3) % T));
    }
    std::vector<float> ref(rows.size() * size_t(kD));
    for (size_t r = 0; r < rows.size(); ++r) ops::hc_head_ref(f.host(), X.data() + rows[r] * kN * kD, ref.data() + r * kD);
    ops::rmsnorm_ref(ref.data(), int64_t(rows.size()), kD, f.norm_w.data(), 1e-6f, ref.data());
    auto dX = to_device(X);
    auto drows = to_device(rows);
    auto dy = poisoned<float>(ref.size());
    ASSERT_TRUE(
        ops::cuda::hc_head_norm(f.device(), dX.data(), drows.data(), int64_t(rows.size()), dy.data(), nullptr).is_ok());
    EXPECT_LT(normalized_error(to_host(dy, ref.size()), ref), 1e-5) << T;
  }
}

// hc_post_mix (hc_post fused with the next site's mixing reduction) then hc_pre_norm with premixed, against hc_post
// then hc_pre_norm: the new streams bitwise equal (the same arithmetic, one definition in mhc_post.cuh); y / post /
// comb are the fused reduction's other order of the same exact products, so both are held to
// PreNormMatchesReference's 1e-5 against the CPU reference run on the new streams (and to each other). T > 512 (the
// plan's prefill sizes): 513 (a partial token tile, splits over the 128 column chunks), 1000, 4096 (two splits, as at
// a 4,096-token prefill of V4-Flash), and the shipped model's dim 256 (8 column chunks).
TEST(GpuMhc, PostMixEqualsPostThenPre) {
  DSI_SKIP_WITHOUT_GPU();
  for (auto [T, dim] : {std::pair<int64_t, int64_t>{513, kD}, {1000, kD}, {4096, kD}, {777, 256}}) {
    const std::string what = "T " + std::to_string(T) + " dim " + std::to_string(dim);
    const uint32_t seed = uint32_t(T + dim);
    HcFixture f(kN, dim, false, seed);
    const auto X = random_vec(size_t(T * kN * dim), seed + 1, 2.0f), fo = random_vec(size_t(T * dim), seed + 2);
    const auto post = random_vec(size_t(T * kN), seed + 3), comb = random_vec(size_t(T * kN * kN), seed + 4);
    auto dfo = to_device(fo), dpost = to_device(post), dcomb = to_device(comb);
    std::array<std::vector<float>, 4> out[2];
    std::vector<float> xnew[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto dX = to_device(X);
      PreBuffers b(T, kN, dim);
      ops::cuda::HcNormParams p = f.device();
      if (fused) {
        ASSERT_TRUE(ops::cuda::hc_post_mix_wanted(p, T)) << what;
        const Status st =
            ops::cuda::hc_post_mix(p, T, dfo.data(), dpost.data(), dcomb.data(), dX.data(), b.y.data(), nullptr);
        ASSERT_TRUE(st.is_ok()) << what << ": " << st.message();
        p.premixed = true;
      } else {
        ASSERT_TRUE(ops::cuda::hc_post(T, kN, dim, dfo.data(), dpost.data(), dcomb.data(), dX.data(), nullptr).is_ok());
      }
      ASSERT_TRUE(ops::cuda::hc_pre_norm(p, dX.data(), T, b.y.data(), b.post.data(), b.comb.data(), nullptr).is_ok())
          << what;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      xnew[fused] = to_host(dX, X.size());
      out[fused] = b.host();
    }
    EXPECT_EQ(std::memcmp(xnew[0].data(), xnew[1].data(), X.size() * sizeof(float)), 0) << what << ": new streams";
    // The CPU reference's hc_pre + norm on the new streams (the unfused GPU path's, equal to the fused one's).
    std::vector<float> y(size_t(T * dim)), rpost(size_t(T * kN)), rcomb(size_t(T * kN * kN));
    for (int64_t t = 0; t < T; ++t)
      ops::hc_pre_ref(f.host(), xnew[0].data() + t * kN * dim, y.data() + t * dim, rpost.data() + t * kN,
                      rcomb.data() + t * kN * kN);
    ops::rmsnorm_ref(y.data(), T, dim, f.norm_w.data(), 1e-6f, y.data());
    for (int fused = 0; fused < 2; ++fused) {
      EXPECT_LT(normalized_error(out[fused][0], y), 1e-5) << what << " fused " << fused;
      EXPECT_LT(normalized_error(out[fused][1], rpost), 1e-5) << what << " fused " << fused;
      EXPECT_LT(normalized_error(out[fused][2], rcomb), 1e-5) << what << " fused " << fused;
    }
    int64_t differ = 0;
    for (int k = 0; k < 3; ++k) {
      EXPECT_LT(normalized_error(out[1][size_t(k)], out[0][size_t(k)]), 1e-5) << what << " out " << k;
      for (size_t i = 0; i < out[0][size_t(k)].size(); ++i) differ += out[0][size_t(k)][i] != out[1][size_t(k)][i];
    }
    std::printf("[ info ] %s: %lld of y / post / comb's values differ from the unfused call's\n", what.c_str(),
                static_cast<long long>(differ));
  }
}

// What hc_post_mix does not take is an error naming it, not a launch: decode sizes, batch-invariant parameters,
// another hc_mult; and a premixed hc_pre_norm that hc_post_mix could not have prepared.
TEST(GpuMhc, PostMixRefusesWhatItDoesNotTake) {
  DSI_SKIP_WITHOUT_GPU();
  constexpr int64_t T = 600;
  HcFixture f(kN, 256, false, 50), f2(2, 256, false, 51);
  auto dX = to_device(random_vec(size_t(T * kN * 256), 52)), df = to_device(random_vec(size_t(T * 256), 53));
  auto dp = to_device(random_vec(size_t(T * kN), 54)), dc = to_device(random_vec(size_t(T * kN * kN), 55));
  auto dy = poisoned<float>(size_t(T * 256));
  ops::cuda::HcNormParams p = f.device();
  EXPECT_TRUE(ops::cuda::hc_post_mix_wanted(p, T));
  const auto refused = [&](const ops::cuda::HcNormParams& q, int64_t t, const char* why) {
    const Status st = ops::cuda::hc_post_mix(q, t, df.data(), dp.data(), dc.data(), dX.data(), dy.data(), nullptr);
    EXPECT_FALSE(st.is_ok()) << why;
    EXPECT_NE(st.message().find("hc_post_mix"), std::string::npos) << st.message();
  };
  refused(p, 64, "a decode-sized step");
  ops::cuda::HcNormParams inv = p;
  inv.batch_invariant = true;
  refused(inv, T, "batch-invariant");
  refused(f2.device(), T, "hc_mult 2");
  EXPECT_FALSE(ops::cuda::hc_post_mix(p, T, nullptr, dp.data(), dc.data(), dX.data(), dy.data(), nullptr).is_ok());
  ops::cuda::HcNormParams pre = p;
  pre.premixed = true;
  auto dpost = poisoned<float>(size_t(T * kN)), dcomb = poisoned<float>(size_t(T * kN * kN));
  EXPECT_FALSE(ops::cuda::hc_pre_norm(pre, dX.data(), 64, dy.data(), dpost.data(), dcomb.data(), nullptr).is_ok());
}

// Shapes the kernels cannot take are errors, not launches.
TEST(GpuMhc, BadShapesAreErrors) {
  DSI_SKIP_WITHOUT_GPU();
  HcFixture f(kN, 32, false, 40);  // dim 32 < 2 * (24 + 1): no room for the mixing partials
  auto dX = to_device(random_vec(size_t(kN * 32), 41));
  auto dy = poisoned<float>(32), dp = poisoned<float>(kN), dc = poisoned<float>(kN * kN);
  EXPECT_FALSE(ops::cuda::hc_pre_norm(f.device(), dX.data(), 1, dy.data(), dp.data(), dc.data(), nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::hc_post(1, kN, 30, dy.data(), dp.data(), dc.data(), dX.data(), nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::hc_post(1, kN, 32, dy.data() + 1, dp.data(), dc.data(), dX.data(), nullptr).is_ok());
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
