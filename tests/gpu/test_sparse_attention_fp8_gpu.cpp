// GPU parity of the sparse attention decode over the FP8 KV storage format (ops/sparse_attention/
// sparse_attention_fp8_cuda.h) against its CPU reference (sparse_attention_fp8_ref: kv_decode_row_ref,
// sparse_attention_ref in double, rope_apply_ref inverse). Key rows are random fp32 rows (tile magnitudes 2^-3 ..
// 2^3) encoded by the CPU codec into two caches: a window cache (128 rows a sequence) and a compressed-entry cache;
// each token attends over its window list (length min(pos + 1, 128)) then its entry list (top-k picks in random
// order, -1 padding, partial lengths, some indices past the cache's end); Flash sizes (64 heads x 512, inverse RoPE
// on 64 dims at positions ~4000), partial head groups, fp32 and bf16 queries, split counts from one tile a split to
// more splits than tiles, tokens with no key at all (output 0: only the sink).
//
// Threshold kTol = 1e-2 on ||o - ref|| / ||ref|| (whole step and per token), the bound of the bf16 tensor-core
// kernel (tests/gpu/test_sparse_attention_gpu.cpp derives it from q, k and p rounded to bf16). Here the key tile is
// exact (e4m3 * 2^k and bf16 RoPE channels are bf16 values), so q's and p's roundings are the only ones. Measured on
// the H200 (the test prints each case): 4.6-5.0e-3 with fp32 q ~ N(0, 2) (q's rounding dominates: larger scores),
// 1.8-2.6e-4 with bf16 q (exact); the bound leaves a 2x margin over the largest. A wrong byte offset, scale,
// fragment, mask or split gives errors of order 1. Two runs of the same call must agree bitwise, and (fp32 q) the
// kernel's overlapped tile loop must give the serial loop's bits (detail::kProbeSerial: same tiles, same order), and
// the wgmma probe (detail::kProbeWgmma) the kernel's bits. Session 17: both kernels run every case
// (Fp8AttentionKernel::kLockstep and kWarpSpecialised, and kAuto, the plan's), each held to the reference, and the
// warp-specialised kernel must give the lock-step kernel's bits (fp32 and bf16 q, every split count). Session 18:
// every variant of the warp-specialised kernel (detail::launch_sparse_attention_fp8_ws_variant; session 19: one
// block, and the two-block cluster pair) must give those bits too, and the fast conversion (attn_fp8::dequant16_fast)
// must give the reference conversion's bits for every (code, scale byte) pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <utility>
#include <random>
#include <vector>

#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;
using ops::cuda::SparseAttentionFp8Params;

namespace {
constexpr double kTol = 1e-2;  // see the header comment
constexpr int64_t kW = 128, kEntries = 700, kTopk = 512;

// Random fp32 rows, each 64-channel tile its own magnitude, encoded into a cache of `rows` rows.
std::vector<uint8_t> random_cache(int64_t rows, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint8_t> cache(size_t(ops::kv_cache_bytes(rows)));
  std::vector<float> x(static_cast<size_t>(ops::kKvDim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ops::kKvDim; c += 64) {
      const float mag = std::ldexp(1.0f, int(g() % 7) - 3);
      for (int64_t i = 0; i < 64; ++i) x[size_t(c + i)] = n(g) * mag;
    }
    ops::kv_encode_row_ref(x.data(), cache.data(), r);
  }
  return cache;
}

struct Case {
  int64_t T = 1, H = 64;
  bool q_bf16 = false, rope = true, empty_token = false;
  uint32_t seed = 1;
};

struct Inputs {
  std::vector<uint8_t> win, ent;
  std::vector<int32_t> idx0, len0, idx1, len1, pos;
  std::vector<float> qf, sinks, inv_freq;
  std::vector<uint16_t> qb;
};

Inputs make_inputs(const Case& c) {
  Inputs in;
  std::mt19937 g(c.seed);
  in.win = random_cache(c.T * kW, c.seed + 1);
  in.ent = random_cache(c.T * kEntries, c.seed + 2);
  in.idx0.assign(size_t(c.T * kW), -1);
  in.idx1.assign(size_t(c.T * kTopk), -1);
  for (int64_t t = 0; t < c.T; ++t) {
    const int32_t p = int32_t(t % 5 == 1 ? 40 + t : 3900 + int64_t(g() % 200));  // some short windows
    in.pos.push_back(p);
    const int32_t nw = std::min<int32_t>(p + 1, int32_t(kW));
    in.len0.push_back(c.empty_token && t == 0 ? 0 : nw);
    for (int32_t j = 0; j < nw; ++j) in.idx0[size_t(t * kW + j)] = int32_t(t * kW + (p - nw + 1 + j) % kW);
    std::vector<int32_t> pick(static_cast<size_t>(kEntries));
    std::iota(pick.begin(), pick.end(), 0);
    std::shuffle(pick.begin(), pick.end(), g);
    const int32_t ne = c.empty_token && t == 0 ? 0 : (t % 3 == 2 ? int32_t(g() % kTopk) : int32_t(kTopk));
    in.len1.push_back(ne);
    for (int32_t j = 0; j < ne; ++j) {
      int32_t r = int32_t(t * kEntries + pick[size_t(j)]);
      if (j % 37 == 5) r = -1;                             // a padded pick
      if (j % 101 == 7) r = int32_t(c.T * kEntries + j);   // past the cache's end: no key
      in.idx1[size_t(t * kTopk + j)] = r;
    }
  }
  in.qf.resize(size_t(c.T * c.H * ops::kKvDim));
  std::normal_distribution<float> n(0.0f, 2.0f);
  for (auto& v : in.qf) v = n(g);
  for (float v : in.qf) in.qb.push_back(small_float::f32_to_bf16_bits(v));
  for (int64_t h = 0; h < c.H; ++h) in.sinks.push_back(n(g));
  for (int i = 0; i < 32; ++i) in.inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / 64.0)));
  return in;
}

SparseAttentionFp8Params host_params(const Case& c, const Inputs& in) {
  SparseAttentionFp8Params p;
  p.T = c.T;
  p.heads = c.H;
  p.scale = float(1.0 / std::sqrt(512.0));
  p.sinks = in.sinks.data();
  p.keys[0] = {in.win.data(), c.T * kW, in.idx0.data(), kW, in.len0.data(), ops::kModel1Pages};
  p.keys[1] = {in.ent.data(), c.T * kEntries, in.idx1.data(), kTopk, in.len1.data(), ops::kModel1Pages};
  p.q_bf16 = c.q_bf16;
  p.rope_dim = c.rope ? 64 : 0;
  p.pos = in.pos.data();
  p.inv_freq = in.inv_freq.data();
  return p;
}

// The kernel with `splits` splits on the uploaded inputs; NaN-poisoned output.
struct Device {
  DeviceBuffer<uint8_t> win, ent;
  DeviceBuffer<int32_t> idx0, len0, idx1, len1, pos;
  DeviceBuffer<float> qf, sinks, inv_freq;
  DeviceBuffer<uint16_t> qb;
  explicit Device(const Inputs& in)
      : win(to_device(in.win)), ent(to_device(in.ent)), idx0(to_device(in.idx0)), len0(to_device(in.len0)),
        idx1(to_device(in.idx1)), len1(to_device(in.len1)), pos(to_device(in.pos)), qf(to_device(in.qf)),
        sinks(to_device(in.sinks)), inv_freq(to_device(in.inv_freq)), qb(to_device(in.qb)) {}
  // probe: a detail::kProbe* loop (kProbeSerial, kProbeWgmma; fp32 q only) instead of the kernel; ws_variant >= 0:
  // that variant of the warp-specialised kernel instead.
  std::vector<float> run(const Case& c, SparseAttentionFp8Params p, int64_t splits, int probe = 0,
                         ops::cuda::Fp8AttentionKernel kernel = ops::cuda::Fp8AttentionKernel::kAuto,
                         int ws_variant = -1) {
    p.kernel = kernel;
    p.sinks = sinks.data();
    p.keys[0].cache = win.data();
    p.keys[0].idx = idx0.data();
    p.keys[0].len = len0.data();
    p.keys[1].cache = ent.data();
    p.keys[1].idx = idx1.data();
    p.keys[1].len = len1.data();
    p.pos = pos.data();
    p.inv_freq = inv_freq.data();
    p.num_splits = splits;
    const size_t n = size_t(c.T * c.H * ops::kKvDim);
    DeviceBuffer<float> o, ws;
    EXPECT_TRUE(o.alloc(n).is_ok());
    cudaMemset(o.data(), 0xff, n * 4);
    const int64_t wsn = ops::cuda::sparse_attention_fp8_workspace_floats(c.T, c.H, splits);
    if (wsn > 0) {
      EXPECT_TRUE(ws.alloc(size_t(wsn)).is_ok());
      cudaMemset(ws.data(), 0xff, size_t(wsn) * 4);
    }
    const void* q = c.q_bf16 ? static_cast<const void*>(qb.data()) : static_cast<const void*>(qf.data());
    if (ws_variant >= 0) {
      EXPECT_TRUE(
          ops::cuda::detail::launch_sparse_attention_fp8_ws_variant(p, q, o.data(), ws.data(), ws_variant, nullptr));
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else if (probe != 0) {
      EXPECT_TRUE(ops::cuda::detail::launch_sparse_attention_fp8_probe(p, q, o.data(), ws.data(), probe, nullptr));
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      const Status s = ops::cuda::sparse_attention_fp8(p, q, o.data(), ws.data(), nullptr);
      EXPECT_TRUE(s.is_ok()) << s.message();
    }
    return to_host(o, n);
  }
};

void run_case(const Case& c, const std::vector<int64_t>& splits) {
  SCOPED_TRACE(testing::Message() << "T " << c.T << " H " << c.H << " bf16 q " << c.q_bf16);
  const Inputs in = make_inputs(c);
  const SparseAttentionFp8Params hp = host_params(c, in);
  std::vector<float> ref(in.qf.size());
  ops::sparse_attention_fp8_ref(hp, c.q_bf16 ? static_cast<const void*>(in.qb.data()) : in.qf.data(), ref.data());
  Device dev(in);
  const int64_t per_token = c.H * ops::kKvDim;
  for (int64_t s : splits) {
    SCOPED_TRACE(testing::Message() << "splits " << s);
    using K = ops::cuda::Fp8AttentionKernel;
    const std::vector<float> got = dev.run(c, hp, s);
    const std::vector<float> lock = dev.run(c, hp, s, 0, K::kLockstep);
    const std::vector<float> wsp = dev.run(c, hp, s, 0, K::kWarpSpecialised);
    for (const auto& [name, out] : {std::pair<const char*, const std::vector<float>*>{"plan", &got},
                                    {"lock-step", &lock}, {"warp-specialised", &wsp}}) {
      SCOPED_TRACE(name);
      const double err = normalized_error(*out, ref);
      std::printf("  fp8 attention (%s) T %lld H %lld splits %lld: error %.3e\n", name, (long long)c.T,
                  (long long)c.H, (long long)s, err);  // the measured distribution behind kTol
      EXPECT_LT(err, kTol);
      for (int64_t t = 0; t < c.T; ++t) {
        const std::vector<float> a(out->begin() + t * per_token, out->begin() + (t + 1) * per_token);
        const std::vector<float> b(ref.begin() + t * per_token, ref.begin() + (t + 1) * per_token);
        if (c.empty_token && t == 0) {
          for (float v : a) ASSERT_EQ(v, 0.0f);  // no key: the sink takes all the weight
          continue;
        }
        EXPECT_LT(normalized_error(a, b), kTol) << "token " << t;
      }
    }
    // The same tiles, products, sums and roundings: the same bits.
    EXPECT_EQ(0, std::memcmp(wsp.data(), lock.data(), wsp.size() * 4)) << "warp-specialised != lock-step";
    namespace d = ops::cuda::detail;
    for (int v = 0; v < d::kWsVariants; ++v) {
      const std::vector<float> var = dev.run(c, hp, s, 0, K::kAuto, v);
      EXPECT_EQ(0, std::memcmp(var.data(), lock.data(), var.size() * 4)) << "warp-specialised variant " << v
                                                                           << " != lock-step";
    }
    const std::vector<float> again = dev.run(c, hp, s);
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * 4)) << "not deterministic";
    if (!c.q_bf16) {  // the overlapped tile loop computes the serial one's tiles in its order: the same bits
      const std::vector<float> serial = dev.run(c, hp, s, ops::cuda::detail::kProbeSerial);
      EXPECT_EQ(0, std::memcmp(lock.data(), serial.data(), got.size() * 4)) << "overlapped loop != serial loop";
      // wgmma sums the same bf16 products in the same k16 steps as mma.sync: the same bits (session 16's probe)
      const std::vector<float> wgmma = dev.run(c, hp, s, ops::cuda::detail::kProbeWgmma);
      EXPECT_EQ(0, std::memcmp(lock.data(), wgmma.data(), got.size() * 4)) << "wgmma products != mma.sync products";
    }
  }
}
}  // namespace

TEST(GpuSparseAttentionFp8, DecodeBatch1SplitCounts) {
  DSI_SKIP_WITHOUT_GPU();
  // 640 keys = 20 tiles: one split, a few, the plan's (one tile a split), more splits than tiles.
  run_case(Case{1, 64, false, true, false, 11}, {1, 3, ops::cuda::plan_sparse_attention_fp8(1, 64, 640, 132), 33});
}

TEST(GpuSparseAttentionFp8, DecodeBatch64) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{64, 64, false, true, false, 12}, {1, ops::cuda::plan_sparse_attention_fp8(64, 64, 640, 132)});
}

TEST(GpuSparseAttentionFp8, TwoHundredTokens) {  // more blocks than SMs
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{200, 64, false, true, false, 15}, {1});
}

TEST(GpuSparseAttentionFp8, Bf16QueriesPartialHeadGroupsNoRope) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{5, 72, true, false, false, 13}, {1, 2});
}

TEST(GpuSparseAttentionFp8, TokenWithoutKeys) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(Case{3, 64, false, true, true, 14}, {1, 4});
}

// The fast e4m3 -> bf16 conversion (both forms: the one block's dequant16_fast and the pair's dequant16_fast_bits with
// its fallback) against the kernels' reference one for all 65,536 (code, scale byte) pairs, bit for bit; and the
// reference one against the CPU codec's decode (e4m3 * 2^(sb - 127) in fp32, rounded to bf16), so that the table
// itself is checked. NaN codes or scales: all NaN.
TEST(GpuSparseAttentionFp8, FastDequantGivesTheReferenceBits) {
  DSI_SKIP_WITHOUT_GPU();
  DeviceBuffer<uint16_t> fast, fast_bits, ref;
  ASSERT_TRUE(fast.alloc(65536).is_ok());
  ASSERT_TRUE(fast_bits.alloc(65536).is_ok());
  ASSERT_TRUE(ref.alloc(65536).is_ok());
  ops::cuda::detail::launch_fp8_dequant_table(fast.data(), fast_bits.data(), ref.data(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> f = to_host(fast, 65536), fb = to_host(fast_bits, 65536), r = to_host(ref, 65536);
  int64_t differ = 0, bits_differ = 0, nan = 0, cpu_differ = 0;
  for (uint32_t sb = 0; sb < 256; ++sb) {
    const float scale = small_float::from_bits(small_float::e8m0_f32_bits(sb));
    for (uint32_t code = 0; code < 256; ++code) {
      const size_t i = sb * 256 + code;
      const float v = small_float::from_bits(small_float::e4m3_f32_bits(code)) * scale;
      if (std::isnan(v)) {
        ++nan;
        const bool fn = (f[i] & 0x7fff) > 0x7f80, bn = (fb[i] & 0x7fff) > 0x7f80, rn = (r[i] & 0x7fff) > 0x7f80;
        if (!fn || !rn) ++differ;
        if (!bn) ++bits_differ;
        continue;
      }
      if (f[i] != r[i]) ++differ;
      if (fb[i] != r[i]) ++bits_differ;
      if (r[i] != small_float::f32_to_bf16_bits(v)) ++cpu_differ;
    }
  }
  std::printf("  fast dequant: %lld (one block's form) and %lld (the pair's) of 65536 pairs differ from the reference "
              "conversion, %lld from the CPU codec (%lld NaN)\n",
              (long long)differ, (long long)bits_differ, (long long)cpu_differ, (long long)nan);
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(bits_differ, 0);
  EXPECT_EQ(cpu_differ, 0);
}

TEST(GpuSparseAttentionFp8, RejectsBadArguments) {
  DSI_SKIP_WITHOUT_GPU();
  const Case c{1, 64};
  const Inputs in = make_inputs(c);
  Device dev(in);
  SparseAttentionFp8Params p = host_params(c, in);
  p.sinks = dev.sinks.data();
  p.keys[0] = {dev.win.data(), kW, dev.idx0.data(), kW, nullptr, ops::kModel1Pages};
  p.keys[1] = {};
  DeviceBuffer<float> o;
  ASSERT_TRUE(o.alloc(size_t(64 * 512)).is_ok());
  p.rope_dim = 0;
  EXPECT_TRUE(ops::cuda::sparse_attention_fp8(p, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
  SparseAttentionFp8Params bad = p;
  bad.num_splits = 2;  // no workspace
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
  bad = p;
  bad.keys[0].cache = dev.win.data() + 4;  // not 16-byte aligned
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
  bad = p;
  bad.rope_dim = 64;
  bad.pos = nullptr;
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
  bad = p;
  bad.sinks = nullptr;
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
  bad = p;
  bad.kernel = static_cast<ops::cuda::Fp8AttentionKernel>(7);
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), nullptr, nullptr).is_ok());
}

// Three key lists in caches of other page shapes (the runner's FP8 state: a slot's ring as one page of 130 rows, a
// token block's 32 entries as one page, pages padded and offset): each token's window list split in two (the first
// half from a paged copy of the window cache, the rest from the MODEL1 cache itself), its entries from a paged copy
// of the entry cache. The copies hold the same rows (decode -> encode is exact), and the keys come in the same order,
// so the output must equal the two-list run's bit for bit (same split count) and the reference within kTol.
TEST(GpuSparseAttentionFp8, ThreeListsInPagedCachesEqualTwoLists) {
  DSI_SKIP_WITHOUT_GPU();
  const Case c{6, 64, false, true, false, 15};
  const Inputs in = make_inputs(c);
  const SparseAttentionFp8Params hp = host_params(c, in);
  Device dev(in);
  const std::vector<float> two = dev.run(c, hp, 2);
  const ops::KvPages ring{130, 130 * 584 + 256, 512}, entp{32, 32 * 584 + 4096, 1024};
  auto paged_copy = [](const std::vector<uint8_t>& model1, int64_t rows, const ops::KvPages& g) {
    std::vector<uint8_t> out(size_t(g.offset + (rows + g.page_rows - 1) / g.page_rows * g.page_stride), 0xAA);
    std::vector<float> x(static_cast<size_t>(ops::kKvDim));
    for (int64_t r = 0; r < rows; ++r) {
      ops::kv_decode_row_ref(model1.data(), r, x.data());
      ops::kv_encode_row_ref(x.data(), out.data(), r, g);
    }
    return out;
  };
  auto dring = to_device(paged_copy(in.win, c.T * kW, ring));
  auto dent = to_device(paged_copy(in.ent, c.T * kEntries, entp));
  std::vector<int32_t> ia(size_t(c.T * kW), -1), ib(size_t(c.T * kW), -1), la, lb;
  for (int64_t t = 0; t < c.T; ++t) {
    const int32_t n = in.len0[size_t(t)], h = n / 2;
    la.push_back(h);
    lb.push_back(n - h);
    for (int32_t j = 0; j < h; ++j) ia[size_t(t * kW + j)] = in.idx0[size_t(t * kW + j)];
    for (int32_t j = h; j < n; ++j) ib[size_t(t * kW + j - h)] = in.idx0[size_t(t * kW + j)];
  }
  auto dia = to_device(ia);
  auto dib = to_device(ib);
  auto dla = to_device(la);
  auto dlb = to_device(lb);
  SparseAttentionFp8Params p = hp;
  p.sinks = dev.sinks.data();
  p.pos = dev.pos.data();
  p.inv_freq = dev.inv_freq.data();
  p.num_splits = 2;
  p.keys[0] = {dring.data(), c.T * kW, dia.data(), kW, dla.data(), ring};
  p.keys[1] = {dev.win.data(), c.T * kW, dib.data(), kW, dlb.data(), ops::kModel1Pages};
  p.keys[2] = {dent.data(), c.T * kEntries, dev.idx1.data(), kTopk, dev.len1.data(), entp};
  const size_t n = size_t(c.T * c.H * ops::kKvDim);
  DeviceBuffer<float> o, ws;
  ASSERT_TRUE(o.alloc(n).is_ok());
  ASSERT_TRUE(ws.alloc(size_t(ops::cuda::sparse_attention_fp8_workspace_floats(c.T, c.H, 2))).is_ok());
  const Status s = ops::cuda::sparse_attention_fp8(p, dev.qf.data(), o.data(), ws.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const std::vector<float> three = to_host(o, n);
  EXPECT_EQ(0, std::memcmp(three.data(), two.data(), n * 4)) << "three paged lists differ from two";
  std::vector<float> ref(n);
  ops::sparse_attention_fp8_ref(hp, in.qf.data(), ref.data());
  EXPECT_LT(normalized_error(three, ref), kTol);
  SparseAttentionFp8Params bad = p;
  bad.keys[0].pages.page_stride = 130 * 584 + 8;  // not a multiple of 16
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), ws.data(), nullptr).is_ok());
  bad = p;
  bad.keys[1] = {};  // a list after an empty one
  EXPECT_FALSE(ops::cuda::sparse_attention_fp8(bad, dev.qf.data(), o.data(), ws.data(), nullptr).is_ok());
}
