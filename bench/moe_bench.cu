// Benchmark of the MoE layer at V4-Flash shapes (256 FP4_G32 experts with E8M0 scales, top-6, D 4096, I 2048, FP8
// shared expert, swiglu limit 10): the exact path (fp32 skinny / bf16 tiled grouped GEMMs) against the fast
// grouped decode kernels (moe_fast.cu), side by side, with and without the shared expert. CUDA events, 3 warm-up
// runs, median of 25, 4 rotating weight sets (4 x 3.4 GB: nothing stays in the 60 MB L2), uniform random routing.
// Floor = bytes / 4.8 TB/s (H200 HBM3e peak) with bytes = touched experts x 13.37 MB (+ shared 25.2 MB) + x + out
// (fp32); the intermediates are not counted (an ideal kernel keeps them on chip); "%" = floor / fast (share of the
// peak the fast path reaches); "fast" above kMoeGroupedMinT tokens is the grouped prefill path. Then bench_grouped's
// table (T = 512 / 1024 / 2048 / 4096 / 8192: exact vs fast vs grouped vs grouped FP8, ms and TFLOP/s).
// Usage: dsinfer_moe_bench [T ...] (default 1 8 64 128 256 512 1024 4096) | dsinfer_moe_bench grouped (that table only)
// | dsinfer_moe_bench stages [T ...] (default 1 8 64 128 256): MoePath::Fast kernel by kernel (bench_stages)
// | dsinfer_moe_bench prefill [T ...] (default 2048 4096 8192, T <= 16384): the prefill path (FP8 grouped GEMMs)
// kernel by kernel, with an output hash, and beside them the RS kernels (bf16 wgmma, FP4 weights in registers): 4
// consumer warpgroups with wgmma N 96 / 128 or the tile's rows rounded up to 16, over the tile list in expert order
// or by size, and 2 consumer warpgroups as moe_cuda's fallback, their yp against the bf16 grouped path's
// (bench_prefill).
// Env (for profiling): DSINFER_MOE_BENCH_SETS = 1..4 weight sets rotated (1: the weights may stay warm in L2 / TLB);
// DSINFER_MOE_BENCH_T = comma list of the grouped table's T (default 512,1024,2048,4096,8192);
// DSINFER_MOE_BENCH_FP8_ONLY = 1: the grouped table times the FP8 path alone (the others print 0);
// DSINFER_MOE_BENCH_RS_ONLY = 1: prefill stops after the RS kernels (moe_grouped_rs.cu) of each T;
// DSINFER_MOE_BENCH_RS_VARIANTS = comma list of indices 0..10 into bench_prefill's RS variant list (repeats
// allowed; default 0, 3, 4, 7); DSINFER_MOE_BENCH_PROFILE = 1: prefill launches each RS variant's two kernels once
// (weight set 0) and times nothing (for ncu: -k regex:moe_grouped_rs_kernel -c 2 x the variants).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cuda/pdl.h"
#include "moe_routing.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_fast_shared.h"
#include "ops/moe/moe_fp8_common.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_launch.h"
#include "ops/moe/moe_launch.h"
#include "ops/moe/moe_plan.h"

namespace oc = dsinfer::ops::cuda;

namespace {

constexpr int kMaxSets = 4, kWarm = 3, kRuns = 25;
int g_sets = kMaxSets;  // weight sets rotated (DSINFER_MOE_BENCH_SETS)
bool g_rs_only = false;  // prefill: stop after the RS kernels (DSINFER_MOE_BENCH_RS_ONLY = 1, for profiling)
bool g_profile = false;  // prefill: each RS variant's kernels launched once, nothing timed (DSINFER_MOE_BENCH_PROFILE)
std::vector<int> g_rs_variants;  // prefill: the RS variants timed, by index (DSINFER_MOE_BENCH_RS_VARIANTS)
constexpr double kHbm = 4.8e12;
constexpr int64_t E = 256, k = 6, D = 4096, I = 2048;

void die(const dsinfer::Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

using Blob = dsinfer::cuda::DeviceBuffer<uint8_t>;

Blob upload_blob(const void* host, size_t bytes) {
  Blob b;
  die(b.upload_bytes(host, bytes, "bench upload"), "upload");
  return b;
}

// kind 0: random FP4 codes, 1: e4m3 codes, 2: E8M0 scales 2^-3, -1: floats in [-1, 1).
Blob blob(size_t bytes, int kind, uint64_t seed) {
  Blob b;
  die(b.alloc(bytes, "bench buffer"), "alloc");
  using dsinfer::ops::cuda::DummyFill;
  using dsinfer::ops::cuda::DummySpec;
  const DummySpec spec = kind == 0   ? DummySpec{DummyFill::Fp4Codes}
                         : kind == 1 ? DummySpec{DummyFill::Fp8Codes}
                         : kind == 2 ? DummySpec{DummyFill::Constant8, false, 0.0f, 0.0f, 124}
                                     : DummySpec{DummyFill::Uniform, false, 0.0f, 1.0f};
  die(dsinfer::ops::cuda::fill_dummy_cuda(b.data(), kind >= 0 ? bytes : bytes / 4, spec, seed, nullptr), "fill");
  return b;
}

template <typename F>
double median_us(F&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < kWarm; ++i) fn(i % g_sets);
  std::vector<float> t;
  for (int i = 0; i < kRuns; ++i) {
    check(cudaEventRecord(a), "record");
    fn(i % g_sets);
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return double(t[t.size() / 2]) * 1e3;
}

struct Set {
  std::vector<Blob> bufs;
  Blob ptrs;
  oc::MoeExpertsDevice ex;
  oc::MoeSharedDevice sh;
};

void build(Set& st, int si, size_t w_bytes, size_t s_bytes) {
  std::vector<const void*> host_ptrs(size_t(6 * E));  // one stacked allocation per projection
  for (int proj = 0; proj < 3; ++proj) {
    st.bufs.push_back(blob(w_bytes * size_t(E), 0, uint64_t(100 + si * 10 + proj)));
    st.bufs.push_back(blob(s_bytes * size_t(E), 2, uint64_t(200 + si * 10 + proj)));
    const uint8_t* d = st.bufs[st.bufs.size() - 2].data();
    const uint8_t* sc = st.bufs.back().data();
    for (int64_t e = 0; e < E; ++e) {
      host_ptrs[size_t((2 * proj) * E + e)] = d + size_t(e) * w_bytes;
      host_ptrs[size_t((2 * proj + 1) * E + e)] = sc + size_t(e) * s_bytes;
    }
  }
  st.ptrs = upload_blob(host_ptrs.data(), host_ptrs.size() * sizeof(void*));
  const void* const* P = st.ptrs.as<const void* const>();
  auto proj = [&](int p, int64_t rows, int64_t cols) {
    oc::DeviceExpertWeights w;
    w.fmt = oc::WeightFormat::FP4_G32;
    w.rows = rows;
    w.cols = cols;
    w.data = P + (2 * p) * E;
    w.scale = P + (2 * p + 1) * E;
    return w;
  };
  st.ex = {E, D, I, proj(0, I, D), proj(1, I, D), proj(2, D, I)};
  for (int p = 0; p < 3; ++p) {
    const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
    const auto f = oc::WeightFormat::FP8_BLOCK;
    st.bufs.push_back(blob(oc::weight_data_bytes(f, rows, cols), 1, uint64_t(300 + si * 10 + p)));
    st.bufs.push_back(blob(oc::weight_scale_bytes(f, rows, cols, true, 128, 128), 2, uint64_t(400 + si * 10 + p)));
    oc::DeviceWeight dw{f, rows, cols, st.bufs[st.bufs.size() - 2].data(), st.bufs.back().data(), true, 128, 128};
    (p == 0 ? st.sh.w1 : p == 1 ? st.sh.w3 : st.sh.w2) = dw;
  }
}

// Grouped prefill GEMMs (moe_grouped.cu, MoePath::Grouped) against the tiled exact path and MoePath::Fast (decode
// kernels up to kMoeGroupedMinT tokens, grouped above), routed experts only, uniform random routing. TFLOP/s =
// 2 * T * topk * 3 * D * I / time (the expert GEMMs' useful work; permutation, conversion and combine included in
// the time). `dsinfer_moe_bench grouped` runs only this table. Last column: the FP8 path's output against the bf16
// grouped path's on weight set 0, normalised L2 (a sanity check of a kernel variant, not the parity test: ~1e-2 is the
// two paths' rounding, ~1 a broken kernel).
double fp8_vs_bf16(const Set& st, int64_t T, const Blob& x, const Blob& idx, const Blob& wt, Blob& out,
                   oc::MoeWorkspace& ws) {
  std::vector<float> r[2];
  const oc::MoePath paths[2] = {oc::MoePath::Grouped, oc::MoePath::GroupedFp8};
  for (int i = 0; i < 2; ++i) {
    die(oc::moe_cuda(x.as<float>(), T, idx.as<const int32_t>(), wt.as<const float>(), k, st.ex, nullptr, 10.0f, 10.0f,
                     out.as<float>(), ws, nullptr, paths[i]),
        "moe_cuda");
    r[i].resize(size_t(T * D));
    check(cudaMemcpy(r[i].data(), out.data(), r[i].size() * 4, cudaMemcpyDeviceToHost), "download");
  }
  double num = 0, den = 0;
  for (size_t j = 0; j < r[0].size(); ++j) {
    num += double(r[1][j] - r[0][j]) * double(r[1][j] - r[0][j]);
    den += double(r[0][j]) * double(r[0][j]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void bench_grouped(std::vector<Set>& sets) {
  oc::MoeWorkspace ws;
  die(ws.reserve(8192, k, D, I, E), "reserve");
  std::printf("grouped prefill GEMMs (routed only): %5s %8s | %-22s | %-22s | %-22s | %-22s | %s\n", "T", "GFLOP",
              "exact ms  TFLOP/s", "fast ms  TFLOP/s", "grouped ms  TFLOP/s", "grouped fp8 ms TFLOP/s",
              "fp8 vs bf16");
  uint64_t rng = 777;
  std::vector<int64_t> ts = {512, 1024, 2048, 4096, 8192};
  if (const char* env = std::getenv("DSINFER_MOE_BENCH_T")) {
    ts.clear();
    for (const char* c = env; *c != 0;) {
      const long long v = std::strtoll(c, nullptr, 10);
      if (v >= 1 && v <= 8192) ts.push_back(int64_t(v));
      while (*c != 0 && *c != ',') ++c;
      if (*c == ',') ++c;
    }
  }
  for (int64_t T : ts) {
    std::vector<Blob> xs, outs, idxs, wts;
    for (int si = 0; si < g_sets; ++si) {
      const std::vector<int32_t> idx = dsinfer::bench::random_routing(T, k, E, rng);
      std::vector<float> wt(size_t(T * k), 1.0f / 6.0f);
      idxs.push_back(upload_blob(idx.data(), idx.size() * 4));
      wts.push_back(upload_blob(wt.data(), wt.size() * 4));
      xs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(700 + si)));
      outs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(800 + si)));
    }
    const double flop = 2.0 * double(T * k) * 3.0 * double(D) * double(I);
    double ms[4];
    const oc::MoePath paths[4] = {oc::MoePath::Exact, oc::MoePath::Fast, oc::MoePath::Grouped,
                                  oc::MoePath::GroupedFp8};
    const char* only = std::getenv("DSINFER_MOE_BENCH_FP8_ONLY");  // kernel variants: time the FP8 path alone
    for (int pi = 0; pi < 4; ++pi)
      ms[pi] = only != nullptr && pi < 3 ? 0.0 : median_us([&](int i) {
                 die(oc::moe_cuda(xs[size_t(i)].as<float>(), T, idxs[size_t(i)].as<const int32_t>(),
                                  wts[size_t(i)].as<const float>(), k, sets[size_t(i)].ex, nullptr, 10.0f, 10.0f,
                                  outs[size_t(i)].as<float>(), ws, nullptr, paths[pi]),
                     "moe_cuda");
               }) / 1e3;
    const double rel = fp8_vs_bf16(sets[0], T, xs[0], idxs[0], wts[0], outs[0], ws);
    std::printf(
        "grouped prefill GEMMs (routed only): %5lld %8.1f | %8.3f %8.1f      | %8.3f %8.1f     | %8.3f %8.1f     "
        "| %8.3f %8.1f      | %.2e\n",
        (long long)T, flop / 1e9, ms[0], flop / ms[0] / 1e9, ms[1], flop / ms[1] / 1e9, ms[2], flop / ms[2] / 1e9,
        ms[3], flop / ms[3] / 1e9, rel);
  }
}

// Device-to-device copy of 2 GiB (read + write counted): the measured bandwidth ceiling.
double copy_ceiling() {
  const size_t bytes = size_t(1) << 30;
  Blob a = blob(bytes, 2, 1), b = blob(bytes, 2, 2);
  const double us = median_us([&](int) { check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice), "copy"); });
  return 2.0 * double(bytes) / (us * 1e-6);
}

// The fast path kernel by kernel (MoePath::Fast as moe_cuda runs it up to kMoeGroupedMinT tokens, each launch timed
// alone on one stream): the permutation, x to bf16 (alone and in the permutation's launch), the gate/up + SwiGLU and
// down kernels, the shared expert (FP8: through gemm_cuda as moe_shared_cuda runs it, then on each gemm_cuda
// precision), the gate/up and down kernels with the shared expert's grid rows (moe_fast_shared.h; the routed rows'
// bits checked equal, the shared output against moe_shared_cuda's), the combine, the fused route's whole chain; then
// moe_cuda itself without and with the shared expert (fused up to kMoeSharedFusedMaxT tokens, on the side stream
// above). GB/s = the kernel's weight bytes (touched experts, FP4 + E8M0) / time; "% copy" against the measured
// device-to-device copy.
void bench_stages(std::vector<Set>& sets, const std::vector<int64_t>& Ts) {
  const double ceiling = copy_ceiling();
  const size_t w_bytes = oc::weight_data_bytes(oc::WeightFormat::FP4_G32, I, D);
  const size_t s_bytes = oc::weight_scale_bytes(oc::WeightFormat::FP4_G32, I, D, true, 128, 128);
  const double proj_bytes = double(w_bytes + s_bytes), shared_bytes = 3.0 * double(I * D + (I / 128) * (D / 128));
  std::printf("stages: copy ceiling %.2f TB/s; us (GB/s, %% of copy) per kernel, median of %d, %d weight sets\n",
              ceiling / 1e12, kRuns, g_sets);
  oc::MoeWorkspace ws, side_ws;
  die(ws.reserve(4096, k, D, I, E), "reserve");
  die(side_ws.reserve(4096, k, D, I, E), "reserve");
  cudaStream_t side = nullptr;
  cudaEvent_t side_fork = nullptr, side_join = nullptr;
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
  check(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatest), "side stream");
  check(cudaEventCreateWithFlags(&side_fork, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&side_join, cudaEventDisableTiming), "event");
  uint64_t rng = 4242;
  for (int64_t T : Ts) {
    const int64_t n = T * k;
    struct Bufs {
      Blob idx, wt, x, out, offsets, perm, pos, active, big, xb, hb, yp, shy;
    };
    std::vector<Bufs> b(static_cast<size_t>(g_sets));
    std::set<int32_t> distinct;
    for (int si = 0; si < g_sets; ++si) {
      Bufs& q = b[size_t(si)];
      const std::vector<int32_t> idx = dsinfer::bench::random_routing(T, k, E, rng, si == 0 ? &distinct : nullptr);
      const std::vector<float> wt(size_t(n), 1.0f / 6.0f);
      q.idx = upload_blob(idx.data(), idx.size() * 4);
      q.wt = upload_blob(wt.data(), wt.size() * 4);
      q.x = blob(size_t(T * D) * 4, -1, uint64_t(900 + si));
      q.out = blob(size_t(T * D) * 4, -1, uint64_t(950 + si));
      q.shy = blob(size_t(T * D) * 4, -1, uint64_t(970 + si));
      q.offsets = blob(size_t(E + 1) * 4, 2, 1);
      q.active = blob(size_t(E + 1) * 4, 2, 1);
      q.big = blob(size_t(E + 1) * 4, 2, 1);
      q.perm = blob(size_t(n) * 4, 2, 1);
      q.pos = blob(size_t(n) * 4, 2, 1);
      q.xb = blob(size_t(T * D) * 2, 2, 1);  // x's token rows in bf16
      q.hb = blob(size_t((n + T) * I) * 2, 2, 1);
      q.yp = blob(size_t(n * D) * 4, 2, 1);
    }
    const bool one = n <= oc::kMoePrepMaxN;
    auto prep = [&](int i) {
      Bufs& q = b[size_t(i)];
      if (one) {
        oc::detail::launch_moe_prep(q.idx.as<const int32_t>(), n, k, E, q.offsets.as<int32_t>(), q.perm.as<int32_t>(),
                                    q.pos.as<int32_t>(), q.active.as<int32_t>(), nullptr, {}, q.big.as<int32_t>());
        return;
      }
      oc::detail::launch_moe_count(q.idx.as<const int32_t>(), n, E, q.offsets.as<int32_t>(), q.pos.as<int32_t>(),
                                   q.active.as<int32_t>(), nullptr, q.big.as<int32_t>());
      oc::detail::launch_moe_scatter(q.idx.as<const int32_t>(), n, k, E, q.offsets.as<const int32_t>(),
                                     q.perm.as<int32_t>(), q.pos.as<int32_t>(), nullptr);
    };
    const double t_prep = median_us(prep);
    for (int si = 0; si < g_sets; ++si) prep(si);
    const bool fused = oc::moe_shared_fused(oc::MoePath::Fast, oc::MoeExpertKernels::kFast, T, sets[0].ex, sets[0].sh);
    // x's T token rows to bf16 (the gate/up kernel's B operand, the shared expert's too): their own launch, or the
    // permutation's spare blocks (MoePlan::x_bf16_in_prep, one launch only)
    auto x_rows = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_x_bf16({.x = q.x.as<const float>(), .T = T, .K = D, .xb = q.xb.as<uint16_t>()}, nullptr);
    };
    auto prep_x = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_prep(q.idx.as<const int32_t>(), n, k, E, q.offsets.as<int32_t>(), q.perm.as<int32_t>(),
                                  q.pos.as<int32_t>(), q.active.as<int32_t>(), nullptr,
                                  {.x = q.x.as<const float>(), .T = T, .K = D, .xb = q.xb.as<uint16_t>()});
    };
    const double t_x_rows = median_us(x_rows);
    const double t_prep_x = one ? median_us(prep_x) : 0.0;
    for (int si = 0; si < g_sets; ++si) x_rows(si);
    const int64_t max_active = std::min<int64_t>(E, n);
    // with_shared: the shared expert's grid rows in front (moe_fast_shared.h), its output in q.shy
    const oc::MoeFastVariant v_new = oc::MoeFastVariant::kWordDecode, v_old = oc::MoeFastVariant::kSession18;
    // paired: the experts with more than 8 rows in the paired kernel (MoeFastArgs::big; the word decode only)
    const int64_t big_grid = oc::moe_paired_grid(n, E);
    auto gate_up = [&](int i, bool with_shared = false, oc::MoeFastVariant v = oc::moe_fast_variant(),
                       bool paired = false) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      const oc::MoeFastArgs a{.active = q.active.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                              .xb = q.xb.as<const uint16_t>(), .perm = q.perm.as<const int32_t>(),
                              .w1 = st.ex.w1.data, .s1 = st.ex.w1.scale, .w3 = st.ex.w3.data, .s3 = st.ex.w3.scale,
                              .K = D, .N = I, .limit = 10.0f, .hout = q.hb.as<uint16_t>(),
                              .big = paired ? q.big.as<const int32_t>() : nullptr, .big_grid = big_grid};
      oc::MoeFastShared sa;
      if (with_shared)
        sa = {.w1 = st.sh.w1.data, .s1 = st.sh.w1.scale, .w3 = st.sh.w3.data, .s3 = st.sh.w3.scale, .rows = T,
              .row0 = n, .limit = 10.0f};
      oc::detail::launch_moe_fast_shared(true, a, sa, max_active, nullptr, v);
    };
    auto down = [&](int i, bool with_shared = false, oc::MoeFastVariant v = oc::moe_fast_variant(),
                    bool paired = false) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      const oc::MoeFastArgs a{.active = q.active.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                              .xb = q.hb.as<const uint16_t>(), .w1 = st.ex.w2.data, .s1 = st.ex.w2.scale, .K = I,
                              .N = D, .yout = q.yp.as<float>(),
                              .big = paired ? q.big.as<const int32_t>() : nullptr, .big_grid = big_grid};
      oc::MoeFastShared sa;
      if (with_shared) sa = {.w1 = st.sh.w2.data, .s1 = st.sh.w2.scale, .rows = T, .row0 = n, .out = q.shy.as<float>()};
      oc::detail::launch_moe_fast_shared(false, a, sa, max_active, nullptr, v);
    };
    const double t_gu = median_us([&](int i) { gate_up(i, false); });
    const double t_dn = median_us([&](int i) { down(i); });
    // The two kernel variants (MoeFastVariant) and the word decode with the paired kernel, alternated in this
    // process: times, and their h / yp bits (weight set 0)
    constexpr int kVars = 3;
    double t_var[kVars][2];  // [old, new, new + paired][gate/up, down], mean of the two medians of each
    {
      double a[kVars][2][2];
      for (int rep = 0; rep < 2; ++rep)
        for (int vi = 0; vi < kVars; ++vi) {
          const oc::MoeFastVariant v = vi ? v_new : v_old;
          a[vi][0][rep] = median_us([&](int i) { gate_up(i, false, v, vi == 2); });
          a[vi][1][rep] = median_us([&](int i) { down(i, false, v, vi == 2); });
        }
      for (int vi = 0; vi < kVars; ++vi)
        for (int kk = 0; kk < 2; ++kk) t_var[vi][kk] = 0.5 * (a[vi][kk][0] + a[vi][kk][1]);
    }
    bool var_same = true;
    int max_rows = 0;
    {
      Bufs& q = b[0];
      std::vector<int32_t> offs(size_t(E + 1));
      check(cudaMemcpy(offs.data(), q.offsets.data(), offs.size() * 4, cudaMemcpyDeviceToHost), "offsets");
      for (int64_t e = 0; e < E; ++e) max_rows = std::max(max_rows, offs[size_t(e + 1)] - offs[size_t(e)]);
      auto fetch_bytes = [](const Blob& blob_, size_t bytes) {
        std::vector<uint8_t> h(bytes);
        check(cudaMemcpy(h.data(), blob_.data(), bytes, cudaMemcpyDeviceToHost), "fetch");
        return h;
      };
      std::vector<uint8_t> hv[kVars], yv[kVars];
      for (int vi = 0; vi < kVars; ++vi) {
        check(cudaMemset(q.hb.data(), 0xFF, size_t(n * I) * 2), "clear h");
        check(cudaMemset(q.yp.data(), 0xFF, size_t(n * D) * 4), "clear yp");
        gate_up(0, false, vi ? v_new : v_old, vi == 2);
        down(0, false, vi ? v_new : v_old, vi == 2);
        check(cudaDeviceSynchronize(), "variants");
        hv[vi] = fetch_bytes(q.hb, size_t(n * I) * 2);
        yv[vi] = fetch_bytes(q.yp, size_t(n * D) * 4);
      }
      var_same = hv[0] == hv[1] && yv[0] == yv[1] && hv[1] == hv[2] && yv[1] == yv[2];
    }
    // The same launches with the shared expert's rows (the fused route), then the bits: the routed rows of yp must
    // not change, and the fused shared output is compared with moe_shared_cuda's (normalised L2).
    const double t_gu_sh = median_us([&](int i) { gate_up(i, true); });
    const double t_dn_sh = median_us([&](int i) { down(i, true); });
    bool routed_same = true;
    double shared_err = 0.0;
    {
      Bufs& q = b[0];
      auto fetch = [](const Blob& blob_, size_t bytes) {
        std::vector<uint8_t> h(bytes);
        check(cudaMemcpy(h.data(), blob_.data(), bytes, cudaMemcpyDeviceToHost), "fetch");
        return h;
      };
      gate_up(0, false);
      down(0, false);
      check(cudaDeviceSynchronize(), "routed only");
      const std::vector<uint8_t> y0 = fetch(q.yp, size_t(n * D) * 4);
      gate_up(0, true);
      down(0, true);
      check(cudaDeviceSynchronize(), "with shared");
      routed_same = fetch(q.yp, size_t(n * D) * 4) == y0;
      const std::vector<uint8_t> fused = fetch(q.shy, size_t(T * D) * 4);
      die(oc::moe_shared_cuda(q.x.as<const float>(), T, sets[0].sh, 10.0f, q.shy.as<float>(), ws, nullptr,
                              oc::MoePath::Fast),
          "moe_shared_cuda");
      check(cudaDeviceSynchronize(), "shared");
      const std::vector<uint8_t> ref = fetch(q.shy, size_t(T * D) * 4);
      const float* a = reinterpret_cast<const float*>(fused.data());
      const float* r = reinterpret_cast<const float*>(ref.data());
      double num = 0.0, den = 0.0;
      for (int64_t j = 0; j < T * D; ++j) {
        num += (double(a[j]) - double(r[j])) * (double(a[j]) - double(r[j]));
        den += double(r[j]) * double(r[j]);
      }
      shared_err = std::sqrt(num / std::max(den, 1e-300));
    }
    // The shared expert as moe_shared_cuda runs it (moe_shared_precision), then on each gemm_cuda precision.
    const double t_sh = median_us([&](int i) {
      die(oc::moe_shared_cuda(b[size_t(i)].x.as<const float>(), T, sets[size_t(i)].sh, 10.0f,
                              b[size_t(i)].shy.as<float>(), ws, nullptr, oc::MoePath::Fast),
          "moe_shared_cuda");
    });
    const oc::GemmPrecision precs[3] = {oc::GemmPrecision::kBf16, oc::GemmPrecision::kFp32SmallM,
                                        oc::GemmPrecision::kGemv};
    double t_prec[3];
    for (int pi = 0; pi < 3; ++pi)
      t_prec[pi] = median_us([&](int i) {
        Bufs& q = b[size_t(i)];
        const oc::MoeSharedDevice& sh = sets[size_t(i)].sh;
        float* s1 = q.yp.as<float>();  // scratch: [T, I] twice fits in the [n, D] expert outputs
        float* s3 = s1 + T * I;
        die(oc::gemm_cuda(q.x.as<const float>(), T, D, sh.w1, s1, I, false, nullptr, precs[pi]), "gemm w1");
        die(oc::gemm_cuda(q.x.as<const float>(), T, D, sh.w3, s3, I, false, nullptr, precs[pi]), "gemm w3");
        oc::detail::launch_swiglu(s1, s3, T, nullptr, I, 10.0f, nullptr);
        die(oc::gemm_cuda(s1, T, I, sh.w2, q.shy.as<float>(), D, false, nullptr, precs[pi]), "gemm w2");
      });
    auto combine = [&](int i) {
      Bufs& q = b[size_t(i)];
      const dsinfer::ops::RoutedSum f{q.yp.as<const float>(), q.pos.as<const int32_t>(), q.wt.as<const float>(), k,
                                      q.shy.as<const float>()};
      die(oc::moe_combine_cuda(f, T, D, q.out.as<float>(), nullptr), "moe_combine_cuda");
    };
    const double t_comb = median_us(combine);
    // The fused route forced at any T (moe_cuda's launches with the shared expert inside the decode kernels)
    // The fused route's chain (moe_cuda's launches with the shared expert inside the decode kernels, forced at any
    // T), x's bf16 rows in the permutation's launch (as moe_cuda: MoePlan::x_bf16_in_prep) or in their own, with
    // programmatic dependent launch (cuda/pdl.h) on or off: t_chain[in_prep][pdl], alternated in one run.
    auto chain = [&](int i, bool in_prep) {
      if (in_prep && one) {
        prep_x(i);
      } else {
        prep(i);
        x_rows(i);
      }
      gate_up(i, true);
      down(i, true);
      combine(i);
    };
    double t_chain[2][2];
    const bool pdl_was = dsinfer::cuda::pdl_enabled();
    for (int pdl = 0; pdl < 2; ++pdl)
      for (int in_prep = 0; in_prep < 2; ++in_prep) {
        dsinfer::cuda::pdl_set_enabled(pdl == 1);
        t_chain[in_prep][pdl] = median_us([&](int i) { chain(i, in_prep == 1); });
      }
    dsinfer::cuda::pdl_set_enabled(pdl_was);
    const double t_fused = t_chain[1][pdl_was ? 1 : 0];
    double t_full[2];
    for (int with_shared = 0; with_shared < 2; ++with_shared)
      t_full[with_shared] = median_us([&](int i) {
        Bufs& q = b[size_t(i)];
        const Set& st = sets[size_t(i)];
        die(oc::moe_cuda(q.x.as<const float>(), T, q.idx.as<const int32_t>(), q.wt.as<const float>(), k, st.ex,
                         with_shared ? &st.sh : nullptr, 10.0f, 10.0f, q.out.as<float>(), ws, nullptr,
                         oc::MoePath::Fast),
            "moe_cuda");
      });
    // The route before this session, for an A/B in the same run: moe_cuda routed only, and the shared expert through
    // gemm_cuda (moe_shared_cuda) on a greatest-priority side stream launched after it, forked before and joined
    // after (as MoeWorkspace's side stream; the combine's shared add is the only work left out).
    const double t_side = median_us([&](int i) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      check(cudaEventRecord(side_fork, nullptr), "fork");
      check(cudaStreamWaitEvent(side, side_fork, 0), "fork wait");
      die(oc::moe_cuda(q.x.as<const float>(), T, q.idx.as<const int32_t>(), q.wt.as<const float>(), k, st.ex, nullptr,
                       10.0f, 10.0f, q.out.as<float>(), ws, nullptr, oc::MoePath::Fast),
          "moe_cuda");
      die(oc::moe_shared_cuda(q.x.as<const float>(), T, st.sh, 10.0f, q.shy.as<float>(), side_ws, side,
                              oc::MoePath::Fast),
          "moe_shared_cuda");
      check(cudaEventRecord(side_join, side), "join");
      check(cudaStreamWaitEvent(nullptr, side_join, 0), "join wait");
    });
    const double ex = double(distinct.size()), gu_b = ex * 2.0 * proj_bytes, dn_b = ex * proj_bytes;
    auto bw = [&](double bytes, double us) { return bytes / (us * 1e-6); };
    auto pct = [&](double bytes, double us) { return 100.0 * bw(bytes, us) / ceiling; };
    std::printf("T %4lld: %3zu experts, %s; prep %.1f | x rows %.1f | prep with x rows %.1f | gate/up %.1f (%.0f GB/s "
                "%.0f%%)", (long long)T, distinct.size(), one ? "prep 1 launch" : "count+scatter", t_prep, t_x_rows,
                t_prep_x, t_gu, bw(gu_b, t_gu) / 1e9, pct(gu_b, t_gu));
    std::printf(" | down %.1f (%.0f GB/s %.0f%%)\n", t_dn, bw(dn_b, t_dn) / 1e9, pct(dn_b, t_dn));
    std::printf("        variants (alternated, %d rows in the largest expert): gate/up session-18 %.1f (%.0f%%) vs word decode "
                "%.1f (%.0f%%) | down %.1f (%.0f%%) vs %.1f (%.0f%%) | sum %.1f vs %.1f us; h and yp bits %s\n",
                max_rows, t_var[0][0], pct(gu_b, t_var[0][0]), t_var[1][0], pct(gu_b, t_var[1][0]), t_var[0][1],
                pct(dn_b, t_var[0][1]), t_var[1][1], pct(dn_b, t_var[1][1]), t_var[0][0] + t_var[0][1],
                t_var[1][0] + t_var[1][1], var_same ? "same" : "DIFFER");
    std::printf("        paired kernel (experts with > 8 rows, 16 a pass; big_grid %lld): gate/up %.1f (%.0f%%) | down "
                "%.1f (%.0f%%) | sum %.1f us against the word decode's %.1f\n", (long long)big_grid, t_var[2][0],
                pct(gu_b, t_var[2][0]), t_var[2][1], pct(dn_b, t_var[2][1]), t_var[2][0] + t_var[2][1],
                t_var[1][0] + t_var[1][1]);
    std::printf("        shared as bf16 / fp32-small-m / gemv: %.1f / %.1f / %.1f us\n", t_prec[0], t_prec[1], t_prec[2]);
    const double routed_b = gu_b + dn_b, all_b = routed_b + shared_bytes;
    std::printf("        fused shared: gate/up %.1f (%.0f GB/s %.0f%%) | down %.1f (%.0f GB/s %.0f%%); "
                  "routed bits %s; shared vs moe_shared_cuda %.2e\n",
                  t_gu_sh, bw(gu_b + 2.0 / 3.0 * shared_bytes, t_gu_sh) / 1e9,
                  pct(gu_b + 2.0 / 3.0 * shared_bytes, t_gu_sh), t_dn_sh,
                  bw(dn_b + shared_bytes / 3.0, t_dn_sh) / 1e9, pct(dn_b + shared_bytes / 3.0, t_dn_sh),
                  routed_same ? "same" : "DIFFER", shared_err);
    std::printf("        shared %.1f (%.0f GB/s %.0f%%) | combine %.1f | moe_cuda routed %.1f (%.0f GB/s %.0f%%), "
                "with shared %.1f (%.0f GB/s %.0f%%; floor at copy %.1f us)\n",
                t_sh, bw(shared_bytes, t_sh) / 1e9, pct(shared_bytes, t_sh), t_comb, t_full[0],
                bw(routed_b, t_full[0]) / 1e9, pct(routed_b, t_full[0]), t_full[1], bw(all_b, t_full[1]) / 1e9,
                pct(all_b, t_full[1]), all_b / ceiling * 1e6);
    std::printf("        A/B: with shared %.1f us (%.0f%% of the copy) as moe_cuda runs it now (%s); fused %.1f us "
                "(%.0f%%); the shared expert through gemm_cuda on the side stream %.1f us (%.0f%%)\n",
                t_full[1], pct(all_b, t_full[1]), fused ? "fused" : "side stream", t_fused, pct(all_b, t_fused), t_side,
                pct(all_b, t_side));
    std::printf("        fused chain, x rows in their own launch / in the permutation's (PDL off): %.1f / %.1f us; "
                "PDL on: %.1f / %.1f us\n", t_chain[0][0], t_chain[1][0], t_chain[0][1], t_chain[1][1]);
  }
  cudaEventDestroy(side_fork);
  cudaEventDestroy(side_join);
  cudaStreamDestroy(side);
}

// The prefill kernels one by one (each launch timed alone on one stream): the FP8 grouped GEMMs (MoePath::Fast's
// prefill route until session 18; MoePath::Fast above kMoeGroupedMinT now takes the RS kernels, timed beside them): the permutation (count, scatter), the two-term quantization of x
// into permuted rows, the tile list, the gate/up + SwiGLU and down GEMMs, the shared expert (moe_shared_cuda), the
// combine; then moe_cuda itself routed only and with the shared expert (on the side stream). "other" = moe_cuda with
// the shared expert minus the two GEMMs. Last: an FNV-1a hash of moe_cuda's output (weight set 0, with and without
// the shared expert), so two builds can be checked for the same bits on the same inputs.
uint64_t fnv_hash(const Blob& b, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  check(cudaMemcpy(h.data(), b.data(), bytes, cudaMemcpyDeviceToHost), "download");
  uint64_t v = 1469598103934665603ull;
  for (uint8_t c : h) v = (v ^ c) * 1099511628211ull;
  return v;
}

void bench_prefill(std::vector<Set>& sets, const std::vector<int64_t>& Ts) {
  namespace md = dsinfer::ops::moe_detail;
  std::printf("prefill stages (FP8 grouped GEMMs and the RS kernels; moe_cuda = MoePath::Fast): us per launch, "
              "median of %d, %d weight sets, "
              "uniform random routing\n",
              kRuns, g_sets);
  int64_t maxT = 1;
  for (int64_t T : Ts) maxT = std::max(maxT, T);
  oc::MoeWorkspace ws;
  die(ws.reserve(maxT, k, D, I, E), "reserve");
  uint64_t rng = 5151;
  for (int64_t T : Ts) {
    const int64_t n = T * k, max_tiles = md::grp_max_tiles(n, E);
    struct Bufs {
      Blob idx, wt, x, out, shy, offsets, perm, pos, tiles, tiles_e, xq, hq, yp, xb, hb;
    };
    std::vector<Bufs> b(static_cast<size_t>(g_sets));
    for (int si = 0; si < g_sets; ++si) {
      Bufs& q = b[size_t(si)];
      const std::vector<int32_t> idx = dsinfer::bench::random_routing(T, k, E, rng);
      const std::vector<float> wt(size_t(n), 1.0f / 6.0f);
      q.idx = upload_blob(idx.data(), idx.size() * 4);
      q.wt = upload_blob(wt.data(), wt.size() * 4);
      q.x = blob(size_t(T * D) * 4, -1, uint64_t(1900 + si));
      q.out = blob(size_t(T * D) * 4, -1, uint64_t(1950 + si));
      q.shy = blob(size_t(T * D) * 4, -1, uint64_t(1970 + si));
      q.offsets = blob(size_t(E + 1) * 4, 2, 1);
      q.perm = blob(size_t(n) * 4, 2, 1);
      q.pos = blob(size_t(n) * 4, 2, 1);
      q.tiles = blob(size_t(1 + 2 * max_tiles) * 4, 2, 1);
      q.tiles_e = blob(size_t(1 + 2 * max_tiles) * 4, 2, 1);
      q.xq = blob(size_t(n * D) * 2 + size_t(n * (D / 128)) * 4, 2, 1);
      q.hq = blob(size_t(n * I) * 2 + size_t(n * (I / 64)) * 4, 2, 1);
      q.yp = blob(size_t(n * D) * 4, 2, 1);
      q.xb = blob(size_t(n * D) * 2, 2, 1);
      q.hb = blob(size_t(n * I) * 2, 2, 1);
    }
    auto count = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_count(q.idx.as<const int32_t>(), n, E, q.offsets.as<int32_t>(), q.pos.as<int32_t>(),
                                   nullptr, nullptr);
    };
    auto scatter = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_scatter(q.idx.as<const int32_t>(), n, k, E, q.offsets.as<const int32_t>(),
                                     q.perm.as<int32_t>(), q.pos.as<int32_t>(), nullptr);
    };
    const double t_count = median_us(count);
    for (int si = 0; si < g_sets; ++si) count(si);
    const double t_scatter = median_us(scatter);
    for (int si = 0; si < g_sets; ++si) scatter(si);
    auto quant = [&](int i) {
      Bufs& q = b[size_t(i)];
      uint8_t* xq = q.xq.data();
      oc::detail::launch_moe_quant(q.x.as<const float>(), q.pos.as<const int32_t>(), T, k, D, md::kFp8BlockGateUp,
                                   xq, xq + n * D, reinterpret_cast<float*>(xq + 2 * n * D), nullptr);
    };
    const double t_quant = median_us(quant);
    for (int si = 0; si < g_sets; ++si) quant(si);
    // the tile list as moe_cuda builds it (kMoeTileListBySize) and in expert order (the RS variants below)
    auto tiles = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_tile_list(q.offsets.as<const int32_t>(), E, q.tiles.as<int32_t>(), nullptr);
    };
    auto tiles_e = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_tile_list(q.offsets.as<const int32_t>(), E, q.tiles_e.as<int32_t>(), nullptr, false);
    };
    const double t_tiles = median_us(tiles);
    for (int si = 0; si < g_sets; ++si) tiles(si);
    const double t_tiles_e = median_us(tiles_e);
    for (int si = 0; si < g_sets; ++si) tiles_e(si);
    auto gemm = [&](int i, bool gate_up) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      uint8_t *xq = q.xq.data(), *hq = q.hq.data();
      const oc::MoeGroupedFp8Args gu{.tiles = q.tiles.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                                     .a = xq, .a_lo = xq + n * D, .a_scale = reinterpret_cast<float*>(xq + 2 * n * D),
                                     .rows_a = n, .w1 = st.ex.w1.data, .s1 = st.ex.w1.scale, .w3 = st.ex.w3.data,
                                     .s3 = st.ex.w3.scale, .K = D, .N = I, .limit = 10.0f, .hq = hq,
                                     .hq_lo = hq + n * I, .hs = reinterpret_cast<float*>(hq + 2 * n * I)};
      const oc::MoeGroupedFp8Args dn{.tiles = q.tiles.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                                     .a = hq, .a_lo = hq + n * I, .a_scale = reinterpret_cast<float*>(hq + 2 * n * I),
                                     .rows_a = n, .w1 = st.ex.w2.data, .s1 = st.ex.w2.scale, .K = I, .N = D,
                                     .yout = q.yp.as<float>()};
      if (!oc::detail::launch_moe_grouped_fp8(gate_up, gate_up ? gu : dn, max_tiles, nullptr)) {
        std::fprintf(stderr, "launch_moe_grouped_fp8: no TMA map\n");
        std::exit(1);
      }
    };
    const double t_gu = median_us([&](int i) { gemm(i, true); });
    for (int si = 0; si < g_sets; ++si) gemm(si, true);
    const double t_dn = median_us([&](int i) { gemm(i, false); });
    for (int si = 0; si < g_sets; ++si) gemm(si, false);
    // The RS kernels (moe_grouped_rs.cu, MoePath::GroupedRs) on the same rows: x to bf16 in permuted order, then
    // gate/up and down in the variants below (same bits expected: each column's wgmmas are the same).
    auto xp = [&](int i) {
      Bufs& q = b[size_t(i)];
      oc::detail::launch_moe_grouped_xp(q.x.as<const float>(), nullptr, q.pos.as<const int32_t>(), T, k, D,
                                        reinterpret_cast<uint16_t*>(q.xb.data()), nullptr);
    };
    const double t_xp = median_us(xp);
    for (int si = 0; si < g_sets; ++si) xp(si);
    // Variants: consumer warpgroups, wgmma N per item (fine: rows rounded up to 16; else 96 / 128), the tile list (by
    // size, largest first; else expert order), the stage boundary (early: the next stage's operands before the
    // drain; else after it), the wgmma shape switch (item: per item; else per stage) and the consumer code
    // (MoeGroupedRsArgs::variant: 8 session 24's kWordStageItem, the default since session 26). 0 is session 18's
    // default, 3 session 19's, 7 session 23's, 4 the cwg 2 fallback.
    // DSINFER_MOE_BENCH_RS_VARIANTS picks (and may repeat) indices of this list.
    using RsVar = oc::MoeGroupedRsVariant;
    struct RsVariant {
      int cwg;
      bool fine, by_size, early, item;
      RsVar var = RsVar::kSession23;
    };
    const RsVariant all_vars[] = {{4, false, false, false, false},
                                  {4, true, false, false, false},
                                  {4, false, true, false, false},
                                  {4, true, true, false, false},
                                  {2, true, true, true, true},
                                  {4, true, true, true, false},
                                  {4, true, true, false, true},
                                  {4, true, true, true, true},
                                  {4, true, true, true, true, RsVar::kWordStageItem}};
    std::vector<RsVariant> vars = {all_vars[0], all_vars[3], all_vars[4], all_vars[7], all_vars[8]};
    if (!g_rs_variants.empty()) {
      vars.clear();
      for (int vi : g_rs_variants) vars.push_back(all_vars[vi]);
    }
    const int kVars = int(vars.size());
    auto rs = [&](int i, bool gate_up, const RsVariant& v) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      uint16_t* xb = reinterpret_cast<uint16_t*>(q.xb.data());
      uint16_t* hb = reinterpret_cast<uint16_t*>(q.hb.data());
      const int32_t* tl = v.by_size ? q.tiles.as<const int32_t>() : q.tiles_e.as<const int32_t>();
      const oc::MoeGroupedRsArgs gu{.tiles = tl, .offsets = q.offsets.as<const int32_t>(), .a = xb, .rows_a = n,
                                    .w1 = st.ex.w1.data, .s1 = st.ex.w1.scale, .w3 = st.ex.w3.data,
                                    .s3 = st.ex.w3.scale, .K = D, .N = I, .limit = 10.0f, .hout = hb, .cwg = v.cwg,
                                    .fine_n = v.fine, .early_next = v.early, .item_switch = v.item,
                                    .variant = v.var};
      const oc::MoeGroupedRsArgs dn{.tiles = tl, .offsets = q.offsets.as<const int32_t>(), .a = hb, .rows_a = n,
                                    .w1 = st.ex.w2.data, .s1 = st.ex.w2.scale, .K = I, .N = D,
                                    .yout = q.yp.as<float>(), .cwg = v.cwg, .fine_n = v.fine, .early_next = v.early,
                                    .item_switch = v.item, .variant = v.var};
      if (!oc::detail::launch_moe_grouped_rs(gate_up, gate_up ? gu : dn, max_tiles, nullptr)) {
        std::fprintf(stderr, "launch_moe_grouped_rs: no TMA map\n");
        std::exit(1);
      }
    };
    if (g_profile) {  // each variant's two kernels once, for ncu (-k regex:moe_grouped_rs_kernel -c 2 x variants)
      for (const RsVariant& v : vars) {
        rs(0, true, v);
        rs(0, false, v);
      }
      check(cudaDeviceSynchronize(), "sync");
      std::printf("prefill T %5lld: profile launches of %d RS variants done\n", (long long)T, kVars);
      continue;
    }
    // [variant][gate/up, down]; the hashes of yp (weight set 0) after each variant
    std::vector<std::array<double, 2>> t_rs(static_cast<size_t>(kVars));
    std::vector<uint64_t> h_rs(static_cast<size_t>(kVars));
    int v_default = 0;
    for (int vi = 0; vi < kVars; ++vi) {
      const RsVariant& v = vars[vi];
      if (v.cwg == oc::kMoeGroupedRsCwg && v.fine == oc::kMoeGroupedRsFineN && v.by_size == oc::kMoeTileListBySize &&
          v.early == oc::kMoeGroupedRsEarlyNext && v.item == oc::kMoeGroupedRsItemSwitch &&
          v.var == oc::moe_rs_variant())
        v_default = vi;
      t_rs[size_t(vi)][0] = median_us([&](int i) { rs(i, true, v); });
      for (int si = 0; si < g_sets; ++si) rs(si, true, v);
      t_rs[size_t(vi)][1] = median_us([&](int i) { rs(i, false, v); });
      for (int si = 0; si < g_sets; ++si) rs(si, false, v);
      check(cudaDeviceSynchronize(), "sync");
      h_rs[size_t(vi)] = fnv_hash(b[0].yp, size_t(n * D) * 4);
    }
    // RS yp (weight set 0) against the bf16 grouped path's (moe_grouped.cu: same roundings, another k order) on the
    // valid rows: normalized L2 and the largest elementwise difference over the row's largest magnitude
    {
      Bufs& q = b[0];
      const Set& st = sets[0];
      const size_t cnt = size_t(n * D);
      std::vector<float> y_rs(cnt), y_ref(cnt);
      check(cudaMemcpy(y_rs.data(), q.yp.data(), cnt * 4, cudaMemcpyDeviceToHost), "download");
      uint16_t* xb = reinterpret_cast<uint16_t*>(q.xb.data());
      uint16_t* hb = reinterpret_cast<uint16_t*>(q.hb.data());
      oc::detail::launch_moe_grouped_x(q.x.as<const float>(), T, D, xb, nullptr);
      const oc::MoeGroupedArgs gu{.tiles = q.tiles.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                                  .perm_token = q.perm.as<const int32_t>(), .a = xb, .w1 = st.ex.w1.data,
                                  .s1 = st.ex.w1.scale, .w3 = st.ex.w3.data, .s3 = st.ex.w3.scale, .K = D, .N = I,
                                  .limit = 10.0f, .hout = hb};
      const oc::MoeGroupedArgs dn{.tiles = q.tiles.as<const int32_t>(), .offsets = q.offsets.as<const int32_t>(),
                                  .a = hb, .w1 = st.ex.w2.data, .s1 = st.ex.w2.scale, .K = I, .N = D,
                                  .yout = q.yp.as<float>()};
      oc::detail::launch_moe_grouped(true, gu, max_tiles, nullptr);
      oc::detail::launch_moe_grouped(false, dn, max_tiles, nullptr);
      check(cudaDeviceSynchronize(), "sync");
      check(cudaMemcpy(y_ref.data(), q.yp.data(), cnt * 4, cudaMemcpyDeviceToHost), "download");
      int32_t rows = 0;
      check(cudaMemcpy(&rows, q.offsets.as<const int32_t>() + E, 4, cudaMemcpyDeviceToHost), "download");
      double num = 0, den = 0, worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double amax = 0, dmax = 0;
        for (int64_t c = 0; c < D; ++c) {
          const double a = y_rs[size_t(r * D + c)], bref = y_ref[size_t(r * D + c)];
          num += (a - bref) * (a - bref);
          den += bref * bref;
          amax = std::max(amax, std::fabs(bref));
          dmax = std::max(dmax, std::fabs(a - bref));
        }
        if (amax > 0) worst = std::max(worst, dmax / amax);
      }
      std::printf("prefill T %5lld: RS vs bf16 grouped yp (%d rows): normalized L2 %.3e, worst row max|diff|/max|y| "
                  "%.3e\n",
                  (long long)T, rows, std::sqrt(num / std::max(den, 1e-300)), worst);
    }
    const double flop_rs = 2.0 * double(n) * 3.0 * double(D) * double(I);
    for (int vi = 0; vi < kVars; ++vi) {
      const size_t u = size_t(vi);
      const double sum = t_rs[u][0] + t_rs[u][1];
      std::printf("prefill T %5lld: RS x->bf16 permuted %.1f | cwg %d N %s tiles %s boundary %s switch %s code %d: "
                  "gate/up %.1f down %.1f (GEMMs %.1f us, %.0f TFLOP/s) | yp hash %016llx (%s)%s\n",
                  (long long)T, t_xp, vars[u].cwg, vars[u].fine ? "fine  " : "96/128",
                  vars[u].by_size ? "by size" : "expert ", vars[u].early ? "early" : "drain",
                  vars[u].item ? "item " : "stage", int(vars[u].var), t_rs[u][0], t_rs[u][1], sum,
                  flop_rs / (sum * 1e-6) / 1e12,
                  (unsigned long long)h_rs[u], h_rs[u] == h_rs[0] ? "same" : "DIFFER",
                  vi == v_default ? " <- default" : "");
    }
    if (g_rs_only) continue;
    const double t_sh = median_us([&](int i) {
      die(oc::moe_shared_cuda(b[size_t(i)].x.as<const float>(), T, sets[size_t(i)].sh, 10.0f,
                              b[size_t(i)].shy.as<float>(), ws, nullptr, oc::MoePath::Fast),
          "moe_shared_cuda");
    });
    const double t_comb = median_us([&](int i) {
      Bufs& q = b[size_t(i)];
      const dsinfer::ops::RoutedSum f{q.yp.as<const float>(), q.pos.as<const int32_t>(), q.wt.as<const float>(), k,
                                      q.shy.as<const float>()};
      die(oc::moe_combine_cuda(f, T, D, q.out.as<float>(), nullptr), "moe_combine_cuda");
    });
    auto full = [&](int i, bool with_shared) {
      Bufs& q = b[size_t(i)];
      const Set& st = sets[size_t(i)];
      die(oc::moe_cuda(q.x.as<const float>(), T, q.idx.as<const int32_t>(), q.wt.as<const float>(), k, st.ex,
                       with_shared ? &st.sh : nullptr, 10.0f, 10.0f, q.out.as<float>(), ws, nullptr,
                       oc::MoePath::Fast),
          "moe_cuda");
    };
    const double t_routed = median_us([&](int i) { full(i, false); });
    const double t_full = median_us([&](int i) { full(i, true); });
    full(0, false);
    check(cudaDeviceSynchronize(), "sync");
    const uint64_t h_routed = fnv_hash(b[0].out, size_t(T * D) * 4);
    full(0, true);
    check(cudaDeviceSynchronize(), "sync");
    const uint64_t h_full = fnv_hash(b[0].out, size_t(T * D) * 4);
    const double flop = 2.0 * double(n) * 3.0 * double(D) * double(I);
    std::printf("prefill T %5lld: count %.1f | scatter %.1f | FP8: quant x %.1f | tiles %.1f (expert order %.1f) | "
                "gate/up %.1f | down %.1f (GEMMs %.1f us, %.0f TFLOP/s) | shared %.1f | combine %.1f\n",
                (long long)T, t_count, t_scatter, t_quant, t_tiles, t_tiles_e, t_gu, t_dn, t_gu + t_dn,
                flop / ((t_gu + t_dn) * 1e-6) / 1e12, t_sh, t_comb);
    // moe_cuda (MoePath::Fast) runs the RS kernels as the default variant (kMoeGroupedRsCwg, kMoeGroupedRsFineN,
    // kMoeTileListBySize)
    const double t_rs_gu = t_rs[size_t(v_default)][0];
    const double t_rs_dn = t_rs[size_t(v_default)][1];
    std::printf("prefill T %5lld: moe_cuda routed %.1f us, with shared %.1f us (other than the RS GEMMs %.1f; sum of "
                "the launches %.1f); hash routed %016llx with shared %016llx\n",
                (long long)T, t_routed, t_full, t_full - t_rs_gu - t_rs_dn,
                t_count + t_scatter + t_xp + t_tiles + t_rs_gu + t_rs_dn + t_sh + t_comb, (unsigned long long)h_routed,
                (unsigned long long)h_full);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts;
  const bool grouped_only = argc > 1 && std::string(argv[1]) == "grouped";
  const bool stages = argc > 1 && std::string(argv[1]) == "stages";
  const bool prefill = argc > 1 && std::string(argv[1]) == "prefill";
  const long long max_t = prefill ? 16384 : 4096;
  for (int i = grouped_only ? argc : stages || prefill ? 2 : 1; i < argc; ++i) {
    const long long v = std::atoll(argv[i]);
    if (v < 1 || v > max_t) {
      std::fprintf(stderr, "usage: dsinfer_moe_bench [T ...] (1 <= T <= %lld), got '%s'\n", max_t, argv[i]);
      return 2;
    }
    Ts.push_back(int64_t(v));
  }
  if (Ts.empty())
    Ts = prefill  ? std::vector<int64_t>{2048, 4096, 8192}
         : stages ? std::vector<int64_t>{1, 8, 64, 128, 256}
                  : std::vector<int64_t>{1, 8, 64, 128, 256, 512, 1024, 4096};
  if (const char* env = std::getenv("DSINFER_MOE_BENCH_SETS")) g_sets = std::clamp(std::atoi(env), 1, kMaxSets);
  if (const char* env = std::getenv("DSINFER_MOE_BENCH_RS_ONLY")) g_rs_only = std::atoi(env) == 1;
  if (const char* env = std::getenv("DSINFER_MOE_BENCH_PROFILE")) g_profile = std::atoi(env) == 1;
  if (const char* env = std::getenv("DSINFER_MOE_BENCH_RS_VARIANTS")) {
    for (const char* q = env; *q != '\0';) {
      char* end = nullptr;
      const long v = std::strtol(q, &end, 10);
      if (end == q || v < 0 || v > 10) {
        std::fprintf(stderr, "DSINFER_MOE_BENCH_RS_VARIANTS: indices 0..10, comma-separated, got '%s'\n", env);
        return 2;
      }
      g_rs_variants.push_back(int(v));
      q = *end == ',' ? end + 1 : end;
    }
  }
  int dev = 0;
  if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs; MoE FP4 256 experts top-6 D=4096 I=2048 + FP8 shared; floor = bytes / %.1f TB/s; "
              "%d rotating weight sets\n",
              prop.name, prop.multiProcessorCount, kHbm / 1e12, g_sets);
  const size_t w_bytes = oc::weight_data_bytes(oc::WeightFormat::FP4_G32, I, D);
  const size_t s_bytes = oc::weight_scale_bytes(oc::WeightFormat::FP4_G32, I, D, true, 128, 128);
  std::vector<Set> sets(g_sets);
  for (int si = 0; si < g_sets; ++si) build(sets[size_t(si)], si, w_bytes, s_bytes);
  if (grouped_only) {
    bench_grouped(sets);
    return 0;
  }
  if (stages) {
    bench_stages(sets, Ts);
    return 0;
  }
  if (prefill) {
    bench_prefill(sets, Ts);
    return 0;
  }
  oc::MoeWorkspace ws;
  die(ws.reserve(4096, k, D, I, E), "reserve");
  const double expert_bytes = 3.0 * double(w_bytes + s_bytes);
  const double shared_bytes = 3.0 * double(I * D + (I / 128) * (D / 128));
  std::printf("%5s %8s %9s | %-45s | %-45s\n", "T", "experts", "MB",
              "with shared: floor  exact   fast (us, x floor, %)", "routed only: floor  exact   fast");
  uint64_t rng = 12345;
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  for (int64_t T : Ts) {
    std::vector<Blob> xs, outs, idxs, wts;
    std::set<int32_t> distinct;
    for (int si = 0; si < g_sets; ++si) {
      std::vector<int32_t> idx(size_t(T * k));
      std::vector<float> wt(size_t(T * k), 1.0f / 6.0f);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
          int32_t e;
          bool dup;
          do {
            e = int32_t(next() % uint64_t(E));
            dup = false;
            for (int64_t q = 0; q < j; ++q) dup |= idx[size_t(t * k + q)] == e;
          } while (dup);
          idx[size_t(t * k + j)] = e;
          if (si == 0) distinct.insert(e);
        }
      idxs.push_back(upload_blob(idx.data(), idx.size() * 4));
      wts.push_back(upload_blob(wt.data(), wt.size() * 4));
      xs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(500 + si)));
      outs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(600 + si)));
    }
    double us[2][2];  // [with shared][path]
    for (int with_shared = 0; with_shared < 2; ++with_shared)
      for (int fast = 0; fast < 2; ++fast)
        us[with_shared][fast] = median_us([&](int i) {
          const Set& st = sets[size_t(i)];
          die(oc::moe_cuda(xs[size_t(i)].as<float>(), T, idxs[size_t(i)].as<const int32_t>(),
                           wts[size_t(i)].as<const float>(), k, st.ex, with_shared ? &st.sh : nullptr, 10.0f, 10.0f,
                           outs[size_t(i)].as<float>(), ws, nullptr, fast ? oc::MoePath::Fast : oc::MoePath::Exact),
              "moe_cuda");
        });
    const double io = 8.0 * double(T * D), routed = double(distinct.size()) * expert_bytes + io;
    const double f1 = (routed + shared_bytes) / kHbm * 1e6, f0 = routed / kHbm * 1e6;
    std::printf(
        "%5lld %8zu %9.1f | %7.1f %7.1f (%5.2fx) %7.1f (%5.2fx %3.0f%%) | %7.1f %7.1f (%5.2fx) %7.1f (%5.2fx %3.0f%%)\n",
        (long long)T, distinct.size(), (routed + shared_bytes) / 1e6, f1, us[1][0], us[1][0] / f1, us[1][1],
        us[1][1] / f1, 100.0 * f1 / us[1][1], f0, us[0][0], us[0][0] / f0, us[0][1], us[0][1] / f0,
        100.0 * f0 / us[0][1]);
  }
  bench_grouped(sets);
  return 0;
}
