// Benchmark of the CUDA GEMM (FP8 block-scaled V4-Flash projections) and the MoE layer (256 FP4 experts, top-6,
// D 4096, I 2048, FP8 shared expert) at decode and prefill sizes. CUDA events, warm-up, median of 25 runs,
// 4 rotating buffer sets (weights + inputs > 60 MB L2), random data (the dummy-weight fills of backends/cuda).
// Prints time, bytes, FLOPs, the roofline floor max(bytes / 4.2e12, flops / 780e12) and measured / floor.
// Usage: dsinfer_gemm_bench (no arguments).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "backends/cuda/dummy_weights_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"

namespace oc = dsinfer::ops::cuda;

namespace {

constexpr int kSets = 4, kWarm = 3, kRuns = 25;
constexpr double kHbm = 4.2e12, kPeak = 780e12;

bool ok(const dsinfer::Status& s, const char* what) {
  if (!s.is_ok()) std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  return s.is_ok();
}
#define CHECK(expr)                                                    \
  do {                                                                 \
    cudaError_t e_ = (expr);                                           \
    if (e_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

using Blob = dsinfer::cuda::DeviceBuffer<uint8_t>;

Blob upload_blob(const void* host, size_t bytes, const char* what) {
  Blob b;
  const dsinfer::Status st = b.upload_bytes(host, bytes, what);
  if (!st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    std::exit(1);
  }
  return b;
}

Blob blob(size_t bytes, int kind, uint64_t seed) {
  Blob b;
  const dsinfer::Status st = b.alloc(bytes, "bench buffer");
  if (!st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    std::exit(1);
  }
  // kind 0: random bytes (FP4 codes), 1: e4m3 bytes without NaN, 2: E8M0 scales (2^-3), -1: floats in [-1, 1).
  using dsinfer::backends::DummyFill;
  using dsinfer::backends::DummySpec;
  const DummySpec spec = kind == 0   ? DummySpec{DummyFill::Fp4Codes}
                         : kind == 1 ? DummySpec{DummyFill::Fp8Codes}
                         : kind == 2 ? DummySpec{DummyFill::Constant8, false, 0.0f, 0.0f, 124}
                                     : DummySpec{DummyFill::Uniform, false, 0.0f, 1.0f};
  const size_t count = kind >= 0 ? bytes : bytes / 4;
  if (!ok(dsinfer::backends::fill_dummy_cuda(b.data(), count, spec, seed, nullptr), "fill")) std::exit(1);
  return b;
}

// Median time (ms) of fn(set) over kRuns runs, rotating sets.
template <typename F>
double time_ms(F&& fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarm; ++i)
    if (!fn(i % kSets)) std::exit(1);
  std::vector<float> t;
  for (int i = 0; i < kRuns; ++i) {
    CHECK(cudaEventRecord(a));
    if (!fn(i % kSets)) std::exit(1);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const char* name, double ms, double bytes, double flops) {
  const double floor_s = std::max(bytes / kHbm, flops / kPeak);
  std::printf("%-34s %10.1f us %10.1f MB %10.3f TFLOP %10.1f us floor %7.2fx  (%6.0f GB/s, %6.1f TFLOP/s)\n", name,
              ms * 1e3, bytes / 1e6, flops / 1e12, floor_s * 1e6, ms * 1e-3 / floor_s, bytes / (ms * 1e-3) / 1e9,
              flops / (ms * 1e-3) / 1e12);
}

void bench_gemm() {
  struct S {
    const char* name;
    int64_t N, K;
  };
  for (S s : {S{"wq_a", 1024, 4096}, S{"wq_b", 32768, 1024}, S{"wo_b", 4096, 8192}}) {
    std::vector<Blob> wd, ws;
    std::vector<oc::DeviceWeight> w(kSets);
    for (int i = 0; i < kSets; ++i) {
      wd.push_back(blob(oc::weight_data_bytes(oc::WeightFormat::FP8_BLOCK, s.N, s.K), 1, 10 + i));
      ws.push_back(blob(oc::weight_scale_bytes(oc::WeightFormat::FP8_BLOCK, s.N, s.K, true, 128, 128), 2, 20 + i));
      w[size_t(i)] = {oc::WeightFormat::FP8_BLOCK, s.N, s.K, wd.back().data(), ws.back().data(), true, 128, 128};
    }
    for (int64_t M : {1, 64, 256, 4096}) {
      std::vector<Blob> xs, ys;
      for (int i = 0; i < kSets; ++i) {
        xs.push_back(blob(size_t(M * s.K) * 4, -1, 30 + i));
        ys.push_back(blob(size_t(M * s.N) * 4, -1, 40 + i));
      }
      const double ms = time_ms([&](int i) {
        return ok(oc::gemm_cuda(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)],
                                ys[size_t(i)].as<float>(), s.N, false, nullptr),
                  "gemm");
      });
      const double bytes = double(s.N * s.K) + double(s.N / 128 * s.K / 128) + 4.0 * M * (s.K + s.N);
      char name[96];
      std::snprintf(name, sizeof name, "gemm FP8 %s N=%lld K=%lld M=%lld", s.name, (long long)s.N, (long long)s.K,
                    (long long)M);
      report(name, ms, bytes, 2.0 * M * s.N * s.K);
    }
  }
}

void bench_moe() {
  const int64_t E = 256, k = 6, D = 4096, I = 2048;
  struct Set {
    std::vector<Blob> bufs;
    Blob ptrs;
    oc::MoeExpertsDevice ex;
    oc::MoeSharedDevice sh;
  };
  std::vector<Set> sets(kSets);
  const size_t w_bytes = oc::weight_data_bytes(oc::WeightFormat::FP4_G32, I, D);
  const size_t s_bytes = oc::weight_scale_bytes(oc::WeightFormat::FP4_G32, I, D, true, 128, 128);
  for (int si = 0; si < kSets; ++si) {
    Set& st = sets[size_t(si)];
    // one stacked allocation per projection: data [E][...] and scales [E][...]
    std::vector<const void*> host_ptrs(size_t(6 * E));
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
    st.ptrs = upload_blob(host_ptrs.data(), host_ptrs.size() * sizeof(void*), "expert pointers");
    const void* const* P = st.ptrs.as<const void* const>();
    auto proj = [&](int p, int64_t rows, int64_t cols) {
      oc::DeviceExpertWeights w;
      w.fmt = oc::WeightFormat::FP4_G32, w.rows = rows, w.cols = cols;
      w.data = P + (2 * p) * E, w.scale = P + (2 * p + 1) * E;
      return w;
    };
    // w2 is [D, I]: same byte count as [I, D]
    st.ex = {E, D, I, proj(0, I, D), proj(1, I, D), proj(2, D, I)};
    for (int p = 0; p < 3; ++p) {
      const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
      st.bufs.push_back(blob(oc::weight_data_bytes(oc::WeightFormat::FP8_BLOCK, rows, cols), 1, uint64_t(300 + si * 10 + p)));
      st.bufs.push_back(blob(oc::weight_scale_bytes(oc::WeightFormat::FP8_BLOCK, rows, cols, true, 128, 128), 2,
                             uint64_t(400 + si * 10 + p)));
      oc::DeviceWeight dw{oc::WeightFormat::FP8_BLOCK, rows, cols, st.bufs[st.bufs.size() - 2].data(),
                          st.bufs.back().data(), true, 128, 128};
      (p == 0 ? st.sh.w1 : p == 1 ? st.sh.w3 : st.sh.w2) = dw;
    }
  }
  oc::MoeWorkspace ws;
  if (!ok(ws.reserve(4096, k, D, I, E), "reserve")) std::exit(1);
  uint64_t rng = 12345;
  auto next = [&] {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  for (int64_t T : {1, 64, 256, 4096}) {
    std::vector<Blob> xs, outs, idxs, wts;
    std::set<int32_t> distinct;
    for (int si = 0; si < kSets; ++si) {
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
      idxs.push_back(upload_blob(idx.data(), idx.size() * 4, "bench routing"));
      wts.push_back(upload_blob(wt.data(), wt.size() * 4, "bench routing"));
      xs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(500 + si)));
      outs.push_back(blob(size_t(T * D) * 4, -1, uint64_t(600 + si)));
    }
    const double ms = time_ms([&](int i) {
      const Set& st = sets[size_t(i)];
      return ok(oc::moe_cuda(xs[size_t(i)].as<float>(), T,
                             idxs[size_t(i)].as<const int32_t>(),
                             wts[size_t(i)].as<const float>(), k, st.ex, &st.sh, 10.0f, 10.0f,
                             outs[size_t(i)].as<float>(), ws, nullptr),
                "moe");
    });
    const double expert_bytes = 3.0 * double(w_bytes + s_bytes);
    const double shared_bytes = 3.0 * double(I * D + (I / 128) * (D / 128));
    const double bytes = double(distinct.size()) * expert_bytes + shared_bytes + 8.0 * T * D;
    const double flops = 2.0 * 3.0 * double(D) * double(I) * double(T * k + T);
    char name[96];
    std::snprintf(name, sizeof name, "moe FP4 256x top6 T=%lld (%zu experts)", (long long)T, distinct.size());
    report(name, ms, bytes, flops);
  }
}

}  // namespace

int main() {
  int dev = 0;
  if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; floor = max(bytes / %.1f TB/s, flops / %.0f TFLOP/s)\n", p.name,
              p.multiProcessorCount, p.l2CacheSize >> 20, kHbm / 1e12, kPeak / 1e12);
  bench_gemm();
  bench_moe();
  return 0;
}
