// GPU parity of the FP8 grouped (prefill) MoE GEMMs (moe_grouped_fp8.cu, MoePath::GroupedFp8; and the CUTLASS ones for
// FP8_BLOCK experts, moe_grouped_cutlass.cu, MoePath::CutlassFp8, at the end of this file) against their CPU
// reference (ops/moe/moe_fp8.h: the same quantization and expansion, sums in double) on sampled tokens, and the numeric
// contract against today's paths: the exact CPU reference (expert_accumulate_ref on dequantized weights) and the bf16
// grouped path on all tokens. Ragged routings: an empty expert, a one-row expert, an expert with > 128 rows (several
// CTA row tiles, the last partial), invalid ids; K of one stage and of several (the ring wraps); one expert whose scale
// groups are 2^20 apart (the rounding branch of the expansion). Also bitwise determinism and row independence (the
// first half of the tokens alone gives bitwise the same rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "cuda/gpu_test_util.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_fp8.h"
#include "ops/moe/moe_fp8_common.h"
#include "weight_gen.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::normalized_error;
using dsinfer::cuda::test::to_device;
using dsinfer::ops::cuda::WeightFormat;
using dsinfer::test::HostWeight;
using dsinfer::test::make_host_weight;
using dsinfer::test::random_floats;
using dsinfer::test::Rng;
namespace oc = dsinfer::ops::cuda;
namespace ops = dsinfer::ops;

// Tolerances (normalised L2 over the sampled tokens' outputs). Against the FP8 CPU reference (block sums in double):
// the order of fp32 sums, the tensor cores' FP8 accumulation (narrower than fp32: DeepSeek-V3 reports ~14 bits, which
// is why the block sums are promoted every 128 / 64 k), h's expf, and the h elements whose e4m3 rounding flips with
// the last bits of g and u. Measured on the H200 (2026-12-02, two-term activations, v3 and v4 kernels alike):
// 4.8e-4 .. 9.1e-4 (small cases), 6.4e-4 (Flash shapes); the one-term kernels measured up to 3.3e-3. Bound 1e-2; a
// wrong fragment, swizzle, scale, term or expert gives O(1). Against the exact CPU reference: two e4m3 terms per
// activation (~2^-8 relative each): measured 1.0e-3 .. 1.9e-3 and 9.2e-4 (Flash); bound 1e-2 (5x the worst; one term
// measured 4.4e-2 .. 0.118, so the bound catches a lost second term). Against the bf16 grouped path, whose own
// rounding dominates now: 2.9e-3 .. 5.5e-3 and 2.7e-2 at Flash shapes (expert 3's 2^20 scale spread makes |g| ~2^20
// and amplifies bf16 x's rounding at the clamp edge); bound 0.1.
constexpr double kRefTol = 1e-2;
constexpr double kExactTol = 1e-2;
constexpr double kBf16Tol = 0.1;

struct ExpertSet {
  std::vector<oc::OwnedDeviceWeight> owned;
  DeviceBuffer<const void*> data_ptrs, scale_ptrs;
  oc::DeviceExpertWeights view;
};

uint64_t expert_seed(uint64_t base, int64_t e, int proj) {
  return base * 1000003ull + uint64_t(e) * 7 + uint64_t(proj);
}

// Expert 3's W1 has every other scale group 2^20 above its neighbour (outside the exact range of the expansion).
HostWeight host_weight(int64_t rows, int64_t cols, uint64_t base, int64_t e, int proj, bool deq) {
  HostWeight h = make_host_weight(WeightFormat::FP4_G32, rows, cols, expert_seed(base, e, proj), true, 128, 128, false);
  if (e == 3 && proj == 1)
    for (size_t i = 1; i < h.scale.size(); i += 2) h.scale[i] = uint8_t(h.scale[i] + 20);
  if (deq) {
    h.deq.resize(size_t(rows * cols));
    dsinfer::io::dequant_fp4_e2m1(h.data.data(), rows, cols, h.scale.data(), dsinfer::DType::F8_E8M0, 32, h.deq.data());
  }
  return h;
}

void build_set(ExpertSet& s, int64_t E, int64_t rows, int64_t cols, uint64_t base, int proj) {
  std::vector<const void*> dp, sp;
  for (int64_t e = 0; e < E; ++e) {
    s.owned.push_back(dsinfer::test::upload(host_weight(rows, cols, base, e, proj, false)));
    dp.push_back(s.owned.back().w.data);
    sp.push_back(s.owned.back().w.scale);
  }
  s.data_ptrs = to_device(dp);
  s.scale_ptrs = to_device(sp);
  s.view.fmt = WeightFormat::FP4_G32;
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.data = s.data_ptrs.data();
  s.view.scale = s.scale_ptrs.data();
}

struct Fp8Case {
  int64_t T, E, k, D, I;
  float limit;
  bool shared;       // FP8 shared expert, unclamped (runs through gemm_cuda as on the
                     // other paths)
  bool invalid_ids;  // id -1 / E + 5 in some tokens' last slot
  int64_t ref_tokens;
};

// Ragged routing: expert 0 never, expert 1 exactly once (token T/2, last slot), expert 2 in slot 0 of the first min(T,
// 200) tokens (> 128 rows), expert 3 (wide scale spread) in slot 1 of every third token, the other slots distinct
// experts from [4, E).
void ragged_routing(const Fp8Case& c, uint64_t seed, std::vector<int32_t>& idx, std::vector<float>& wt) {
  Rng r(seed);
  idx.assign(size_t(c.T * c.k), 0);
  wt.assign(idx.size(), 0.0f);
  std::vector<int32_t> pool(size_t(c.E - 4));
  for (int64_t t = 0; t < c.T; ++t) {
    std::iota(pool.begin(), pool.end(), 4);
    for (int64_t j = 0; j < c.k; ++j) {
      const size_t pick = size_t(j) + size_t(r.next() % uint64_t(pool.size() - size_t(j)));
      std::swap(pool[size_t(j)], pool[pick]);
      idx[size_t(t * c.k + j)] = pool[size_t(j)];
      wt[size_t(t * c.k + j)] = 0.1f + r.uniform();
    }
    if (t < 200) idx[size_t(t * c.k)] = 2;
    if (t % 3 == 0 && c.k > 1) idx[size_t(t * c.k + 1)] = 3;
    if (t == c.T / 2)
      idx[size_t(t * c.k + c.k - 1)] = 1;
    else if (c.invalid_ids && t % 5 == 3)
      idx[size_t(t * c.k + c.k - 1)] = (t % 2) ? -1 : int32_t(c.E + 5);
  }
}

std::vector<float> run_moe(const Fp8Case& c, int64_t T, const DeviceBuffer<float>& dx, const DeviceBuffer<int32_t>& di,
                           const DeviceBuffer<float>& dw, const oc::MoeExpertsDevice& ex, const oc::MoeSharedDevice* sh,
                           oc::MoePath path, oc::MoeSharedGemm shared_gemm = {},
                           const char* expect_error = nullptr, const uint16_t* x16 = nullptr) {
  auto dout = to_device(std::vector<float>(size_t(T * c.D), NAN));
  oc::MoeWorkspace ws;
  EXPECT_TRUE(ws.reserve(T, c.k, c.D, c.I, c.E).is_ok());
  ws.set_shared_gemm(std::move(shared_gemm));
  const auto st =
      oc::moe_cuda(dx.data(), T, di.data(), dw.data(), c.k, ex, sh, c.limit, 0.0f, dout.data(), ws, nullptr, path, x16);
  if (expect_error) {
    EXPECT_NE(st.message().find(expect_error), std::string::npos) << st.message();
  } else {
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(size_t(T * c.D));
  EXPECT_EQ(cudaMemcpy(out.data(), dout.data(), out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// The sampled tokens' outputs of the FP8 CPU reference (fp8) and of the exact CPU reference (exact).
void cpu_refs(const Fp8Case& c, uint64_t seed, const std::vector<float>& x, const std::vector<int32_t>& idx,
              const std::vector<float>& wt, const std::vector<int64_t>& toks, const std::vector<HostWeight>& shw,
              std::vector<float>& fp8, std::vector<float>& exact) {
  for (int64_t t : toks) {
    std::vector<double> a8(size_t(c.D), 0.0), ax(size_t(c.D), 0.0);
    const float* xt = x.data() + t * c.D;
    for (int64_t j = 0; j < c.k; ++j) {
      const int32_t e = idx[size_t(t * c.k + j)];
      if (e < 0 || e >= c.E) continue;
      const HostWeight a = host_weight(c.I, c.D, seed, e, 1, true);
      const HostWeight b = host_weight(c.I, c.D, seed, e, 3, true);
      const HostWeight d = host_weight(c.D, c.I, seed, e, 2, true);
      const int64_t bu = dsinfer::ops::moe_detail::kFp8BlockGateUp, bd = dsinfer::ops::moe_detail::kFp8BlockDown;
      const ops::Fp8Weight qa = ops::expand_fp4_weight_ref(a.data.data(), a.scale.data(), c.I, c.D, bu);
      const ops::Fp8Weight qb = ops::expand_fp4_weight_ref(b.data.data(), b.scale.data(), c.I, c.D, bu);
      const ops::Fp8Weight qd = ops::expand_fp4_weight_ref(d.data.data(), d.scale.data(), c.D, c.I, bd);
      const float w = wt[size_t(t * c.k + j)];
      ops::expert_fp8_accumulate_ref({&qa, &qb, &qd, c.limit}, xt, w, a8.data());
      ops::expert_accumulate_ref({a.deq.data(), b.deq.data(), d.deq.data(), c.D, c.I, c.limit}, xt, w, ax.data());
    }
    if (c.shared) {
      ops::ExpertParams sp{shw[0].deq.data(), shw[1].deq.data(), shw[2].deq.data(), c.D, c.I, 0.0f};
      ops::expert_accumulate_ref(sp, xt, 1.0f, a8.data());
      ops::expert_accumulate_ref(sp, xt, 1.0f, ax.data());
    }
    for (int64_t d = 0; d < c.D; ++d) {
      fp8.push_back(float(a8[size_t(d)]));
      exact.push_back(float(ax[size_t(d)]));
    }
  }
}

void check_fp8(const Fp8Case& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k << " D=" << c.D << " I=" << c.I
                                  << " limit=" << c.limit << " shared=" << c.shared);
  ASSERT_GE(c.E, c.k + 4);
  ExpertSet w1, w3, w2;
  build_set(w1, c.E, c.I, c.D, seed, 1);
  build_set(w3, c.E, c.I, c.D, seed, 3);
  build_set(w2, c.E, c.D, c.I, seed, 2);
  oc::MoeExpertsDevice ex{c.E, c.D, c.I, w1.view, w3.view, w2.view};
  ASSERT_TRUE(oc::moe_fast_supported(ex));
  std::vector<HostWeight> shw;
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  oc::MoeSharedDevice sh;
  if (c.shared) {
    shw.push_back(make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 11));
    shw.push_back(make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 13));
    shw.push_back(make_host_weight(WeightFormat::FP8_BLOCK, c.D, c.I, seed + 12));
    for (const HostWeight& h : shw) sh_owned.push_back(dsinfer::test::upload(h));
    sh = {sh_owned[0].w, sh_owned[1].w, sh_owned[2].w};
  }
  std::vector<int32_t> idx;
  std::vector<float> wt;
  ragged_routing(c, seed + 5, idx, wt);
  const std::vector<float> x = random_floats(size_t(c.T * c.D), seed + 6);
  auto dx = to_device(x);
  auto di = to_device(idx);
  auto dwt = to_device(wt);
  const oc::MoeSharedDevice* shp = c.shared ? &sh : nullptr;

  const std::vector<float> out = run_moe(c, c.T, dx, di, dwt, ex, shp, oc::MoePath::GroupedFp8);
  for (float v : out) ASSERT_TRUE(std::isfinite(v)) << "unwritten / NaN output";
  const std::vector<float> again = run_moe(c, c.T, dx, di, dwt, ex, shp, oc::MoePath::GroupedFp8);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * 4), 0) << "FP8 path not bitwise deterministic";
  if (!c.shared) {
    const int64_t half = c.T / 2;
    const std::vector<float> part = run_moe(c, half, dx, di, dwt, ex, shp, oc::MoePath::GroupedFp8);
    EXPECT_EQ(std::memcmp(part.data(), out.data(), part.size() * 4), 0) << "a row depends on the other rows";
  }
  const std::vector<float> bf16 = run_moe(c, c.T, dx, di, dwt, ex, shp, oc::MoePath::Grouped);
  const double eb = normalized_error(out, bf16);
  EXPECT_LT(eb, kBf16Tol) << "vs the bf16 grouped path: " << eb;

  std::vector<int64_t> toks = {0, c.T / 2, c.T - 1};
  for (int64_t i = 1; i + 3 <= c.ref_tokens; ++i) toks.push_back(i * (c.T - 1) / (c.ref_tokens - 2));
  std::vector<float> got, fp8, exact;
  for (int64_t t : toks) got.insert(got.end(), out.begin() + t * c.D, out.begin() + (t + 1) * c.D);
  cpu_refs(c, seed, x, idx, wt, toks, shw, fp8, exact);
  const double er = normalized_error(got, fp8), ex8 = normalized_error(fp8, exact), eg = normalized_error(got, exact);
  std::printf(
      "[fp8 moe] T=%lld D=%lld I=%lld: vs FP8 CPU ref %.3g, vs exact "
      "CPU ref %.3g (FP8 ref vs exact %.3g), "
      "vs bf16 grouped %.3g\n",
      (long long)c.T, (long long)c.D, (long long)c.I, er, eg, ex8, eb);
  EXPECT_LT(er, kRefTol) << "vs the FP8 CPU reference: " << er;
  EXPECT_LT(eg, kExactTol) << "vs the exact CPU reference: " << eg;
}

TEST(MoeGroupedFp8Gpu, SmallRagged) {
  DSI_SKIP_WITHOUT_GPU();
  // K = 256 (2 stages) with a clamp that bites; K = 128 (1 stage < ring) with invalid ids; K = 384 / 640 (3, 5 stages:
  // the ring wraps), a shared expert.
  check_fp8({300, 8, 2, 256, 384, 0.05f, false, false, 12}, 1);
  check_fp8({37, 8, 3, 128, 128, 0.0f, false, true, 12}, 2);
  check_fp8({260, 12, 4, 384, 640, 0.0f, true, true, 12}, 3);
}

// V4-Flash expert shapes (D 4096, I 2048, top-6, swiglu limit 10) with 32 experts: ~130 rows per expert.
TEST(MoeGroupedFp8Gpu, FlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  check_fp8({700, 32, 6, 4096, 2048, 10.0f, false, true, 3}, 11);
}

// The shared expert through the caller's projection GEMM (MoeWorkspace::set_shared_gemm; the runner passes its own):
// on the fast path's prefill (T > kMoeGroupedMinT) moe_cuda calls it for the shared expert's three GEMMs, in line.
// Given gemm_cuda at the precision moe_cuda would pick itself, the output is bitwise the one without it (the SwiGLU
// and the combine are unchanged); at decode sizes it is not called; its error ends the call with that error. x's
// bf16 copy given to moe_cuda reaches the hook for gate and up (the same pointer); down gets the SwiGLU's output
// rounded to bf16 (session 38), checked against its fp32 x here.
TEST(MoeGroupedFp8Gpu, SharedExpertThroughTheCallersGemm) {
  DSI_SKIP_WITHOUT_GPU();
  const Fp8Case c{oc::kMoeGroupedMinT + 76, 12, 4, 256, 384, 0.0f, true, true, 0};
  const uint64_t seed = 21;
  ExpertSet w1, w3, w2;
  build_set(w1, c.E, c.I, c.D, seed, 1);
  build_set(w3, c.E, c.I, c.D, seed, 3);
  build_set(w2, c.E, c.D, c.I, seed, 2);
  const oc::MoeExpertsDevice ex{c.E, c.D, c.I, w1.view, w3.view, w2.view};
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  sh_owned.push_back(dsinfer::test::upload(make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 11)));
  sh_owned.push_back(dsinfer::test::upload(make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 13)));
  sh_owned.push_back(dsinfer::test::upload(make_host_weight(WeightFormat::FP8_BLOCK, c.D, c.I, seed + 12)));
  const oc::MoeSharedDevice sh{sh_owned[0].w, sh_owned[1].w, sh_owned[2].w};
  std::vector<int32_t> idx;
  std::vector<float> wt;
  ragged_routing(c, seed + 5, idx, wt);
  const std::vector<float> x = random_floats(size_t(c.T * c.D), seed + 6);
  auto dx = to_device(x);
  auto di = to_device(idx);
  auto dwt = to_device(wt);
  int calls = 0;
  int64_t down_bad = -1;  // down's x16 against the bf16 rounding of its x
  std::vector<const uint16_t*> seen;
  const oc::MoeSharedGemm own = [&](const float* x, const uint16_t* x16, int64_t M, int64_t K,
                                    const oc::DeviceWeight& w, float* y, int64_t N) {
    ++calls;
    seen.push_back(K == c.I ? nullptr : x16);
    if (K == c.I && x16) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> hx(size_t(M * K));
      std::vector<uint16_t> h16(hx.size());
      EXPECT_EQ(cudaMemcpy(hx.data(), x, hx.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(h16.data(), x16, h16.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      down_bad = 0;
      for (size_t i = 0; i < hx.size(); ++i) down_bad += h16[i] != dsinfer::f32_to_bf16(hx[i]);
    }
    return oc::gemm_cuda(x, M, K, w, y, N, false, nullptr, oc::moe_shared_precision(oc::MoePath::Fast, M, N));
  };
  const std::vector<float> plain = run_moe(c, c.T, dx, di, dwt, ex, &sh, oc::MoePath::Fast);
  const std::vector<float> hooked = run_moe(c, c.T, dx, di, dwt, ex, &sh, oc::MoePath::Fast, own);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(seen, (std::vector<const uint16_t*>{nullptr, nullptr, nullptr}));
  EXPECT_EQ(down_bad, 0) << "down's x16 is not its x rounded to bf16 (-1: not given)";
  for (float v : hooked) ASSERT_TRUE(std::isfinite(v)) << "unwritten / NaN output";
  EXPECT_EQ(std::memcmp(plain.data(), hooked.data(), plain.size() * 4), 0) << "the combine changed with the hook";
  std::vector<uint16_t> x16(x.size());  // x's bf16 rounding, as the runner's y16 (the RS gather may read it)
  for (size_t i = 0; i < x.size(); ++i) x16[i] = dsinfer::f32_to_bf16(x[i]);
  auto dx16 = to_device(x16);
  calls = 0;
  seen.clear();
  const std::vector<float> with16 = run_moe(c, c.T, dx, di, dwt, ex, &sh, oc::MoePath::Fast, own, nullptr, dx16.data());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(seen, (std::vector<const uint16_t*>{dx16.data(), dx16.data(), nullptr}));
  EXPECT_EQ(std::memcmp(plain.data(), with16.data(), plain.size() * 4), 0) << "x16 changed the hooked call";
  calls = 0;
  (void)run_moe(c, oc::kMoeGroupedMinT, dx, di, dwt, ex, &sh, oc::MoePath::Fast, own);
  EXPECT_EQ(calls, 0) << "decode sizes keep gemm_cuda on the side stream";
  const oc::MoeSharedGemm failing = [](const float*, const uint16_t*, int64_t, int64_t, const oc::DeviceWeight&,
                                       float*, int64_t) {
    return dsinfer::Status::error("shared projection refused");
  };
  (void)run_moe(c, c.T, dx, di, dwt, ex, &sh, oc::MoePath::Fast, failing, "shared projection refused");
}

// ---- The CUTLASS grouped FP8 GEMMs (MoePath::CutlassFp8) on FP8_BLOCK experts ----
// Against the FP8 CPU reference with one e4m3 term for x and h and 128-k blocks (expert_fp8_accumulate_ref with the
// weights' own codes and their 128 x 128 block scale per row; g, u and y rounded to bf16 as the GEMMs write them since
// session 14): the order of fp32 sums and the tensor cores' FP8 accumulation inside a 128-k block (which flip bf16
// roundings of g, u, y, and through g and u the e4m3 rounding of h: up to 2^-4 relative each), expf. Measured on the
// H200 (bench/NOTES.md session 14, bf16 outputs): 3.64e-3 / 5.07e-3 / 8.52e-3 in SmallRagged's cases, 6.62e-3 in
// FlashShapes (session 13, fp32 outputs: 4.3e-4). Bound 1e-2, kept: only 1.2x over the worst case (docs/decisions.md
// 2026-12-03, session 14); a wrong tile, scale layout, group pointer or expert gives O(1). The plan's cluster shapes
// (moe_cutlass_cluster_n: 1 x 2 where N / 256 is whole): the first SmallRagged case's down GEMM (N 256) and both of
// FlashShapes' GEMMs take 1 x 2, every other GEMM here 1 x 1; the bench checks the two give the same bits.
// Against the exact path (fp32 x, dequantized weights): one-term activations (~2^-5 relative each): measured 4.3e-2 ..
// 5.0e-2 (CPU reference) and 4.3e-2 .. 5.4e-2 (exact GPU path, all tokens) in sessions 13 and 14, 4.3e-2 in the bench
// at Flash shapes; bound 0.25 (~5x).
constexpr double kCutlassRefTol = 1e-2;
constexpr double kCutlassExactTol = 0.25;

// An FP8_BLOCK expert weight: random e4m3 codes with the top exponent bit clear (|v| <= 1.875, every sign, binade
// and subnormal; never NaN), 8 codes per random draw (the Flash case makes 96 of 8.4 M codes); block scales E8M0
// 2^-10 .. 2^-5 or fp32 in [0.001, 0.011); with deq, the fp32 dequantization (io::dequant_fp8_block, the format's
// spec).
HostWeight fp8_weight(int64_t rows, int64_t cols, uint64_t base, int64_t e, int proj, bool e8m0, bool deq) {
  HostWeight w{WeightFormat::FP8_BLOCK, rows, cols, e8m0, 128, 128, {}, {}, {}};
  Rng r(expert_seed(base, e, proj));
  w.data.resize(size_t(rows * cols));
  for (size_t i = 0; i < w.data.size(); i += 8) {
    const uint64_t v = r.next() & 0xBFBFBFBFBFBFBFBFull;
    std::memcpy(w.data.data() + i, &v, std::min<size_t>(8, w.data.size() - i));
  }
  const size_t blocks = size_t(((rows + 127) / 128) * ((cols + 127) / 128));
  w.scale.resize(blocks * (e8m0 ? 1 : 4));
  for (size_t i = 0; i < blocks; ++i) {
    if (e8m0) {
      w.scale[i] = uint8_t(127 - 10 + int(r.next() % 6));
    } else {
      const float f = 0.001f + 0.01f * r.uniform();
      std::memcpy(w.scale.data() + 4 * i, &f, 4);
    }
  }
  if (!deq) return w;
  w.deq.resize(size_t(rows * cols));
  dsinfer::io::dequant_fp8_block(w.data.data(), rows, cols, w.scale.data(),
                                 e8m0 ? dsinfer::DType::F8_E8M0 : dsinfer::DType::F32, 128, 128, w.deq.data());
  return w;
}

void build_fp8_set(ExpertSet& s, int64_t E, int64_t rows, int64_t cols, uint64_t base, int proj, bool e8m0) {
  std::vector<const void*> dp, sp;
  for (int64_t e = 0; e < E; ++e) {
    s.owned.push_back(dsinfer::test::upload(fp8_weight(rows, cols, base, e, proj, e8m0, false)));
    dp.push_back(s.owned.back().w.data);
    sp.push_back(s.owned.back().w.scale);
  }
  s.data_ptrs = to_device(dp);
  s.scale_ptrs = to_device(sp);
  s.view.fmt = WeightFormat::FP8_BLOCK;
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.scale_e8m0 = e8m0;
  s.view.block_n = 128;
  s.view.block_k = 128;
  s.view.data = s.data_ptrs.data();
  s.view.scale = s.scale_ptrs.data();
}

// The FP8 reference's view of an FP8_BLOCK weight: its codes, and the fp32 scale of block (r / 128, kb) per row r.
ops::Fp8Weight fp8_ref_weight(const HostWeight& h) {
  ops::Fp8Weight w;
  w.rows = h.rows;
  w.cols = h.cols;
  w.block = 128;
  w.q = h.data;
  const int64_t kbs = h.cols / 128;
  w.s.resize(size_t(h.rows * kbs));
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t b = 0; b < kbs; ++b) {
      const size_t at = size_t((r / 128) * kbs + b);
      float f = 0.0f;
      if (h.e8m0) f = std::ldexp(1.0f, int(h.scale[at]) - 127);
      else std::memcpy(&f, h.scale.data() + 4 * at, 4);
      w.s[size_t(r * kbs + b)] = f;
    }
  return w;
}

void check_cutlass(const Fp8Case& c, uint64_t seed, bool e8m0) {
  SCOPED_TRACE(testing::Message() << "CUTLASS T=" << c.T << " E=" << c.E << " k=" << c.k << " D=" << c.D
                                  << " I=" << c.I << " limit=" << c.limit << " e8m0=" << e8m0);
  ASSERT_GE(c.E, c.k + 4);
  ExpertSet w1, w3, w2;
  build_fp8_set(w1, c.E, c.I, c.D, seed, 1, e8m0);
  build_fp8_set(w3, c.E, c.I, c.D, seed, 3, e8m0);
  build_fp8_set(w2, c.E, c.D, c.I, seed, 2, e8m0);
  oc::MoeExpertsDevice ex{c.E, c.D, c.I, w1.view, w3.view, w2.view};
  ASSERT_TRUE(oc::moe_cutlass_supported(ex));
  ASSERT_FALSE(oc::moe_fast_supported(ex));
  std::vector<int32_t> idx;
  std::vector<float> wt;
  ragged_routing(c, seed + 5, idx, wt);
  const std::vector<float> x = random_floats(size_t(c.T * c.D), seed + 6);
  auto dx = to_device(x);
  auto di = to_device(idx);
  auto dwt = to_device(wt);

  const std::vector<float> out = run_moe(c, c.T, dx, di, dwt, ex, nullptr, oc::MoePath::CutlassFp8);
  for (float v : out) ASSERT_TRUE(std::isfinite(v)) << "unwritten / NaN output";
  const std::vector<float> again = run_moe(c, c.T, dx, di, dwt, ex, nullptr, oc::MoePath::CutlassFp8);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * 4), 0) << "CUTLASS path not bitwise deterministic";
  const std::vector<float> part = run_moe(c, c.T / 2, dx, di, dwt, ex, nullptr, oc::MoePath::CutlassFp8);
  EXPECT_EQ(std::memcmp(part.data(), out.data(), part.size() * 4), 0) << "a row depends on the other rows";
  const std::vector<float> exact_gpu = run_moe(c, c.T, dx, di, dwt, ex, nullptr, oc::MoePath::Exact);
  const double eg_all = normalized_error(out, exact_gpu);
  EXPECT_LT(eg_all, kCutlassExactTol) << "vs the exact GPU path: " << eg_all;

  std::vector<int64_t> toks = {0, c.T / 2, c.T - 1};
  for (int64_t i = 1; i + 3 <= c.ref_tokens; ++i) toks.push_back(i * (c.T - 1) / (c.ref_tokens - 2));
  std::vector<float> got, fp8, exact;
  for (int64_t t : toks) {
    got.insert(got.end(), out.begin() + t * c.D, out.begin() + (t + 1) * c.D);
    std::vector<double> a8(size_t(c.D), 0.0), ax(size_t(c.D), 0.0);
    const float* xt = x.data() + t * c.D;
    for (int64_t j = 0; j < c.k; ++j) {
      const int32_t e = idx[size_t(t * c.k + j)];
      if (e < 0 || e >= c.E) continue;
      const HostWeight a = fp8_weight(c.I, c.D, seed, e, 1, e8m0, true);
      const HostWeight b = fp8_weight(c.I, c.D, seed, e, 3, e8m0, true);
      const HostWeight d = fp8_weight(c.D, c.I, seed, e, 2, e8m0, true);
      const ops::Fp8Weight qa = fp8_ref_weight(a), qb = fp8_ref_weight(b), qd = fp8_ref_weight(d);
      const float w = wt[size_t(t * c.k + j)];
      ops::expert_fp8_accumulate_ref({&qa, &qb, &qd, c.limit, 1, 1, true}, xt, w, a8.data());
      ops::expert_accumulate_ref({a.deq.data(), b.deq.data(), d.deq.data(), c.D, c.I, c.limit}, xt, w, ax.data());
    }
    for (int64_t dd = 0; dd < c.D; ++dd) {
      fp8.push_back(float(a8[size_t(dd)]));
      exact.push_back(float(ax[size_t(dd)]));
    }
  }
  const double er = normalized_error(got, fp8), eg = normalized_error(got, exact);
  std::printf("[cutlass moe] T=%lld D=%lld I=%lld e8m0=%d: vs FP8 CPU ref %.3g, vs exact CPU ref %.3g, vs exact GPU "
              "path (all tokens) %.3g\n",
              (long long)c.T, (long long)c.D, (long long)c.I, int(e8m0), er, eg, eg_all);
  EXPECT_LT(er, kCutlassRefTol) << "vs the FP8 CPU reference: " << er;
  EXPECT_LT(eg, kCutlassExactTol) << "vs the exact CPU reference: " << eg;
}

TEST(MoeCutlassFp8Gpu, SmallRagged) {
  DSI_SKIP_WITHOUT_GPU();
  // K = 256 / 128 (one 128-k block) with a clamp that bites and invalid ids; K = 640 with fp32 weight scales; partial
  // 128-row tiles, an empty expert, a one-row expert, an expert over 128 rows.
  check_cutlass({300, 8, 2, 256, 128, 0.05f, false, false, 12}, 21, true);
  check_cutlass({37, 8, 3, 128, 128, 0.0f, false, true, 12}, 22, true);
  check_cutlass({260, 12, 4, 640, 384, 0.0f, false, true, 12}, 23, false);
}

// V4-Flash expert shapes (D 4096, I 2048, top-6, swiglu limit 10) with 32 experts: ~130 rows per expert.
TEST(MoeCutlassFp8Gpu, FlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  check_cutlass({700, 32, 6, 4096, 2048, 10.0f, false, true, 3}, 31, true);
}

}  // namespace
