// GPU checks of the fast MoE path's launch variants (ops/moe/moe_cuda.cpp), which must not change any bit:
// * the one-launch permutation writing the bf16 x rows (T*topk <= kMoePrepMaxN) vs count + scatter and the rows' own
//   launch (above): a token's output is bitwise the same at T = 2, 120 and 400 (routed experts only; the shared
//   expert's GEMM path depends on T by design);
// * a misaligned x pointer gives the aligned run's bits;
// * the shared expert under CUDA graph capture, inside the decode kernels (the smallest fused T) and on the
//   workspace's side stream (T = 300): the replay equals the eager run bitwise and both are close to the in-line
//   (Exact path) result;
// * the shared expert inside the decode kernels (moe_fast_shared.h) against gemm_cuda's (moe_shared_cuda), at the
//   smallest fused T, 17 (a partial last pass) and the largest, with the routed part unchanged;
// * an expert-parallel rank's output is its routed rows plus the shared expert alone, bit for bit, whatever experts,
//   slots (EPLB replicas) and rows of other ranks it holds;
// * the decode kernels' variants (MoeFastVariant: session 18's FP4 decode, the word decode) and the paired kernel
//   (MoeFastArgs::big: the experts with more than 8 rows, 16 a pass) give the same h and yp.
// Accuracy against the CPU reference is test_moe_gpu.cpp's business (MoeGpu.FastPath*).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_fast_shared.h"
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

struct Experts {
  std::vector<oc::OwnedDeviceWeight> owned;
  DeviceBuffer<const void*> ptrs[6];
  oc::MoeExpertsDevice ex;
};

// E FP4_G32 experts (w1, w3: [I, D]; w2: [D, I]).
void build_experts(Experts& s, int64_t E, int64_t D, int64_t I, uint64_t seed) {
  oc::DeviceExpertWeights views[3];
  for (int p = 0; p < 3; ++p) {
    const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
    std::vector<const void*> dp, sp;
    for (int64_t e = 0; e < E; ++e) {
      HostWeight h = make_host_weight(WeightFormat::FP4_G32, rows, cols, seed * 1000 + uint64_t(e * 3 + p), true, 128,
                                      128, false);
      s.owned.push_back(dsinfer::test::upload(h));
      dp.push_back(s.owned.back().w.data), sp.push_back(s.owned.back().w.scale);
    }
    s.ptrs[2 * p] = to_device(dp), s.ptrs[2 * p + 1] = to_device(sp);
    views[p].fmt = WeightFormat::FP4_G32;
    views[p].rows = rows;
    views[p].cols = cols;
    views[p].data = s.ptrs[2 * p].data();
    views[p].scale = s.ptrs[2 * p + 1].data();
  }
  s.ex = {E, D, I, views[0], views[1], views[2]};
}

// k distinct experts per token, weights in (0.1, 1.1).
void routing(int64_t T, int64_t E, int64_t k, uint64_t seed, std::vector<int32_t>& idx, std::vector<float>& wt) {
  Rng r(seed);
  idx.assign(size_t(T * k), 0), wt.assign(size_t(T * k), 0.0f);
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = int32_t(e);
    for (int64_t j = 0; j < k; ++j) {
      std::swap(perm[size_t(j)], perm[size_t(j + int64_t(r.next() % uint64_t(E - j)))]);
      idx[size_t(t * k + j)] = perm[size_t(j)], wt[size_t(t * k + j)] = 0.1f + r.uniform();
    }
  }
}

std::vector<float> run_fast(const Experts& s, const float* dx, int64_t T, const int32_t* di, const float* dw, int64_t k,
                            const oc::MoeSharedDevice* sh, oc::MoePath path = oc::MoePath::Fast) {
  oc::MoeWorkspace ws;
  EXPECT_TRUE(ws.reserve(T, k, s.ex.dim, s.ex.inter, s.ex.experts).is_ok());
  DeviceBuffer<float> out;
  EXPECT_TRUE(out.alloc(size_t(T * s.ex.dim)).is_ok());
  const auto st = oc::moe_cuda(dx, T, di, dw, k, s.ex, sh, 10.0f, 10.0f, out.data(), ws, nullptr, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<float> h(size_t(T * s.ex.dim));
  EXPECT_EQ(cudaMemcpy(h.data(), out.data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(MoeFastGpu, LaunchVariantsKeepTheBits) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t E = 32, k = 6, D = 256, I = 384, Tmax = 400, Tsmall = 2;
  Experts s;
  build_experts(s, E, D, I, 7);
  std::vector<int32_t> idx;
  std::vector<float> wt;
  routing(Tmax, E, k, 11, idx, wt);
  const std::vector<float> x = random_floats(size_t(Tmax * D), 13);
  auto di = to_device(idx);
  auto dw = to_device(wt);
  // x at a 4-byte offset: not 16-byte aligned
  std::vector<float> x_off(x.size() + 1, 0.0f);
  std::memcpy(x_off.data() + 1, x.data(), x.size() * 4);
  auto dx = to_device(x);
  auto dx_off = to_device(x_off);
  // T = 2 and 120 (n = 12 / 720: the bf16 rows in the permutation's launch), 400 (n = 2400: count + scatter, the
  // rows' own launch)
  const std::vector<float> small = run_fast(s, dx.data(), Tsmall, di.data(), dw.data(), k, nullptr);
  const std::vector<float> small_off = run_fast(s, dx_off.data() + 1, Tsmall, di.data(), dw.data(), k, nullptr);
  const std::vector<float> mid = run_fast(s, dx.data(), 120, di.data(), dw.data(), k, nullptr);
  const std::vector<float> big = run_fast(s, dx.data(), Tmax, di.data(), dw.data(), k, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t cmp = size_t(Tsmall * D) * 4;
  for (float v : small) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(std::memcmp(small.data(), small_off.data(), cmp), 0) << "misaligned x vs aligned";
  EXPECT_EQ(std::memcmp(small.data(), mid.data(), cmp), 0) << "T = 2 vs T = 120";
  EXPECT_EQ(std::memcmp(mid.data(), big.data(), size_t(120 * D) * 4), 0) << "T = 120 vs T = 400";
}

TEST(MoeFastGpu, SharedExpertSideStreamUnderGraphCapture) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t T : {oc::kMoeSharedFusedMinT, int64_t(300)}) {
  const bool fused = T >= oc::kMoeSharedFusedMinT && T <= oc::kMoeSharedFusedMaxT;
  SCOPED_TRACE(testing::Message() << "T=" << T << (fused ? " (fused)" : " (side stream)"));
  const int64_t E = 16, k = 4, D = 256, I = 256;
  Experts s;
  build_experts(s, E, D, I, 21);
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  for (int p = 0; p < 3; ++p)
    sh_owned.push_back(dsinfer::test::upload(
        make_host_weight(WeightFormat::FP8_BLOCK, p == 2 ? D : I, p == 2 ? I : D, 900 + uint64_t(p))));
  const oc::MoeSharedDevice sh{sh_owned[0].w, sh_owned[1].w, sh_owned[2].w};
  std::vector<int32_t> idx;
  std::vector<float> wt;
  routing(T, E, k, 23, idx, wt);
  auto dx = to_device(random_floats(size_t(T * D), 25));
  auto di = to_device(idx);
  auto dw = to_device(wt);
  oc::MoeWorkspace ws;
  ASSERT_TRUE(ws.reserve(T, k, D, I, E).is_ok());
  DeviceBuffer<float> out_eager, out_graph;
  ASSERT_TRUE(out_eager.alloc(size_t(T * D)).is_ok());
  ASSERT_TRUE(out_graph.alloc(size_t(T * D)).is_ok());
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  auto call = [&](float* out) {
    return oc::moe_cuda(dx.data(), T, di.data(), dw.data(), k, s.ex, &sh, 10.0f, 10.0f, out, ws, st, oc::MoePath::Fast);
  };
  ASSERT_TRUE(call(out_eager.data()).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
  const auto cap = call(out_graph.data());
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess) << "side stream not joined before the capture ended";
  ASSERT_TRUE(cap.is_ok()) << cap.message();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  std::vector<float> a(size_t(T * D)), b(a.size());
  ASSERT_EQ(cudaMemcpy(a.data(), out_eager.data(), a.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.data(), out_graph.data(), b.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "graph replay vs eager";
  // The exact path runs the shared expert in line (fp32 GEMMs): same math up to the fast path's bf16 rounding
  // (kFastTol of test_moe_gpu.cpp).
  const std::vector<float> exact = run_fast(s, dx.data(), T, di.data(), dw.data(), k, &sh, oc::MoePath::Exact);
  EXPECT_LT(normalized_error(a, exact), 1e-2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
  }
}

// The shared expert inside the decode kernels against gemm_cuda's: (moe_cuda with the shared expert) - (moe_cuda
// without it) is the fused shared output plus one fp32 rounding of the sum; moe_shared_cuda runs the same expert
// through gemm_cuda. Both round h to bf16 before W2 (gemm_cuda's bf16 kernel also x; its fp32-small-m kernel at T = 2
// does not), so they differ by bf16 rounding and the sums' order: ~2-3e-3 expected (kFastTol's derivation in
// test_moe_gpu.cpp), 1e-2 as kFastTol. The routed rows are the routed-only run's (the fused blocks touch only the
// shared rows), so the routed part's bits are checked through the outputs without the shared expert at two T.
TEST(MoeFastGpu, SharedExpertInsideTheDecodeKernels) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t E = 32, k = 6, D = 256, I = 384;
  Experts s;
  build_experts(s, E, D, I, 31);
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  std::vector<dsinfer::test::HostWeight> sh_host;
  for (int p = 0; p < 3; ++p) {
    sh_host.push_back(make_host_weight(WeightFormat::FP8_BLOCK, p == 2 ? D : I, p == 2 ? I : D, 950 + uint64_t(p)));
    sh_owned.push_back(dsinfer::test::upload(sh_host.back()));
  }
  const oc::MoeSharedDevice sh{sh_owned[0].w, sh_owned[1].w, sh_owned[2].w};
  for (int64_t T : {oc::kMoeSharedFusedMinT, int64_t(17), oc::kMoeSharedFusedMaxT}) {
    SCOPED_TRACE(testing::Message() << "T=" << T);
    std::vector<int32_t> idx;
    std::vector<float> wt;
    routing(T, E, k, 33 + uint64_t(T), idx, wt);
    auto dx = to_device(random_floats(size_t(T * D), 35 + uint64_t(T)));
    auto di = to_device(idx);
    auto dw = to_device(wt);
    const std::vector<float> with = run_fast(s, dx.data(), T, di.data(), dw.data(), k, &sh);
    const std::vector<float> routed = run_fast(s, dx.data(), T, di.data(), dw.data(), k, nullptr);
    oc::MoeWorkspace ws;
    ASSERT_TRUE(ws.reserve(T, k, D, I, E).is_ok());
    DeviceBuffer<float> shy;
    ASSERT_TRUE(shy.alloc(size_t(T * D)).is_ok());
    ASSERT_TRUE(oc::moe_shared_cuda(dx.data(), T, sh, 10.0f, shy.data(), ws, nullptr, oc::MoePath::Fast).is_ok());
    std::vector<float> ref(size_t(T * D)), got(ref.size());
    ASSERT_EQ(cudaMemcpy(ref.data(), shy.data(), ref.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(with[i]));
      got[i] = with[i] - routed[i];
    }
    const double e = normalized_error(got, ref);
    EXPECT_LT(e, 1e-2) << "fused shared expert vs gemm_cuda: " << e;
    // the shared part is not small against the routed one (else the check above would see only rounding)
    EXPECT_GT(normalized_error(routed, with), 0.05);
  }
}

}  // namespace

// A rank's experts as the EP runner holds them: slot s is global expert slots[s] (the same device weights; EPLB's
// replicas are two slots of one expert).
struct RankExperts {
  DeviceBuffer<const void*> ptrs[6];
  oc::MoeExpertsDevice ex;
};

void rank_view(const Experts& g, const std::vector<int32_t>& slots, RankExperts& r) {
  oc::DeviceExpertWeights* views[3] = {&r.ex.w1, &r.ex.w3, &r.ex.w2};
  r.ex = g.ex;
  r.ex.experts = int64_t(slots.size());
  for (int p = 0; p < 6; ++p) {
    std::vector<const void*> all(size_t(g.ex.experts)), mine;
    ASSERT_EQ(cudaMemcpy(all.data(), g.ptrs[p].data(), all.size() * sizeof(void*), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int32_t e : slots) mine.push_back(all[size_t(e)]);
    r.ptrs[p] = to_device(mine);
    (p % 2 ? views[p / 2]->scale : views[p / 2]->data) = r.ptrs[p].data();
  }
}

// The shared expert on an expert-parallel rank does not depend on which routed rows the rank holds (session 18,
// issue 31: GpuMultiGpu.EplbMatchesPlainExpertParallel failed with the fused route; the suspects were a rank's
// routed rows, EPLB's slots and replicas, rows of other ranks' experts, the grid and the workspace). dsv4-small's
// shapes (8 experts, top-2, dim 256, inter 128), every layout a rank of 2 can hold: one rank; plain EP ranks 0 and 1
// (other ranks' experts -1); EPLB rank 0 with a replica of expert 1 taking odd tokens' rows (5 slots); EPLB rank 0
// holding experts in another slot order with one moved in; a rank that no token routes to. One workspace reserved
// for the largest T serves every call in turn, as the runner's does. For T across the fused window's edges (1 and
// 161: side stream; 2, 3, 8, 9, 17, 160 fused):
//  * the output is the routed-only output plus the shared expert alone (the same call with every row -1), bit for
//    bit (combine_kernel adds the shared row last): the shared part ignores the routed rows and vice versa;
//  * plain EP rank 0 and EPLB rank 0 (the same assignments, expert 1's through either slot) give the same bits.
TEST(MoeFastGpu, SharedExpertIgnoresTheRanksExpertLayout) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t E = 8, k = 2, D = 256, I = 128, Tmax = 161;
  Experts g;
  build_experts(g, E, D, I, 41);
  std::vector<oc::OwnedDeviceWeight> sh_owned;
  for (int p = 0; p < 3; ++p)
    sh_owned.push_back(dsinfer::test::upload(
        make_host_weight(WeightFormat::FP8_BLOCK, p == 2 ? D : I, p == 2 ? I : D, 960 + uint64_t(p))));
  const oc::MoeSharedDevice sh{sh_owned[0].w, sh_owned[1].w, sh_owned[2].w};
  struct Layout {
    const char* name;
    std::vector<int32_t> slots;
    // local slot of (token, global expert), -1: another rank's
    std::function<int32_t(int64_t, int32_t)> local;
  };
  const std::vector<Layout> layouts = {
      {"one rank", {0, 1, 2, 3, 4, 5, 6, 7}, [](int64_t, int32_t e) { return e; }},
      {"EP rank 0", {0, 1, 2, 3}, [](int64_t, int32_t e) { return e < 4 ? e : -1; }},
      {"EP rank 1", {4, 5, 6, 7}, [](int64_t, int32_t e) { return e >= 4 ? e - 4 : -1; }},
      {"EPLB rank 0, replica", {0, 1, 2, 3, 1},
       [](int64_t t, int32_t e) { return e == 1 && t % 2 ? 4 : e < 4 ? e : -1; }},
      {"EPLB rank 0, moved", {3, 5, 0, 1, 2},
       [](int64_t, int32_t e) { return e == 3 ? 0 : e == 5 ? 1 : e == 0 ? 2 : e == 1 ? 3 : e == 2 ? 4 : -1; }},
      {"no rows here", {0, 1, 2, 3}, [](int64_t, int32_t) { return -1; }},
  };
  std::vector<RankExperts> views(layouts.size());
  for (size_t l = 0; l < layouts.size(); ++l) rank_view(g, layouts[l].slots, views[l]);
  oc::MoeWorkspace ws;  // one for every call (runner: moe_ws_), reserved for the largest T and slot count
  ASSERT_TRUE(ws.reserve(Tmax, k, D, I, E).is_ok());
  DeviceBuffer<float> out;
  ASSERT_TRUE(out.alloc(size_t(Tmax * D)).is_ok());
  auto call = [&](const oc::MoeExpertsDevice& ex, const float* dx, int64_t T, const int32_t* di, const float* dw,
                  const oc::MoeSharedDevice* s) {
    const auto st = oc::moe_cuda(dx, T, di, dw, k, ex, s, 10.0f, 10.0f, out.data(), ws, nullptr, oc::MoePath::Fast);
    EXPECT_TRUE(st.is_ok()) << st.message();
    std::vector<float> h(size_t(T * D));
    EXPECT_EQ(cudaMemcpy(h.data(), out.data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  };
  for (int64_t T : {int64_t(1), int64_t(2), int64_t(3), int64_t(8), int64_t(9), int64_t(17), int64_t(160), Tmax}) {
    const bool fused = T >= oc::kMoeSharedFusedMinT && T <= oc::kMoeSharedFusedMaxT;
    SCOPED_TRACE(testing::Message() << "T=" << T << (fused ? " (fused)" : " (side stream)"));
    std::vector<int32_t> idx;
    std::vector<float> wt;
    routing(T, E, k, 43 + uint64_t(T), idx, wt);
    auto dx = to_device(random_floats(size_t(T * D), 45 + uint64_t(T)));
    auto dw = to_device(wt);
    std::vector<std::vector<float>> with(layouts.size());
    std::vector<float> alone;
    for (size_t l = layouts.size(); l-- > 0;) {  // "no rows here" first: the shared expert alone
      SCOPED_TRACE(layouts[l].name);
      std::vector<int32_t> local(idx.size());
      for (size_t i = 0; i < idx.size(); ++i) local[i] = layouts[l].local(int64_t(i) / k, idx[i]);
      auto di = to_device(local);
      with[l] = call(views[l].ex, dx.data(), T, di.data(), dw.data(), &sh);
      const std::vector<float> routed = call(views[l].ex, dx.data(), T, di.data(), dw.data(), nullptr);
      if (alone.empty()) {
        alone = with[l];
        for (float v : alone) ASSERT_TRUE(std::isfinite(v));
        for (float v : routed) ASSERT_EQ(v, 0.0f);
      }
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        const float want = routed[i] + alone[i];
        if (std::memcmp(&want, &with[l][i], 4) != 0 && bad++ == 0) first = i;
      }
      EXPECT_EQ(bad, 0u) << "output != routed-only + shared alone at " << bad << " elements, first: token "
                         << first / size_t(D) << " column " << first % size_t(D);
    }
    EXPECT_EQ(std::memcmp(with[1].data(), with[3].data(), with[1].size() * 4), 0)
        << "plain EP rank 0 vs EPLB rank 0 (expert 1's odd tokens through its replica)";
  }
}

// The decode kernels' variants (moe_fast_shared.h MoeFastVariant) give the same bits: kWordDecode decodes each FP4 word's
// four bf16 pairs at once (and, in the down kernel, the scale factors by fp4_scale_bf16x2), kSession18 pair by pair.
// The gate/up kernel's h (from the bf16 x rows) and the down kernel's yp are
// compared bit for bit over uniform routing (1 .. 128 rows per expert on average, one pass of 8 tokens or several)
// and a skewed one (4 hot experts take most rows). I = 2,048 also runs the word decode's down kernel compiled for
// that K (moe_fast.cu launch_variant) against session 18's, which takes any K. A third run gives the permutation's
// list of experts with more than 8 rows to the paired kernel (1-8 rows: none; 9-16: one paired pass; 17-24: a paired
// pass and a half-empty one; more), whose grid rows walk the list (big_grid 3: several experts a block).
TEST(MoeFastGpu, WordDecodeKeepsTheBits) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t E = 16, k = 6, D = 256;
  bool saw_pair = false, saw_pair_and_half = false;
  for (const int64_t I : {int64_t(384), int64_t(2048)}) {
    Experts s;
    build_experts(s, E, D, I, 51);
    for (int64_t T : {int64_t(2), int64_t(9), int64_t(24), int64_t(60), int64_t(200), int64_t(340), int64_t(-40)}) {
      if (I == 2048 && (T == 24 || T == 200)) continue;  // the other sizes cover one / several passes there
      const bool skewed = T < 0;
      T = skewed ? -T : T;
      SCOPED_TRACE(testing::Message() << "I=" << I << " T=" << T << (skewed ? " skewed" : ""));
      const int64_t n = T * k;
      std::vector<int32_t> idx;
      std::vector<float> wt;
      routing(T, E, k, 53 + uint64_t(T), idx, wt);
      // skewed: the first choice of every token among experts 0..3 (rows stay distinct per token: the others are >= 4)
      if (skewed)
        for (int64_t t = 0; t < T; ++t) {
          int32_t* row = idx.data() + t * k;
          for (int64_t j = 1; j < k; ++j) row[j] = int32_t(4 + (t + j) % (E - 4));
          row[0] = int32_t(t % 4);
        }
      auto di = to_device(idx);
      auto dx = to_device(random_floats(size_t(T * D), 55 + uint64_t(T)));
      DeviceBuffer<int32_t> offsets, perm, pos, active, big;
      DeviceBuffer<uint16_t> xb, hb;
      DeviceBuffer<float> yp;
      ASSERT_TRUE(offsets.alloc(size_t(E + 1)).is_ok());
      ASSERT_TRUE(active.alloc(size_t(E + 1)).is_ok());
      ASSERT_TRUE(big.alloc(size_t(E + 1)).is_ok());
      ASSERT_TRUE(perm.alloc(size_t(n)).is_ok());
      ASSERT_TRUE(pos.alloc(size_t(n)).is_ok());
      ASSERT_TRUE(xb.alloc(size_t(n * D)).is_ok());
      ASSERT_TRUE(hb.alloc(size_t(n * I)).is_ok());
      ASSERT_TRUE(yp.alloc(size_t(n * D)).is_ok());
      ASSERT_LE(n, int64_t(oc::kMoePrepMaxN));
      oc::detail::launch_moe_prep(di.data(), n, k, E, offsets.data(), perm.data(), pos.data(), active.data(), nullptr,
                                  {.x = dx.data(), .T = T, .K = D, .xb = xb.data()}, big.data());
      std::vector<int32_t> offs(size_t(E + 1)), big_list(size_t(E + 1));
      ASSERT_EQ(cudaMemcpy(offs.data(), offsets.data(), offs.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(big_list.data(), big.data(), big_list.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<int32_t> want;  // the big list: the experts with more than 8 rows, increasing
      for (int64_t e = 0; e < E; ++e) {
        const int32_t c = offs[size_t(e + 1)] - offs[size_t(e)];
        if (c > 8) want.push_back(int32_t(e));
        saw_pair = saw_pair || (c > 8 && c <= 16);
        saw_pair_and_half = saw_pair_and_half || (c > 16 && c <= 24);
      }
      ASSERT_EQ(big_list[0], int32_t(want.size()));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), big_list.begin() + 1)) << "the big list";
      // runs 0 / 1 / 2: session 18 / word decode / word decode with the paired kernel, from the bf16 x rows
      std::vector<uint16_t> h[3];
      std::vector<float> y[3];
      for (int v = 0; v < 3; ++v) {
        const oc::MoeFastVariant variant = v >= 1 ? oc::MoeFastVariant::kWordDecode : oc::MoeFastVariant::kSession18;
        const int32_t* paired = v == 2 ? big.data() : nullptr;
        ASSERT_EQ(cudaMemset(hb.data(), 0xFF, size_t(n * I) * 2), cudaSuccess);
        ASSERT_EQ(cudaMemset(yp.data(), 0xFF, size_t(n * D) * 4), cudaSuccess);
        const oc::MoeFastArgs gate_up{.active = active.data(), .offsets = offsets.data(), .xb = xb.data(),
                                      .perm = perm.data(), .w1 = s.ex.w1.data, .s1 = s.ex.w1.scale,
                                      .w3 = s.ex.w3.data, .s3 = s.ex.w3.scale, .K = D, .N = I, .limit = 10.0f,
                                      .hout = hb.data(), .big = paired, .big_grid = 3};
        oc::detail::launch_moe_fast_shared(true, gate_up, oc::MoeFastShared{}, std::min(E, n), nullptr, variant);
        const oc::MoeFastArgs down{.active = active.data(), .offsets = offsets.data(), .xb = hb.data(),
                                   .w1 = s.ex.w2.data, .s1 = s.ex.w2.scale, .K = I, .N = D, .yout = yp.data(),
                                   .big = paired, .big_grid = 3};
        oc::detail::launch_moe_fast_shared(false, down, oc::MoeFastShared{}, std::min(E, n), nullptr, variant);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        h[v].resize(size_t(n * I));
        y[v].resize(size_t(n * D));
        ASSERT_EQ(cudaMemcpy(h[v].data(), hb.data(), h[v].size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y[v].data(), yp.data(), y[v].size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      }
      for (int v = 0; v < 3; ++v)
        for (float f : y[v]) ASSERT_TRUE(std::isfinite(f)) << "run " << v;  // every row written (0xFF.. is a NaN)
      EXPECT_EQ(std::memcmp(h[0].data(), h[1].data(), h[0].size() * 2), 0) << "h: word decode vs session 18";
      EXPECT_EQ(std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4), 0) << "yp: word decode vs session 18";
      EXPECT_EQ(std::memcmp(h[1].data(), h[2].data(), h[1].size() * 2), 0) << "h: paired kernel vs 8 rows a pass";
      EXPECT_EQ(std::memcmp(y[1].data(), y[2].data(), y[1].size() * 4), 0) << "yp: paired kernel vs 8 rows a pass";
    }
  }
  EXPECT_TRUE(saw_pair) << "no expert with 9-16 rows: the cases do not reach one paired pass";
  EXPECT_TRUE(saw_pair_and_half) << "no expert with 17-24 rows: the cases do not reach a half-empty paired pass";
}
