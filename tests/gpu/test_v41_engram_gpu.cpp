// GPU parity of the DeepSeek-V4.1 Engram kernels (ops/engram/engram_cuda.h) and of the mHC additions V4.1 needs
// (hc_pre_norm with a carried pre, hc_collapse_norm) against the CPU reference.
// Thresholds: hashing is integer arithmetic and the lookup a copy (an FP8 table a decode and one exact power-of-two
// product): identical. The gate sums in double on both sides in another order: 1e-6 relative. The mHC mixes are
// double dot products with the Sinkhorn in fp32 whose expf may differ by an ulp (as test_mhc_gpu.cpp): 1e-5; the
// plain collapse + norm: 1e-6.
#include <gtest/gtest.h>

#include "core/dtypes.h"
#include "ops/engram/engram.h"
#include "ops/engram/engram_cuda.h"
#include "ops/mhc/mhc.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "v41_test_util.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;

TEST(GpuV41Engram, HashAcrossSteps) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t N = 4, heads = 2, rows = N + 1, vocab = 512;
  const ops::EngramHashLayout L = ops::make_engram_hash_layout({1, 4}, N, heads, 128, 156, 2);
  std::vector<int32_t> map(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) map[size_t(i)] = int32_t((i * 37 + 5) % 156);
  std::vector<int64_t> mult, primes, offsets;
  for (size_t e = 0; e < L.primes.size(); ++e) {
    mult.insert(mult.end(), L.multipliers[e].begin(), L.multipliers[e].end());
    primes.insert(primes.end(), L.primes[e].begin(), L.primes[e].end());
    offsets.insert(offsets.end(), L.offsets[e].begin(), L.offsets[e].end());
  }
  auto dmult = to_device(mult), dprimes = to_device(primes), doffsets = to_device(offsets);
  auto dmap = to_device(map);
  DeviceBuffer<float> dslots;
  ASSERT_TRUE(dslots.alloc(size_t(4 * rows)).is_ok());
  ops::cuda::EngramHashCudaParams p;
  p.max_ngram = N;
  p.heads = heads;
  p.layers = 2;
  p.pad_id = L.pad_id;
  p.multipliers = dmult.data();
  p.primes = dprimes.data();
  p.offsets = doffsets.data();
  p.token_map = dmap.data();
  p.slots = dslots.data();
  p.slot_stride = rows;
  p.ngram_offset = 0;
  p.ngram_rows = rows;
  std::vector<std::vector<int64_t>> hist(4);  // per slot: compressed ids by position (the CPU side)
  const std::vector<std::vector<SeqSpec>> steps = {{{0, 0, 9}, {1, 0, 2}, {2, 0, 1}}, {{0, 9, 1}, {1, 2, 7}, {2, 1, 2}}};
  for (size_t k = 0; k < steps.size(); ++k) {
    TestStep step(steps[k], 16);
    const int64_t T = step.T, cols = L.cols();
    DeviceBuffer<int64_t> dh;
    ASSERT_TRUE(dh.alloc(size_t(T * 2 * cols)).is_ok());
    ASSERT_TRUE(ops::cuda::engram_hash(step.dev, p, dh.data(), nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::engram_history_write(step.dev, p, nullptr).is_ok());
    const auto got = to_host(dh, size_t(T * 2 * cols));
    for (int64_t t = 0; t < T; ++t) {
      auto& h = hist[size_t(step.slot[step.seq_index(t)])];
      const int64_t pos = step.pos[size_t(t)];
      h.resize(size_t(pos + 1));
      h[size_t(pos)] = map[size_t(step.tokens[size_t(t)])];
      std::vector<int64_t> tok(static_cast<size_t>(N));
      for (int64_t s = 0; s < N; ++s) tok[size_t(s)] = pos - s >= 0 ? h[size_t(pos - s)] : -1;
      for (int64_t e = 0; e < 2; ++e) {
        std::vector<int64_t> want(static_cast<size_t>(cols));
        ops::engram_hash_ref(L, e, tok.data(), want.data());
        const std::vector<int64_t> g(got.begin() + (t * 2 + e) * cols, got.begin() + (t * 2 + e + 1) * cols);
        EXPECT_EQ(g, want) << "step " << k << " token " << t << " layer " << e;
      }
    }
  }
}

TEST(GpuV41Engram, GatherAndGate) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 5, cols = 6, hd = 64, rows = 300, n = 4, D = 256;
  std::vector<int64_t> ids(size_t(T * 2 * cols));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 131 + 7) % rows);
  const auto table = random_vec(size_t(rows * hd), 3);
  std::vector<uint8_t> codes(size_t(rows * hd)), scales(size_t(rows * hd / 32));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 29 + 3) % 256);
  for (size_t i = 0; i < codes.size(); ++i)
    if ((codes[i] & 0x7f) == 0x7f) codes[i] = 0;  // no NaN codes
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(120 + i % 10);
  auto dids = to_device(ids);
  auto dtable = to_device(table);
  auto dcodes = to_device(codes), dscales = to_device(scales);
  DeviceBuffer<float> dout;
  ASSERT_TRUE(dout.alloc(size_t(T * cols * hd)).is_ok());
  for (bool fp8 : {false, true}) {
    ops::cuda::EngramTableDevice tb;
    tb.data = fp8 ? static_cast<const void*>(dcodes.data()) : static_cast<const void*>(dtable.data());
    tb.scale = fp8 ? dscales.data() : nullptr;
    tb.rows = rows;
    tb.hd = hd;
    ASSERT_TRUE(ops::cuda::engram_gather(dids.data(), T, 2, 1, cols, tb, dout.data(), nullptr).is_ok());
    const auto got = to_host(dout, size_t(T * cols * hd));
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t i = 0; i < hd; ++i) {
          const int64_t id = ids[size_t((t * 2 + 1) * cols + c)], k = id * hd + i;
          const float want = fp8 ? e4m3_to_f32(codes[size_t(k)]) * std::ldexp(1.0f, int(scales[size_t(k / 32)]) - 127) : table[size_t(k)];
          bad += !same(got[size_t((t * cols + c) * hd + i)], want);
        }
    EXPECT_EQ(bad, 0) << "fp8 " << fp8;
  }
  auto X = random_vec(size_t(T * n * D), 5);
  const auto kv = random_vec(size_t(T * (n + 1) * D), 6), w = random_vec(size_t(n * D), 7);
  auto dX = to_device(X), dkv = to_device(kv), dw = to_device(w);
  ASSERT_TRUE(ops::cuda::engram_gate(dX.data(), T, n, D, dkv.data(), dw.data(), 1e-20f, nullptr).is_ok());
  const ops::EngramGateParams gp{n, D, 1e-20f, w.data()};
  for (int64_t t = 0; t < T; ++t) ops::engram_gate_ref(gp, X.data() + t * n * D, kv.data() + t * (n + 1) * D, kv.data() + t * (n + 1) * D + n * D);
  EXPECT_LE(max_rel(to_host(dX, X.size()), X), 1e-6);
}

TEST(GpuV41Engram, MhcCarriedPreAndCollapse) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t n = 4, D = 256, T = 7, mixes = (2 + n) * n;
  const auto fn = random_vec(size_t(mixes * n * D), 1, 0.02f), base = random_vec(size_t(mixes), 2), scale = random_vec(3, 3);
  const auto norm_w = random_vec(size_t(D), 4), X = random_vec(size_t(T * n * D), 5), pre_in = random_vec(size_t(T * n), 6);
  auto dfn = to_device(fn), dbase = to_device(base), dscale = to_device(scale), dnorm = to_device(norm_w);
  auto dX = to_device(X), dpre_in = to_device(pre_in);
  DeviceBuffer<float> dy, dpost, dcomb, dpre_out;
  ASSERT_TRUE(dy.alloc(size_t(T * D)).is_ok() && dpost.alloc(size_t(T * n)).is_ok() && dcomb.alloc(size_t(T * n * n)).is_ok() &&
              dpre_out.alloc(size_t(T * n)).is_ok());
  ops::cuda::HcNormParams p{dfn.data(), dbase.data(), dscale.data(), n, D, 20, 1e-6f, 1e-20f, dnorm.data()};
  p.pre_in = dpre_in.data();
  p.pre_out = dpre_out.data();
  ASSERT_TRUE(ops::cuda::hc_pre_norm(p, dX.data(), T, dy.data(), dpost.data(), dcomb.data(), nullptr).is_ok());
  std::vector<float> pre(size_t(T * n)), post(size_t(T * n)), comb(size_t(T * n * n)), y(size_t(T * D));
  const ops::HcParams hp{fn.data(), base.data(), scale.data(), n, D, 20, 1e-6f, 1e-20f};
  for (int64_t t = 0; t < T; ++t) {
    ops::hc_mixes_ref(hp, X.data() + t * n * D, pre.data() + t * n, post.data() + t * n, comb.data() + t * n * n);
    ops::hc_collapse_ref(n, D, X.data() + t * n * D, pre_in.data() + t * n, y.data() + t * D);
  }
  ops::rmsnorm_ref(y.data(), T, D, norm_w.data(), 1e-20f, y.data());
  EXPECT_LE(max_rel(to_host(dpre_out, pre.size()), pre), 1e-5);
  EXPECT_LE(max_rel(to_host(dpost, post.size()), post), 1e-5);
  EXPECT_LE(max_rel(to_host(dcomb, comb.size()), comb), 1e-5);
  EXPECT_LE(max_rel(to_host(dy, y.size()), y), 1e-6);  // the collapse uses pre_in: no Sinkhorn in its path

  const std::vector<int32_t> rows = {6, 0, 3};
  auto drows = to_device(rows);
  DeviceBuffer<float> dh;
  ASSERT_TRUE(dh.alloc(rows.size() * size_t(D)).is_ok());
  ASSERT_TRUE(ops::cuda::hc_collapse_norm(dX.data(), dpre_in.data(), drows.data(), int64_t(rows.size()), n, D, dnorm.data(),
                                          1e-20f, dh.data(), nullptr).is_ok());
  std::vector<float> h(rows.size() * size_t(D));
  for (size_t r = 0; r < rows.size(); ++r)
    ops::hc_collapse_ref(n, D, X.data() + rows[r] * n * D, pre_in.data() + rows[r] * n, h.data() + r * size_t(D));
  ops::rmsnorm_ref(h.data(), int64_t(rows.size()), D, norm_w.data(), 1e-20f, h.data());
  EXPECT_LE(max_rel(to_host(dh, h.size()), h), 1e-6);
}
