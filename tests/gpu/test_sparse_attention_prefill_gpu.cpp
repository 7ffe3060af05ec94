// GPU parity of the sparse attention prefill over the FP8 state (ops/sparse_attention/sparse_attention_prefill_cuda.h)
// against the CPU reference (sparse_attention_fp8_ref) and against the FP8 kernels (sparse_attention_fp8: the
// warp-specialised and the lock-step kernel). Inputs shaped as the runner's prefill step: T tokens of one sequence at
// positions p0 .. p0 + T - 1; list 0 the window positions before p0 (a ring of 128 rows in a paged cache, row pos %
// 128), list 1 the step's own rows (MODEL1 cache, row t), list 2 the compressed entries visible at the token's
// position (a paged cache; CSA-like: a random sorted subset of at most top-k of them with some -1 padding, or
// HCA-like: all of them). So the lists share rows between tokens as at prefill. Key rows are random fp32 rows (tile
// magnitudes 2^-3 .. 2^3) encoded by the CPU codec.
//
// Threshold kTol = 1e-2 on ||o - ref|| / ||ref|| (whole step and per token): tests/gpu/test_sparse_attention_fp8_gpu
// .cpp's bound for the same arithmetic (measured there 4.6-5.0e-3 with fp32 q ~ N(0, 2), 1.8-2.6e-4 bf16 q; a 2x
// margin). The prefill op feeds the FP8 kernels' consumers the same bf16 key tiles (dequant16's values) in the same
// order, so its output must equal the warp-specialised and the lock-step kernel's bit for bit at every split count;
// that includes a case whose distinct rows pass the staging's capacity (those rows dequantised by the attention
// kernel itself). Two runs must agree bitwise (the staging's row order is not fixed; its values are).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"
#include "ops/sparse_attention/sparse_attention_prefill_cuda.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;
using ops::cuda::SparseAttentionFp8Params;

namespace {
constexpr double kTol = 1e-2;  // see the header comment
constexpr int64_t kW = 128;
const ops::KvPages kRingPages{130, 130 * 584 + 256, 512}, kEntryPages{32, 32 * 584 + 4096, 1024};

struct Case {
  int64_t T = 64, H = 64, p0 = 0;
  int64_t ratio = 4, topk = 512;  // ratio 0: no compressed list; topk 0: every visible entry
  bool q_bf16 = false, rope = true;
  uint32_t seed = 1;
  int64_t rope_dim = 64;  // with rope: the trailing dims rotated (the epilogue's angle table holds rope_dim / 2)
};

// `rows` random rows encoded into a cache of page shape g.
std::vector<uint8_t> random_cache(int64_t rows, const ops::KvPages& g, uint32_t seed) {
  std::mt19937 r(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t pages = (std::max<int64_t>(rows, 1) + g.page_rows - 1) / g.page_rows;
  std::vector<uint8_t> cache(size_t(g.offset + pages * g.page_stride), 0);
  std::vector<float> x(static_cast<size_t>(ops::kKvDim));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < ops::kKvDim; c += 64) {
      const float mag = std::ldexp(1.0f, int(r() % 7) - 3);
      for (int64_t k = 0; k < 64; ++k) x[size_t(c + k)] = n(r) * mag;
    }
    ops::kv_encode_row_ref(x.data(), cache.data(), i, g);
  }
  return cache;
}

struct Inputs {
  int64_t entries = 0, stride2 = 0;
  std::vector<uint8_t> ring, step, ent;
  std::vector<int32_t> idx0, len0, idx1, len1, idx2, len2, pos;
  std::vector<float> qf, sinks, inv_freq;
  std::vector<uint16_t> qb;
};

Inputs make_inputs(const Case& c) {
  Inputs in;
  std::mt19937 g(c.seed);
  in.entries = c.ratio > 0 ? (c.p0 + c.T) / c.ratio : 0;
  in.stride2 = c.ratio == 0 ? 0 : (c.topk > 0 ? c.topk : std::max<int64_t>(in.entries, 1));
  in.ring = random_cache(kW, kRingPages, c.seed + 1);
  in.step = random_cache(c.T, ops::kModel1Pages, c.seed + 2);
  in.ent = random_cache(in.entries, kEntryPages, c.seed + 3);
  in.idx0.assign(size_t(c.T * kW), -1);
  in.idx1.assign(size_t(c.T * kW), -1);
  in.idx2.assign(size_t(c.T * in.stride2), -1);
  std::vector<int32_t> pick;
  for (int64_t t = 0; t < c.T; ++t) {
    const int64_t p = c.p0 + t, first = std::max<int64_t>(p - kW + 1, 0);
    in.pos.push_back(int32_t(p));
    int32_t n0 = 0, n1 = 0;
    for (int64_t q = first; q <= p; ++q) {
      if (q < c.p0) in.idx0[size_t(t * kW + n0++)] = int32_t(q % kW);
      else in.idx1[size_t(t * kW + n1++)] = int32_t(q - c.p0);
    }
    in.len0.push_back(n0);
    in.len1.push_back(n1);
    if (c.ratio == 0) continue;
    const int64_t vis = (p + 1) / c.ratio;
    const int64_t n = std::min<int64_t>(vis, in.stride2);
    pick.resize(size_t(vis));
    std::iota(pick.begin(), pick.end(), 0);
    if (n < vis) std::shuffle(pick.begin(), pick.end(), g);
    std::sort(pick.begin(), pick.begin() + n);
    for (int64_t j = 0; j < n; ++j)
      in.idx2[size_t(t * in.stride2 + j)] = (c.topk > 0 && j % 37 == 5) ? -1 : pick[size_t(j)];  // a padded pick
    in.len2.push_back(int32_t(n));
  }
  in.qf.resize(size_t(c.T * c.H * ops::kKvDim));
  std::normal_distribution<float> n(0.0f, 2.0f);
  for (auto& v : in.qf) v = n(g);
  for (float v : in.qf) in.qb.push_back(small_float::f32_to_bf16_bits(v));
  for (int64_t h = 0; h < c.H; ++h) in.sinks.push_back(n(g));
  for (int64_t i = 0; i < c.rope_dim / 2; ++i)
    in.inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(c.rope_dim))));
  return in;
}

// Lists 0 and 1 always (list 0 may be all empty: none may follow an empty list), list 2 where the case has one.
SparseAttentionFp8Params params(const Case& c, const Inputs& in, const uint8_t* ring, const uint8_t* step,
                                const uint8_t* ent, const int32_t* i0, const int32_t* l0, const int32_t* i1,
                                const int32_t* l1, const int32_t* i2, const int32_t* l2) {
  SparseAttentionFp8Params p;
  p.T = c.T;
  p.heads = c.H;
  p.scale = float(1.0 / std::sqrt(512.0));
  p.keys[0] = {ring, kW, i0, kW, l0, kRingPages};
  p.keys[1] = {step, c.T, i1, kW, l1, ops::kModel1Pages};
  if (c.ratio > 0) p.keys[2] = {ent, in.entries, i2, in.stride2, l2, kEntryPages};
  p.q_bf16 = c.q_bf16;
  p.rope_dim = c.rope ? c.rope_dim : 0;
  return p;
}

struct Device {
  DeviceBuffer<uint8_t> ring, step, ent;
  DeviceBuffer<int32_t> idx0, len0, idx1, len1, idx2, len2, pos;
  DeviceBuffer<float> qf, sinks, inv_freq;
  DeviceBuffer<uint16_t> qb;
  explicit Device(const Inputs& in)
      : ring(to_device(in.ring)), step(to_device(in.step)), ent(to_device(in.ent)), idx0(to_device(in.idx0)),
        len0(to_device(in.len0)), idx1(to_device(in.idx1)), len1(to_device(in.len1)), pos(to_device(in.pos)),
        qf(to_device(in.qf)), sinks(to_device(in.sinks)), inv_freq(to_device(in.inv_freq)), qb(to_device(in.qb)) {
    if (!in.idx2.empty()) {
      idx2 = to_device(in.idx2);
      len2 = to_device(in.len2);
    }
  }
  SparseAttentionFp8Params params(const Case& c, const Inputs& in) const {
    SparseAttentionFp8Params p = ::params(c, in, ring.data(), step.data(), ent.data(), idx0.data(), len0.data(),
                                          idx1.data(), len1.data(), idx2.data(), len2.data());
    p.sinks = sinks.data();
    p.pos = pos.data();
    p.inv_freq = inv_freq.data();
    return p;
  }
  const void* q(const Case& c) const {
    return c.q_bf16 ? static_cast<const void*>(qb.data()) : static_cast<const void*>(qf.data());
  }
  // prefill: the prefill op, else sparse_attention_fp8 with `kernel`; NaN-poisoned output and staging.
  std::vector<float> run(const Case& c, const Inputs& in, int64_t splits, bool prefill,
                         ops::cuda::Fp8AttentionKernel kernel = ops::cuda::Fp8AttentionKernel::kAuto) {
    SparseAttentionFp8Params p = params(c, in);
    p.num_splits = splits;
    p.kernel = kernel;
    const size_t n = size_t(c.T * c.H * ops::kKvDim);
    DeviceBuffer<float> o, ws;
    DeviceBuffer<uint8_t> staging;
    EXPECT_TRUE(o.alloc(n).is_ok());
    cudaMemset(o.data(), 0xff, n * 4);
    const int64_t wsn = ops::cuda::sparse_attention_fp8_workspace_floats(c.T, c.H, splits);
    if (wsn > 0) {
      EXPECT_TRUE(ws.alloc(size_t(wsn)).is_ok());
      cudaMemset(ws.data(), 0xff, size_t(wsn) * 4);
    }
    Status s = Status::ok();
    if (prefill) {
      const int64_t bytes = ops::cuda::sparse_attention_prefill_staging_bytes(p);
      EXPECT_TRUE(staging.alloc(size_t(bytes)).is_ok());
      cudaMemset(staging.data(), 0xff, size_t(bytes));
      s = ops::cuda::sparse_attention_prefill(p, q(c), o.data(), ws.data(), staging.data(), bytes, nullptr);
    } else {
      s = ops::cuda::sparse_attention_fp8(p, q(c), o.data(), ws.data(), nullptr);
    }
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return to_host(o, n);
  }
};

void run_case(const Case& c, const std::vector<int64_t>& splits) {
  SCOPED_TRACE(testing::Message() << "T " << c.T << " H " << c.H << " p0 " << c.p0 << " ratio " << c.ratio
                                  << " bf16 q " << c.q_bf16);
  const Inputs in = make_inputs(c);
  const int32_t* none = nullptr;
  SparseAttentionFp8Params hp =
      params(c, in, in.ring.data(), in.step.data(), in.ent.data(), in.idx0.data(), in.len0.data(), in.idx1.data(),
             in.len1.data(), in.idx2.empty() ? none : in.idx2.data(), in.len2.empty() ? none : in.len2.data());
  hp.sinks = in.sinks.data();
  hp.pos = in.pos.data();
  hp.inv_freq = in.inv_freq.data();
  std::vector<float> ref(in.qf.size());
  ops::sparse_attention_fp8_ref(hp, c.q_bf16 ? static_cast<const void*>(in.qb.data()) : in.qf.data(), ref.data());
  Device dev(in);
  const int64_t per_token = c.H * ops::kKvDim;
  for (int64_t s : splits) {
    SCOPED_TRACE(testing::Message() << "splits " << s);
    using K = ops::cuda::Fp8AttentionKernel;
    const std::vector<float> got = dev.run(c, in, s, true);
    const double err = normalized_error(got, ref);
    std::printf("  prefill attention T %lld H %lld p0 %lld ratio %lld splits %lld: error %.3e\n", (long long)c.T,
                (long long)c.H, (long long)c.p0, (long long)c.ratio, (long long)s, err);  // behind kTol
    EXPECT_LT(err, kTol);
    for (int64_t t = 0; t < c.T; ++t) {
      const std::vector<float> a(got.begin() + t * per_token, got.begin() + (t + 1) * per_token);
      const std::vector<float> b(ref.begin() + t * per_token, ref.begin() + (t + 1) * per_token);
      EXPECT_LT(normalized_error(a, b), kTol) << "token " << t;
    }
    const std::vector<float> wsp = dev.run(c, in, s, false, K::kWarpSpecialised);
    const std::vector<float> lock = dev.run(c, in, s, false, K::kLockstep);
    EXPECT_EQ(0, std::memcmp(got.data(), wsp.data(), got.size() * 4)) << "prefill != warp-specialised";
    EXPECT_EQ(0, std::memcmp(got.data(), lock.data(), got.size() * 4)) << "prefill != lock-step";
    const std::vector<float> again = dev.run(c, in, s, true);
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * 4)) << "not deterministic";

  }
}
}  // namespace

TEST(GpuSparseAttentionPrefill, CsaFromPositionZero) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{300, 64, 0, 4, 512, false, true, 21}, {1, 3});
}

TEST(GpuSparseAttentionPrefill, CsaLaterChunkWithRing) {  // a second chunk: window rows from the ring, full top-k
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{160, 64, 2300, 4, 512, false, true, 22}, {1, 2});
}

TEST(GpuSparseAttentionPrefill, HcaAndSlidingBf16QueriesPartialHeads) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{200, 64, 900, 128, 0, false, true, 23}, {1});
  run_case(Case{130, 72, 50, 0, 0, true, false, 24}, {1, 2});
}

// The inverse RoPE over more than the second consumer warpgroup's 256 dims (rope_dim 320): both warpgroups fill
// their part of the item's angle table (sparse_attention_rope_table.cuh); positions past 100,000, the large angles
// of the double-precision sincos.
TEST(GpuSparseAttentionPrefill, RopeTableOverBothHalves) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{64, 64, 100000, 128, 0, false, true, 26, 320}, {1, 2});
}

// Distinct rows past the staging's capacity (2 T + 16,384 rows): 64 tokens picking 512 of 30,000 entries each name
// ~20,000 of them; the rows left unstaged are dequantised by the attention kernel, the same bits.
TEST(GpuSparseAttentionPrefill, RowsPastTheStagingCapacity) {
  DSI_SKIP_WITHOUT_GPU();
  const Case c{64, 64, 29990, 1, 512, false, true, 25};
  const int64_t rows[3] = {kW, c.T, (c.p0 + c.T) / c.ratio}, strides[3] = {kW, kW, 512};
  ASSERT_LT(ops::cuda::sparse_attention_prefill_capacity(c.T, rows, strides), 19000);
  run_case(c, {1});
}

TEST(GpuSparseAttentionPrefill, RejectsBadArguments) {
  DSI_SKIP_WITHOUT_GPU();
  const Case c{8, 64, 0, 4, 512};
  const Inputs in = make_inputs(c);
  Device dev(in);
  const SparseAttentionFp8Params p = dev.params(c, in);
  DeviceBuffer<float> o;
  DeviceBuffer<uint8_t> staging;
  ASSERT_TRUE(o.alloc(size_t(c.T * c.H * 512)).is_ok());
  const int64_t bytes = ops::cuda::sparse_attention_prefill_staging_bytes(p);
  ASSERT_TRUE(staging.alloc(size_t(bytes) + 16).is_ok());
  auto call = [&](const SparseAttentionFp8Params& a, uint8_t* st, int64_t n) {
    return ops::cuda::sparse_attention_prefill(a, dev.qf.data(), o.data(), nullptr, st, n, nullptr);
  };
  EXPECT_TRUE(call(p, staging.data(), bytes).is_ok());
  EXPECT_FALSE(call(p, staging.data(), bytes - 1).is_ok());  // too small
  EXPECT_FALSE(call(p, nullptr, bytes).is_ok());
  EXPECT_FALSE(call(p, staging.data() + 4, bytes).is_ok());  // not 16-byte aligned
  SparseAttentionFp8Params bad = p;
  bad.num_splits = 2;  // no workspace
  EXPECT_FALSE(call(bad, staging.data(), bytes).is_ok());
  bad = p;
  bad.sinks = nullptr;
  EXPECT_FALSE(call(bad, staging.data(), bytes).is_ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
