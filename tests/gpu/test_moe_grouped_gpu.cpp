// GPU parity of the grouped (prefill) MoE GEMMs (moe_grouped.cu, MoePath::Grouped; moe_grouped_rs.cu,
// MoePath::GroupedRs and MoePath::Fast above kMoeGroupedMinT, also bitwise against Grouped) against the CPU
// reference (expert_accumulate_ref on io::dequant_fp4_e2m1 weights) on sampled tokens and against the exact path on
// all tokens, with ragged expert groups: an empty expert, a one-row expert, an expert with > 128 rows (several CTA
// row tiles, the last partial), invalid ids; K of one 128-k stage (fewer stages than the ring) and of 32. Also:
// bitwise determinism (two runs) and row independence (the first half of the tokens alone gives bitwise the same
// rows), and the fall-back of non-FP4 experts to the exact path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/dtypes.h"
#include "core/small_float.h"
#include "cuda/gpu_test_util.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_launch.h"
#include "ops/moe/moe_launch.h"
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

// Tolerance (normalised L2) against the CPU reference: as the decode fast path (test_moe_gpu.cpp kFastTol), the
// only rounding is x and h = SwiGLU(...) to bf16 (relative RMS 2^-9/sqrt(3) = 1.1e-3 each, weights exact, fp32
// sums): h inherits x's error through W1/W3 (~1.1e-3, independent of K for random signs) and adds its own, silu'
// <= 1.1 -> ~2e-3; W2 keeps the relative size: expected 2-3e-3 (the decode path measured 2.4-4.3e-3 on the H200).
// 1e-2 leaves margin for the small-K cases (few terms) and the tight clamp. Against the exact path (tiled bf16
// GEMMs that round the same x and h): both within ~3e-3 of the reference, so 1e-2 as well.
constexpr double kTol = 1e-2;
// MoePath::GroupedRs against MoePath::Grouped: the same bf16 roundings of x and h, the same exact weights and the
// same k order (16-k steps in chunk-layout order, each summed by the tensor core into fp32): measured bitwise equal
// on the H200 (session 18: these cases, and yp of 24,576 / 49,152 rows at V4-Flash shapes in dsinfer_moe_bench
// prefill). The test asks for the same bits, so a change of either kernel's k order shows here.

struct ExpertSet {
  std::vector<oc::OwnedDeviceWeight> owned;
  DeviceBuffer<const void*> data_ptrs, scale_ptrs;
  oc::DeviceExpertWeights view;
};

uint64_t expert_seed(uint64_t base, int64_t e, int proj) { return base * 1000003ull + uint64_t(e) * 7 + uint64_t(proj); }

void build_set(ExpertSet& s, WeightFormat f, int64_t E, int64_t rows, int64_t cols, uint64_t base, int proj) {
  std::vector<const void*> dp, sp;
  for (int64_t e = 0; e < E; ++e) {
    HostWeight h = make_host_weight(f, rows, cols, expert_seed(base, e, proj), true, 128, 128, false);
    s.owned.push_back(dsinfer::test::upload(h));
    dp.push_back(s.owned.back().w.data), sp.push_back(s.owned.back().w.scale);
  }
  s.data_ptrs = to_device(dp);
  s.view.fmt = f;
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.data = s.data_ptrs.data();
  if (f == WeightFormat::FP8_BLOCK || f == WeightFormat::FP4_G32) {
    s.scale_ptrs = to_device(sp);
    s.view.scale = s.scale_ptrs.data();
  }
}

struct GroupedCase {
  int64_t T, E, k, D, I;
  float limit;
  bool shared;        // FP8 shared expert, unclamped
  bool invalid_ids;   // id -1 / E + 5 in some tokens' last slot
  oc::MoePath path;   // Grouped, or Fast with T > kMoeGroupedMinT
  int64_t ref_tokens;
  bool stairs = false;  // slot 0 by stairs_expert (every RS wgmma N), not expert 2's 200 rows
};

// Slot 0 of token t under GroupedCase::stairs: experts 3 .. 10 take 16 i + 13 consecutive tokens (i = 0 .. 7: one row
// tile each, of 13, 29, ..., 125 rows: wgmma N 16 .. 128 in the RS kernels), expert 11 135 (a full tile and one of 7
// rows), expert 2 the rest (two full tiles and more at T = 1,000).
int32_t stairs_expert(int64_t t) {
  int64_t start = 0;
  for (int i = 0; i < 8; ++i) {
    start += 16 * i + 13;
    if (t < start) return 3 + i;
  }
  return t < start + 135 ? 11 : 2;
}

// Ragged routing: expert 0 never, expert 1 exactly once (token T/2, last slot), expert 2 in slot 0 of the first
// min(T, 200) tokens (> 128 rows; or slot 0 by stairs_expert), the other slots distinct experts from [3, E).
void ragged_routing(const GroupedCase& c, uint64_t seed, std::vector<int32_t>& idx, std::vector<float>& wt) {
  Rng r(seed);
  idx.assign(size_t(c.T * c.k), 0), wt.assign(idx.size(), 0.0f);
  std::vector<int32_t> pool(size_t(c.E - 3));
  for (int64_t t = 0; t < c.T; ++t) {
    std::iota(pool.begin(), pool.end(), 3);
    for (int64_t j = 0; j < c.k; ++j) {
      const size_t pick = size_t(j) + size_t(r.next() % uint64_t(pool.size() - size_t(j)));
      std::swap(pool[size_t(j)], pool[pick]);
      idx[size_t(t * c.k + j)] = pool[size_t(j)];
      wt[size_t(t * c.k + j)] = 0.1f + r.uniform();
    }
    if (c.stairs) {
      const int32_t e = stairs_expert(t);
      for (int64_t j = 1; j < c.k; ++j)
        if (idx[size_t(t * c.k + j)] == e) idx[size_t(t * c.k + j)] = idx[size_t(t * c.k)];  // keep them distinct
      idx[size_t(t * c.k)] = e;
    } else if (t < 200) {
      idx[size_t(t * c.k)] = 2;
    }
    if (t == c.T / 2) idx[size_t(t * c.k + c.k - 1)] = 1;
    else if (c.invalid_ids && t % 5 == 3) idx[size_t(t * c.k + c.k - 1)] = (t % 2) ? -1 : int32_t(c.E + 5);
  }
}

std::vector<float> run_moe(const GroupedCase& c, int64_t T, const DeviceBuffer<float>& dx,
                           const DeviceBuffer<int32_t>& di, const DeviceBuffer<float>& dw, const oc::MoeExpertsDevice& ex,
                           const oc::MoeSharedDevice* sh, oc::MoePath path) {
  auto dout = to_device(std::vector<float>(size_t(T * c.D), NAN));
  oc::MoeWorkspace ws;
  EXPECT_TRUE(ws.reserve(T, c.k, c.D, c.I, c.E).is_ok());
  const auto st = oc::moe_cuda(dx.data(), T, di.data(), dw.data(), c.k, ex, sh, c.limit, 0.0f, dout.data(), ws,
                               nullptr, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(size_t(T * c.D));
  EXPECT_EQ(cudaMemcpy(out.data(), dout.data(), out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void check_grouped(const GroupedCase& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k << " D=" << c.D << " I=" << c.I
                                  << " limit=" << c.limit << " shared=" << c.shared);
  ASSERT_GE(c.E, c.k + 3);
  ExpertSet w1, w3, w2;
  build_set(w1, WeightFormat::FP4_G32, c.E, c.I, c.D, seed, 1);
  build_set(w3, WeightFormat::FP4_G32, c.E, c.I, c.D, seed, 3);
  build_set(w2, WeightFormat::FP4_G32, c.E, c.D, c.I, seed, 2);
  oc::MoeExpertsDevice ex{c.E, c.D, c.I, w1.view, w3.view, w2.view};
  ASSERT_TRUE(oc::moe_fast_supported(ex));
  HostWeight s1, s3, s2;
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  oc::MoeSharedDevice sh;
  if (c.shared) {
    s1 = make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 11);
    s3 = make_host_weight(WeightFormat::FP8_BLOCK, c.I, c.D, seed + 13);
    s2 = make_host_weight(WeightFormat::FP8_BLOCK, c.D, c.I, seed + 12);
    for (const HostWeight* h : {&s1, &s3, &s2}) sh_owned.push_back(dsinfer::test::upload(*h));
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

  const std::vector<float> out = run_moe(c, c.T, dx, di, dwt, ex, shp, c.path);
  for (float v : out) ASSERT_TRUE(std::isfinite(v)) << "unwritten / NaN output";
  const std::vector<float> again = run_moe(c, c.T, dx, di, dwt, ex, shp, c.path);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * 4), 0) << "grouped path not bitwise deterministic";
  if (!c.shared && (c.path == oc::MoePath::Grouped || c.path == oc::MoePath::GroupedRs)) {
    // Row independence: the first half of the tokens alone (other row tiles, other tile positions) -> same bits.
    const int64_t half = c.T / 2;
    const std::vector<float> part = run_moe(c, half, dx, di, dwt, ex, shp, c.path);
    EXPECT_EQ(std::memcmp(part.data(), out.data(), part.size() * 4), 0) << "a row depends on the other rows";
  }
  if (c.path == oc::MoePath::GroupedRs) {
    const std::vector<float> grouped = run_moe(c, c.T, dx, di, dwt, ex, shp, oc::MoePath::Grouped);
    EXPECT_EQ(std::memcmp(out.data(), grouped.data(), out.size() * 4), 0)
        << "not the bf16 grouped path's bits; normalized error " << normalized_error(out, grouped);
  }
  const std::vector<float> exact = run_moe(c, c.T, dx, di, dwt, ex, shp, oc::MoePath::Exact);
  const double ee = normalized_error(out, exact);
  EXPECT_LT(ee, kTol) << "vs the exact path: " << ee;

  // CPU reference: tokens 0 (expert 2), T/2 (the one-row expert 1), the last, and evenly spaced others
  std::vector<int64_t> toks = {0, c.T / 2, c.T - 1};
  for (int64_t i = 1; i + 3 <= c.ref_tokens; ++i) toks.push_back(i * (c.T - 1) / (c.ref_tokens - 2));
  std::vector<float> got, ref;
  for (int64_t t : toks) {
    std::vector<double> acc(size_t(c.D), 0.0);
    const float* xt = x.data() + t * c.D;
    for (int64_t j = 0; j < c.k; ++j) {
      const int32_t e = idx[size_t(t * c.k + j)];
      if (e < 0 || e >= c.E) continue;
      HostWeight a = make_host_weight(WeightFormat::FP4_G32, c.I, c.D, expert_seed(seed, e, 1));
      HostWeight b = make_host_weight(WeightFormat::FP4_G32, c.I, c.D, expert_seed(seed, e, 3));
      HostWeight d = make_host_weight(WeightFormat::FP4_G32, c.D, c.I, expert_seed(seed, e, 2));
      dsinfer::ops::expert_accumulate_ref({a.deq.data(), b.deq.data(), d.deq.data(), c.D, c.I, c.limit}, xt,
                                          wt[size_t(t * c.k + j)], acc.data());
    }
    if (c.shared)
      dsinfer::ops::expert_accumulate_ref({s1.deq.data(), s3.deq.data(), s2.deq.data(), c.D, c.I, 0.0f}, xt, 1.0f,
                                          acc.data());
    for (int64_t d = 0; d < c.D; ++d) ref.push_back(float(acc[size_t(d)])), got.push_back(out[size_t(t * c.D + d)]);
  }
  const double err = normalized_error(got, ref);
  EXPECT_LT(err, kTol) << "vs the CPU reference: " << err;
}

TEST(MoeGroupedGpu, SmallRagged) {
  DSI_SKIP_WITHOUT_GPU();
  // K = 256 (2 stages) with a clamp that bites; K = 128 (1 stage < ring) with invalid ids; K = 384 / 640 (3, 5
  // stages: the ring wraps), a shared expert.
  check_grouped({300, 8, 2, 256, 384, 0.05f, false, false, oc::MoePath::Grouped, 12}, 1);
  check_grouped({37, 8, 3, 128, 128, 0.0f, false, true, oc::MoePath::Grouped, 12}, 2);
  check_grouped({260, 12, 4, 384, 640, 0.0f, true, true, oc::MoePath::Grouped, 12}, 3);
}

// V4-Flash expert shapes (D 4096, I 2048, top-6, swiglu limit 10) with 32 experts (host memory and test time), T
// above kMoeGroupedMinT through MoePath::Fast: ~290 rows per expert (3 row tiles), expert 2 with ~470. Since session
// 18 MoePath::Fast runs the RS kernels there (moe_grouped_rs.cu: the bf16 grouped path's numerics).
TEST(MoeGroupedGpu, FlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped({1536, 32, 6, 4096, 2048, 10.0f, false, true, oc::MoePath::Fast, 4}, 10);
  check_grouped({700, 32, 6, 4096, 2048, 10.0f, false, false, oc::MoePath::Grouped, 3}, 11);
}

// The RS kernels (moe_grouped_rs.cu, MoePath::GroupedRs) on the ragged cases (K of 1, 2, 3 and 5 stages; a tile's
// wgmma N is its rows rounded up to 16) and at V4-Flash shapes (~290 rows per expert: full and partial row
// tiles), against the CPU reference, the exact path and the bf16 grouped path.
TEST(MoeGroupedGpu, RsRagged) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped({300, 8, 2, 256, 384, 0.05f, false, false, oc::MoePath::GroupedRs, 12}, 1);
  check_grouped({37, 8, 3, 128, 128, 0.0f, false, true, oc::MoePath::GroupedRs, 12}, 2);
  check_grouped({260, 12, 4, 384, 640, 0.0f, true, true, oc::MoePath::GroupedRs, 12}, 3);
}
// Every wgmma N of the RS kernels (a row tile of 13, 29, ..., 125 rows, and 7: N = 16 .. 128 by 16) with 4 consumer
// warpgroups in both kernels (D 256, I 384) and with 2 in the down kernel (D 128), slot 1 random (k = 2).
TEST(MoeGroupedGpu, RsEveryWgmmaN) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped({1000, 12, 1, 256, 384, 0.0f, false, false, oc::MoePath::GroupedRs, 12, true}, 4);
  check_grouped({1000, 12, 2, 128, 256, 0.05f, false, true, oc::MoePath::GroupedRs, 12, true}, 5);
}
TEST(MoeGroupedGpu, RsFlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  check_grouped({1536, 32, 6, 4096, 2048, 10.0f, false, true, oc::MoePath::GroupedRs, 4}, 10);
}

// Runs the RS kernels directly (count, scatter, tile list, x prep, gate/up, down) on c's routing and checks that
// variants give bitwise the h and yp of the plan's launch as session 23 compiled it (kMoeGroupedRsFineN,
// kMoeGroupedRsEarlyNext, kMoeGroupedRsItemSwitch, MoeGroupedRsVariant::kSession23; its bits are the ones checked
// against the CPU reference by the tests above): kWordStageItem (the default) on the plan's launch, and with
// timing_combos every fine_n x early_next x item_switch combination of session 23's code.
void check_rs_variants_same_bits(const GroupedCase& c, int cwg, uint64_t seed, bool timing_combos) {
  SCOPED_TRACE(testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k << " D=" << c.D << " I=" << c.I
                                  << " cwg=" << cwg);
  using V = oc::MoeGroupedRsVariant;
  ExpertSet w1, w3, w2;
  build_set(w1, WeightFormat::FP4_G32, c.E, c.I, c.D, seed, 1);
  build_set(w3, WeightFormat::FP4_G32, c.E, c.I, c.D, seed, 3);
  build_set(w2, WeightFormat::FP4_G32, c.E, c.D, c.I, seed, 2);
  std::vector<int32_t> idx;
  std::vector<float> wt;
  ragged_routing(c, seed + 1, idx, wt);
  const int64_t n = c.T * c.k, max_tiles = dsinfer::ops::moe_detail::grp_max_tiles(n, c.E);
  const std::vector<float> hx = random_floats(size_t(c.T * c.D), seed + 2);
  auto dx = to_device(hx);
  auto di = to_device(idx);
  auto offsets = to_device(std::vector<int32_t>(size_t(c.E + 1), 0));
  auto pos = to_device(std::vector<int32_t>(size_t(n), 0));
  auto perm = to_device(std::vector<int32_t>(size_t(n), 0));
  auto tiles = to_device(std::vector<int32_t>(size_t(1 + 2 * max_tiles), 0));
  auto xb = to_device(std::vector<uint16_t>(size_t(n * c.D), 0));
  oc::detail::launch_moe_count(di.data(), n, c.E, offsets.data(), pos.data(), nullptr, nullptr);
  oc::detail::launch_moe_scatter(di.data(), n, c.k, c.E, offsets.data(), perm.data(), pos.data(), nullptr);
  oc::detail::launch_moe_tile_list(offsets.data(), c.E, tiles.data(), nullptr);
  oc::detail::launch_moe_grouped_xp(dx.data(), nullptr, pos.data(), c.T, c.k, c.D, xb.data(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  {  // the gather from x's bf16 copy (the runner's y16) writes the same rows
    std::vector<uint16_t> x16(hx.size());
    for (size_t i = 0; i < hx.size(); ++i) x16[i] = dsinfer::f32_to_bf16(hx[i]);
    auto dx16 = to_device(x16);
    auto xb16 = to_device(std::vector<uint16_t>(size_t(n * c.D), 0));  // rows past the valid ones stay 0 in both
    oc::detail::launch_moe_grouped_xp(nullptr, dx16.data(), pos.data(), c.T, c.k, c.D, xb16.data(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(dsinfer::cuda::test::to_host(xb16, size_t(n * c.D)), dsinfer::cuda::test::to_host(xb, size_t(n * c.D)))
        << "xp gathered from the bf16 copy";
  }
  // h and yp of one variant, NaN-filled first so that an unwritten row shows
  // y16 (MoeGroupedRsArgs::yout16): the down kernel stores bf16 there instead of fp32 into y
  auto run = [&](bool fine, bool early, bool item, V var, std::vector<uint16_t>& h, std::vector<float>& y,
                 std::vector<uint16_t>* y16 = nullptr) {
    auto hb = to_device(std::vector<uint16_t>(size_t(n * c.I), 0x7FC0));
    auto yp = to_device(std::vector<float>(size_t(n * c.D), NAN));
    auto yp16 = to_device(std::vector<uint16_t>(size_t(n * c.D), 0x7FC0));
    const oc::MoeGroupedRsArgs gu{.tiles = tiles.data(), .offsets = offsets.data(), .a = xb.data(), .rows_a = n,
                                  .w1 = w1.view.data, .s1 = w1.view.scale, .w3 = w3.view.data, .s3 = w3.view.scale,
                                  .K = c.D, .N = c.I, .limit = c.limit, .hout = hb.data(), .cwg = cwg,
                                  .fine_n = fine, .early_next = early, .item_switch = item, .variant = var};
    const oc::MoeGroupedRsArgs dn{.tiles = tiles.data(), .offsets = offsets.data(), .a = hb.data(), .rows_a = n,
                                  .w1 = w2.view.data, .s1 = w2.view.scale, .K = c.I, .N = c.D,
                                  .yout = y16 ? nullptr : yp.data(), .yout16 = y16 ? yp16.data() : nullptr,
                                  .cwg = cwg, .fine_n = fine, .early_next = early, .item_switch = item,
                                  .variant = var};
    ASSERT_TRUE(oc::detail::launch_moe_grouped_rs(true, gu, max_tiles, nullptr));
    ASSERT_TRUE(oc::detail::launch_moe_grouped_rs(false, dn, max_tiles, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    h.resize(size_t(n * c.I));
    y.resize(size_t(n * c.D));
    ASSERT_EQ(cudaMemcpy(h.data(), hb.data(), h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(y.data(), yp.data(), y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    if (y16) *y16 = dsinfer::cuda::test::to_host(yp16, size_t(n * c.D));
  };
  const bool kFine = oc::kMoeGroupedRsFineN, kEarly = oc::kMoeGroupedRsEarlyNext, kItem = oc::kMoeGroupedRsItemSwitch;
  std::vector<uint16_t> h0;
  std::vector<float> y0;
  run(kFine, kEarly, kItem, V::kSession23, h0, y0);
  int32_t rows = 0;
  ASSERT_EQ(cudaMemcpy(&rows, offsets.data() + c.E, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_GT(rows, 0);
  for (int64_t i = 0; i < int64_t(rows) * c.D; ++i) ASSERT_TRUE(std::isfinite(y0[size_t(i)])) << "yp " << i;
  auto same = [&](bool fine, bool early, bool item, V var) {
    SCOPED_TRACE(testing::Message() << "fine_n=" << fine << " early_next=" << early << " item_switch=" << item
                                    << " variant=" << int(var));
    std::vector<uint16_t> h;
    std::vector<float> y;
    run(fine, early, item, var, h, y);
    EXPECT_EQ(std::memcmp(h.data(), h0.data(), size_t(rows) * size_t(c.I) * 2), 0) << "h differs";
    EXPECT_EQ(std::memcmp(y.data(), y0.data(), size_t(rows) * size_t(c.D) * 4), 0) << "yp differs";
  };
  same(kFine, kEarly, kItem, V::kWordStageItem);
  {  // the plan's launch storing bf16 (session 37, MoePlan::yp_bf16): every yp value rounded to nearest even
    std::vector<uint16_t> h, y16;
    std::vector<float> y;
    run(kFine, kEarly, kItem, V::kWordStageItem, h, y, &y16);
    int64_t bad = 0;
    for (int64_t i = 0; i < int64_t(rows) * c.D; ++i)
      bad += y16[size_t(i)] != dsinfer::small_float::f32_to_bf16_bits(y0[size_t(i)]);
    EXPECT_EQ(bad, 0) << "bf16 yp is not the fp32 yp rounded";
  }
  if (timing_combos)
    for (const bool fine : {true, false})
      for (const bool early : {false, true})
        for (const bool item : {false, true}) same(fine, early, item, V::kSession23);
}

// The RS kernels' timing-only variants (MoeGroupedRsArgs::early_next: the next stage's operands before the drain;
// ::item_switch: the wgmma shape picked per item; ::fine_n; ::variant; 2 or 4 consumer warpgroups) give bitwise the
// default's h and yp, on the stairs routing (every wgmma N 16 .. 128, tiles of 7 and > 128 rows) with K of 1, 2, 3
// and 5 stages.
TEST(MoeGroupedGpu, RsVariantsSameBits) {
  DSI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t D, I;
    int cwg;
  };
  for (const Shape sh : {Shape{256, 384, 4}, Shape{640, 128, 4}, Shape{128, 256, 2}})
    check_rs_variants_same_bits({1000, 12, 2, sh.D, sh.I, 0.05f, false, true, oc::MoePath::GroupedRs, 0, true}, sh.cwg,
                                21, true);
}

// The RS kernels' consumer variants (MoeGroupedRsArgs::variant: the word decode, the stage's descriptors from its
// first, the next item's entry loaded early; session 24) against session 23's code at several T: 1 token (one row
// tile per expert of 1 row), 64, 700 (stairs: every wgmma N) and 2,500 (tiles of > 128 rows, several items per CTA),
// with the consumer warpgroups the plan takes (4 in both kernels at D 256 / I 384; 4 in gate/up and 2 in down at D
// 640 / I 128; 2 where asked), and at V4-Flash expert shapes (D 4,096, I 2,048, top-6, limit 10; 10 experts: ~920
// rows each, 32 and 16 stages per item, many items per CTA) at T = 1,536.
TEST(MoeGroupedGpu, RsWordVariantsSameBits) {
  DSI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t D, I;
    int cwg;
  };
  for (const int64_t T : {int64_t(1), int64_t(64), int64_t(700), int64_t(2500)})
    for (const Shape sh : {Shape{256, 384, 4}, Shape{640, 128, 4}, Shape{128, 256, 2}})
      check_rs_variants_same_bits({T, 12, 2, sh.D, sh.I, 0.05f, false, T % 7 == 1, oc::MoePath::GroupedRs, 0,
                                   T == 700},
                                  sh.cwg, 31 + uint64_t(T), false);
  check_rs_variants_same_bits({1536, 10, 6, 4096, 2048, 10.0f, false, true, oc::MoePath::GroupedRs, 0, false}, 4, 41,
                              false);
}

// The row-tile list by size (kMoeTileListBySize, launch_moe_tile_list): the same (expert, first row) tiles as the list
// in expert order, ordered by size class (rows rounded up to 16, the RS kernels' wgmma N), largest first, expert order
// within a class. Groups of 0, 1, 127, 128, 129, 256,
// 300 rows and random ones; 7, 256 and 1,100 experts.
TEST(MoeGroupedGpu, TileListBySize) {
  DSI_SKIP_WITHOUT_GPU();
  for (const int64_t E : {int64_t(7), int64_t(256), int64_t(1100)}) {
    SCOPED_TRACE(testing::Message() << "E=" << E);
    Rng r(uint64_t(E) + 3);
    const int32_t fixed[] = {0, 1, 127, 128, 129, 256, 300};
    std::vector<int32_t> off(size_t(E + 1), 0);
    for (int64_t e = 0; e < E; ++e)
      off[size_t(e + 1)] = off[size_t(e)] + (e < 7 ? fixed[e] : int32_t(r.next() % 200));
    const int64_t n = off[size_t(E)], max_tiles = dsinfer::ops::moe_detail::grp_max_tiles(n, E);
    auto doff = to_device(off);
    auto by_size = to_device(std::vector<int32_t>(size_t(1 + 2 * max_tiles), -7));
    auto in_order = to_device(std::vector<int32_t>(size_t(1 + 2 * max_tiles), -7));
    oc::detail::launch_moe_tile_list(doff.data(), E, by_size.data(), nullptr, true);
    oc::detail::launch_moe_tile_list(doff.data(), E, in_order.data(), nullptr, false);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> a(size_t(1 + 2 * max_tiles)), b(a.size());
    ASSERT_EQ(cudaMemcpy(a.data(), by_size.data(), a.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.data(), in_order.data(), b.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    // the expected list on the host: every tile (rows, expert, first row), sorted by rows descending, then expert
    struct Tile {
      int32_t rows, e, m;
    };
    std::vector<Tile> want;
    for (int64_t e = 0; e < E; ++e)
      for (int32_t m = 0; m < off[size_t(e + 1)] - off[size_t(e)]; m += 128)
        want.push_back({std::min(128, off[size_t(e + 1)] - off[size_t(e)] - m), int32_t(e), m});
    ASSERT_EQ(b[0], int32_t(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(b[1 + 2 * i] == want[i].e && b[2 + 2 * i] == want[i].m) << "expert order, tile " << i;
    std::stable_sort(want.begin(), want.end(),
                     [](const Tile& x, const Tile& y) { return (x.rows + 15) / 16 > (y.rows + 15) / 16; });
    ASSERT_EQ(a[0], int32_t(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(a[1 + 2 * i] == want[i].e && a[2 + 2 * i] == want[i].m)
          << "by size, tile " << i << ": got (" << a[1 + 2 * i] << ", " << a[2 + 2 * i] << "), want (" << want[i].e
          << ", " << want[i].m << ")";
  }
}

// Other formats fall back to the exact path (bitwise the same).
TEST(MoeGroupedGpu, OtherFormatsFallBack) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t T = 40, E = 6, k = 2, D = 64, I = 96;
  ExpertSet w1, w3, w2;
  build_set(w1, WeightFormat::BF16, E, I, D, 7, 1);
  build_set(w3, WeightFormat::BF16, E, I, D, 7, 3);
  build_set(w2, WeightFormat::BF16, E, D, I, 7, 2);
  oc::MoeExpertsDevice ex{E, D, I, w1.view, w3.view, w2.view};
  GroupedCase c{T, E, k, D, I, 0.05f, false, false, oc::MoePath::Grouped, 0};
  std::vector<int32_t> idx;
  std::vector<float> wt;
  ragged_routing(c, 8, idx, wt);
  auto dx = to_device(random_floats(size_t(T * D), 9));
  auto di = to_device(idx);
  auto dwt = to_device(wt);
  EXPECT_EQ(run_moe(c, T, dx, di, dwt, ex, nullptr, oc::MoePath::Grouped),
            run_moe(c, T, dx, di, dwt, ex, nullptr, oc::MoePath::Exact));
}

}  // namespace
