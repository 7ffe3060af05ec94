// Benchmark of the grouped FP8 MoE GEMMs at V4-Flash shapes (issue 30): routed experts of one layer only (256
// experts, top-6, D 4096, I 2048, swiglu limit 10, uniform random routing), T = 512 / 4,096 / 16,384 (argv
// overrides). Per T, ms and TFLOP/s (2 * T * 6 * 3 * D * I / time):
//   old:       moe_cuda MoePath::GroupedFp8 (moe_grouped_fp8.cu, FP4 experts expanded to e4m3, two-term activations)
//   cutlass:   moe_cuda MoePath::CutlassFp8 (moe_grouped_cutlass.cu, FP8_BLOCK experts with E8M0 scales)
//   exact:     moe_cuda MoePath::Exact on the same FP8_BLOCK experts (the path MoePath::Fast took for them before)
//   gemms:     the CUTLASS path's two grouped GEMMs alone (gate/up as 2 x 256 groups, then down; bf16 out), the
//              quantization, SwiGLU, permutation and combine left out: the quantity DeepGEMM's grouped GEMMs are timed
//              on; once with 1 x 1 clusters (c1) and once with 1 x 2 (c2, A multicast), and whether the two gave the
//              same bits ("same"); the plan's choice for the path (moe_cutlass_cluster_n) is printed per T
//   lt dense:  cuBLASLt block-scaled FP8 (1x128 / 128x128 fp32 scales) on ONE dense GEMM of the same rows
//              ([T * 6, D] x [2 I, D]^T, then [T * 6, I] x [D, I]^T): the same FLOPs without the experts' raggedness
// The "old", "cutlass" and "exact" rows include the permutation, quantization, SwiGLU and combine. "vs exact" = the
// CUTLASS path's output against the exact path's on weight set 0, normalised L2 (a sanity check at sizes the parity
// test does not reach; ~5e-2 is one-term FP8 activations, ~1 a broken kernel). Last, the FP8 peak measured here:
// cuBLASLt per-tensor FP8, 8192^3, fp32 out. CUDA events, 3 warm-up runs, median of 15, 2 rotating weight sets of
// each format (6.4 GB FP8 / 3.2 GB FP4 each: nothing stays in the 60 MB L2).
// Usage: dsinfer_moe_cutlass_bench [T ...] (1 <= T <= 16384).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cublaslt_ref.h"
#include "moe_routing.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_grouped_cutlass_launch.h"
#include "ops/moe/moe_plan.h"

namespace oc = dsinfer::ops::cuda;

namespace {

constexpr int kSets = 2, kWarm = 3, kRuns = 15;
constexpr int64_t E = 256, k = 6, D = 4096, I = 2048, kMaxT = 16384;

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

// kind 0: random FP4 codes, 1: e4m3 codes (|v| <= 1.875), 2: E8M0 scales 2^-3, 3: floats in [0.5, 1), -1: [-1, 1).
Blob blob(size_t bytes, int kind, uint64_t seed) {
  Blob b;
  die(b.alloc(bytes, "bench buffer"), "alloc");
  using oc::DummyFill;
  using oc::DummySpec;
  const DummySpec spec = kind == 0   ? DummySpec{DummyFill::Fp4Codes}
                         : kind == 1 ? DummySpec{DummyFill::Fp8Codes}
                         : kind == 2 ? DummySpec{DummyFill::Constant8, false, 0.0f, 0.0f, 124}
                         : kind == 3 ? DummySpec{DummyFill::Uniform, false, 0.75f, 0.25f}
                                     : DummySpec{DummyFill::Uniform, false, 0.0f, 1.0f};
  die(oc::fill_dummy_cuda(b.data(), kind >= 0 && kind <= 2 ? bytes : bytes / 4, spec, seed, nullptr), "fill");
  return b;
}

template <typename F>
double median_ms(F&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < kWarm; ++i) fn(i % kSets);
  std::vector<float> t;
  for (int i = 0; i < kRuns; ++i) {
    check(cudaEventRecord(a), "record");
    fn(i % kSets);
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return double(t[t.size() / 2]);
}

// One weight set of the routed experts in `fmt` (stacked per projection), with its per-expert pointer arrays.
struct Set {
  std::vector<Blob> bufs;
  Blob ptrs;
  oc::MoeExpertsDevice ex;
};

void build(Set& st, oc::WeightFormat fmt, int si) {
  const bool fp8 = fmt == oc::WeightFormat::FP8_BLOCK;
  std::vector<const void*> host_ptrs(size_t(6 * E));
  for (int proj = 0; proj < 3; ++proj) {
    const int64_t rows = proj == 2 ? D : I, cols = proj == 2 ? I : D;
    const size_t wb = oc::weight_data_bytes(fmt, rows, cols), sb = oc::weight_scale_bytes(fmt, rows, cols, true, 128, 128);
    st.bufs.push_back(blob(wb * size_t(E), fp8 ? 1 : 0, uint64_t(100 + si * 10 + proj + (fp8 ? 50 : 0))));
    st.bufs.push_back(blob(sb * size_t(E), 2, uint64_t(200 + si * 10 + proj)));
    const uint8_t* d = st.bufs[st.bufs.size() - 2].data();
    const uint8_t* sc = st.bufs.back().data();
    for (int64_t e = 0; e < E; ++e) {
      host_ptrs[size_t((2 * proj) * E + e)] = d + size_t(e) * wb;
      host_ptrs[size_t((2 * proj + 1) * E + e)] = sc + size_t(e) * sb;
    }
  }
  st.ptrs = upload_blob(host_ptrs.data(), host_ptrs.size() * sizeof(void*));
  const void* const* P = st.ptrs.as<const void* const>();
  auto proj = [&](int p, int64_t rows, int64_t cols) {
    oc::DeviceExpertWeights w;
    w.fmt = fmt;
    w.rows = rows;
    w.cols = cols;
    w.data = P + (2 * p) * E;
    w.scale = P + (2 * p + 1) * E;
    return w;
  };
  st.ex = {E, D, I, proj(0, I, D), proj(1, I, D), proj(2, D, I)};
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    num += double(a[j] - ref[j]) * double(a[j] - ref[j]);
    den += double(ref[j]) * double(ref[j]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts;
  for (int i = 1; i < argc; ++i) {
    const long long v = std::atoll(argv[i]);
    if (v < 1 || v > kMaxT) {
      std::fprintf(stderr, "usage: dsinfer_moe_cutlass_bench [T ...] (1 <= T <= %lld), got '%s'\n", (long long)kMaxT,
                   argv[i]);
      return 2;
    }
    Ts.push_back(int64_t(v));
  }
  if (Ts.empty()) Ts = {512, 4096, 16384};
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs; routed MoE 256 experts top-6 D=4096 I=2048, %d rotating weight sets\n", prop.name,
              prop.multiProcessorCount, kSets);
  std::vector<Set> fp4(kSets), fp8(kSets);
  for (int si = 0; si < kSets; ++si) {
    build(fp4[size_t(si)], oc::WeightFormat::FP4_G32, si);
    build(fp8[size_t(si)], oc::WeightFormat::FP8_BLOCK, si);
  }
  const int64_t maxT = *std::max_element(Ts.begin(), Ts.end());
  oc::MoeWorkspace ws;
  die(ws.reserve(maxT, k, D, I, E), "reserve");

  // The GEMM-only timing's inputs: e4m3 A rows and fp32 scales, fp32 weight scales, fp32 outputs, the argument
  // workspace; cuBLASLt's dense FP8 operands (the expert weights' first rows serve as W: times depend on shapes only).
  const int64_t nmax = maxT * k;
  Blob a1 = blob(size_t(nmax * D), 1, 901), a1s = blob(size_t(nmax * (D / 128)) * 4, 3, 902);
  Blob a2 = blob(size_t(nmax * I), 1, 903), a2s = blob(size_t(nmax * (I / 128)) * 4, 3, 904);
  Blob wsc = blob(size_t(3 * E * (I / 128) * (D / 128)) * 4, 3, 905);
  Blob dg = blob(size_t(nmax * I) * 2, 1, 906), du = blob(size_t(nmax * I) * 2, 1, 907);
  Blob dd = blob(size_t(nmax * D) * 4, 3, 908);  // bf16 outputs of the CUTLASS GEMMs, fp32 of cuBLASLt's down
  const size_t gws_bytes = oc::detail::moe_cutlass_workspace_bytes(2 * E);
  Blob gws = blob(gws_bytes, 1, 909);
  Blob lt_w1 = blob(size_t(2 * I * D), 1, 910), lt_w2 = blob(size_t(D * I), 1, 911);
  Blob lt_ws1 = blob(size_t(2 * I / 128) * size_t(D / 128) * 4, 3, 912), lt_ws2 = blob(size_t(D / 128) * size_t(I / 128) * 4, 3, 913);
  Blob lt_y1 = blob(size_t(nmax * 2 * I) * 4, 3, 914);
  Blob lt_work = blob(size_t(64) << 20, 1, 915);
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasLtCreate failed\n");
    return 1;
  }

  std::printf("%6s %8s | %-16s | %-16s | %-16s | %-28s | %-28s | %-16s | %s\n", "T", "GFLOP", "old ms TFLOP/s",
              "cutlass ms TF/s", "exact ms TF/s", "gemms c1 ms TF/s (gu+dn)", "gemms c2 ms TF/s (gu+dn)",
              "lt dense ms TF/s", "vs exact");
  uint64_t rng = 777;
  for (int64_t T : Ts) {
    const int64_t n = T * k;
    std::vector<Blob> xs, outs, idxs, wts;
    std::vector<int32_t> idx0;
    for (int si = 0; si < kSets; ++si) {
      std::vector<int32_t> idx = dsinfer::bench::random_routing(T, k, E, rng);
      if (si == 0) idx0 = idx;
      std::vector<float> wt(size_t(T * k), 1.0f / 6.0f);
      idxs.push_back(upload_blob(idx.data(), idx.size() * 4));
      wts.push_back(upload_blob(wt.data(), wt.size() * 4));
      xs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(700 + si)));
      outs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(800 + si)));
    }
    auto run = [&](const std::vector<Set>& sets, oc::MoePath path) {
      return median_ms([&](int i) {
        die(oc::moe_cuda(xs[size_t(i)].as<float>(), T, idxs[size_t(i)].as<const int32_t>(),
                         wts[size_t(i)].as<const float>(), k, sets[size_t(i)].ex, nullptr, 10.0f, 10.0f,
                         outs[size_t(i)].as<float>(), ws, nullptr, path),
            "moe_cuda");
      });
    };
    const double flop = 2.0 * double(n) * 3.0 * double(D) * double(I);
    const double t_old = run(fp4, oc::MoePath::GroupedFp8);
    const double t_cut = run(fp8, oc::MoePath::CutlassFp8);
    const double t_exact = run(fp8, oc::MoePath::Exact);

    // The two grouped GEMMs alone, on the routing of set 0 (offsets from the host).
    std::vector<int32_t> offs(size_t(E + 1), 0);
    for (int32_t e : idx0) ++offs[size_t(e + 1)];
    for (int64_t e = 0; e < E; ++e) offs[size_t(e + 1)] += offs[size_t(e)];
    Blob doffs = upload_blob(offs.data(), offs.size() * 4);
    double t_gu[2] = {}, t_dn[2] = {};
    std::vector<uint16_t> first[2];  // the 1 x 1 run's bf16 outputs (gate, down), to compare with the 1 x 2 run's
    bool same = true;
    for (int cl = 0; cl < 2; ++cl)
      for (int part = 0; part < 2; ++part) {
        const double t = median_ms([&](int i) {
          const Set& st = fp8[size_t(i)];
          oc::MoeCutlassGemmArgs g{.experts = E, .N = part == 0 ? I : D, .K = part == 0 ? D : I,
                                   .offsets = doffs.as<const int32_t>(), .a = part == 0 ? a1.data() : a2.data(),
                                   .a_scale = part == 0 ? a1s.as<const float>() : a2s.as<const float>(),
                                   .sets = part == 0 ? 2 : 1};
          const float* sc = wsc.as<const float>();
          g.w[0] = part == 0 ? st.ex.w1.data : st.ex.w2.data;
          g.w[1] = st.ex.w3.data;
          g.w_scale[0] = sc;
          g.w_scale[1] = sc + E * (I / 128) * (D / 128);
          g.d[0] = part == 0 ? dg.data() : dd.data();
          g.d[1] = du.data();
          g.cluster_n = cl + 1;
          if (const char* why = oc::detail::launch_moe_cutlass_gemm(g, gws.data(), gws_bytes, nullptr)) {
            std::fprintf(stderr, "CUTLASS GEMM (cluster 1 x %d): %s\n", cl + 1, why);
            std::exit(1);
          }
        });
        (part == 0 ? t_gu : t_dn)[cl] = t;
        // the last call ran set (kRuns - 1) % kSets in both configurations
        std::vector<uint16_t> got(size_t(n * (part == 0 ? I : D)));
        check(cudaMemcpy(got.data(), (part == 0 ? dg : dd).data(), got.size() * 2, cudaMemcpyDeviceToHost), "download");
        if (cl == 0) first[part] = std::move(got);
        else same = same && got == first[part];
      }

    // cuBLASLt block-scaled FP8, one dense GEMM per projection over all n rows.
    double t_lt = 0;
    std::string why;
    {
      bench_lt::LtGemm g1, g2;
      const bool ok1 = g1.init(lt, bench_lt::Kind::Fp8Block, n, 2 * I, D, lt_w1.data(), a1.data(), lt_y1.data(),
                               lt_ws1.as<const float>(), a1s.as<const float>(), lt_work.data(), lt_work.size(), &why);
      const bool ok2 = ok1 && g2.init(lt, bench_lt::Kind::Fp8Block, n, D, I, lt_w2.data(), a2.data(), dd.data(),
                                      lt_ws2.as<const float>(), a2s.as<const float>(), lt_work.data(), lt_work.size(),
                                      &why);
      if (ok2) t_lt = median_ms([&](int) { g1.run(nullptr); }) + median_ms([&](int) { g2.run(nullptr); });
    }

    // Sanity: the CUTLASS path against the exact path on set 0.
    std::vector<float> r[2];
    const oc::MoePath paths[2] = {oc::MoePath::Exact, oc::MoePath::CutlassFp8};
    for (int i = 0; i < 2; ++i) {
      die(oc::moe_cuda(xs[0].as<float>(), T, idxs[0].as<const int32_t>(), wts[0].as<const float>(), k, fp8[0].ex,
                       nullptr, 10.0f, 10.0f, outs[0].as<float>(), ws, nullptr, paths[i]),
          "moe_cuda");
      r[i].resize(size_t(T * D));
      check(cudaMemcpy(r[i].data(), outs[0].data(), r[i].size() * 4, cudaMemcpyDeviceToHost), "download");
    }
    const double rel = rel_l2(r[1], r[0]);
    auto tf = [&](double ms) { return ms > 0 ? flop / ms / 1e9 : 0.0; };
    const double g1 = t_gu[0] + t_dn[0], g2 = t_gu[1] + t_dn[1];
    std::printf("%6lld %8.1f | %7.3f %7.1f  | %7.3f %7.1f  | %7.3f %7.1f  | %7.3f %7.1f (%.3f+%.3f) | %7.3f %7.1f "
                "(%.3f+%.3f) | %7.3f %7.1f  | %.2e  c1/c2 %s, plan: gate/up 1x%d down 1x%d%s%s\n",
                (long long)T, flop / 1e9, t_old, tf(t_old), t_cut, tf(t_cut), t_exact, tf(t_exact), g1, tf(g1),
                t_gu[0], t_dn[0], g2, tf(g2), t_gu[1], t_dn[1], t_lt, tf(t_lt), rel, same ? "same bits" : "DIFFER",
                oc::moe_cutlass_cluster_n(n, E, I), oc::moe_cutlass_cluster_n(n, E, D), t_lt > 0 ? "" : "  lt: ",
                t_lt > 0 ? "" : why.c_str());
    std::fflush(stdout);
  }

  // FP8 peak, measured: cuBLASLt per-tensor-scaled FP8, 8192^3.
  {
    const int64_t M = 8192, N = 8192, K = 8192;
    Blob pa = blob(size_t(M * K), 1, 920), pb = blob(size_t(N * K), 1, 921), py = blob(size_t(M * N) * 4, 3, 922);
    Blob ps = blob(8, 3, 923);
    bench_lt::LtGemm g;
    std::string why;
    if (g.init(lt, bench_lt::Kind::Fp8Tensor, M, N, K, pb.data(), pa.data(), py.data(), ps.as<const float>(),
               ps.as<const float>(), lt_work.data(), lt_work.size(), &why)) {
      const double ms = median_ms([&](int) { g.run(nullptr); });
      std::printf("FP8 peak (cuBLASLt per-tensor FP8, 8192^3, fp32 out): %.3f ms, %.1f TFLOP/s\n", ms,
                  2.0 * double(M * N * K) / ms / 1e9);
    } else {
      std::printf("FP8 peak: cuBLASLt refused: %s\n", why.c_str());
    }
  }
  cublasLtDestroy(lt);
  return 0;
}
