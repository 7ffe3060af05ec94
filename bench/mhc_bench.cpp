// mHC kernels at DeepSeek-V4-Flash shapes (hc_mult n = 4, hidden D = 4096): hc_pre + norm, hc_post and hc_head +
// norm (R = T rows) at T = 1, 64, 256, 4096 tokens. CUDA events after warm-up, median of 25 runs; each run uses
// another copy of the mixing weights and (while they fit) another copy of the streams out of pools larger than
// the 60 MB L2, so weights and activations come from HBM as in a forward step (a layer's fn is read once).
// Bytes that must move: fn + X read, y (hc_pre / hc_head) or X read + written and f read (hc_post); floor =
// bytes / 4.2e12 B/s. The mixes run in double (as the reference) on the fp64 tensor cores: fp64_us is their FLOPs
// at 67 TFLOP/s, a second bound. hc_pre also prints its two kernels alone (mix = the split reduction, fin = the
// finalize: partial sums, Sinkhorn, collapse, norm; mix_m8: the mixing on the m8n8k4 shape instead of sm_90's
// m16n8k4, where the tile is 32 tokens; fin_fused: the narrow finalize as one kernel instead of the coefficients then
// the collapse, where T > 512; fin_defer: the finalize with the coefficients deferred, comb: hc_comb alone), the
// batch-invariant split (hc_pre_inv), post_mix (T = 4,096: hc_post fused with the next site's mixing reduction, to
// read against hc_post + mix), and old_us: the
// per-call figure of the previous kernels (`dsinfer bench` per-op table, 2026-11-30: 44 / 60 / 112 / 1160 us).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cuda/cuda_common.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/mhc/mhc_launch.h"

using namespace dsinfer;

namespace {

constexpr int64_t kN = 4, kD = 4096, kLen = kN * kD, kMixes = (2 + kN) * kN;
constexpr double kHbm = 4.2e12, kFp64 = 67e12;
constexpr size_t kPoolBytes = size_t(160) << 20;  // > L2

#define BENCH_CHECK(x)                                             \
  do {                                                             \
    Status s_ = (x);                                               \
    if (!s_.is_ok()) {                                             \
      std::fprintf(stderr, "%s: %s\n", #x, s_.message().c_str()); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

void fill(cuda::DeviceBuffer<float>& b, size_t n, uint32_t seed, float amp) {
  std::vector<float> h(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = amp * float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
  }
  BENCH_CHECK(b.upload(h.data(), n));
}

// Median of 25 timed runs (after 3 warm-ups) of run(i), in microseconds.
double median_us(const std::function<void(int)>& run, cudaEvent_t e0, cudaEvent_t e1) {
  for (int i = 0; i < 3; ++i) run(i);
  std::vector<float> ms;
  for (int i = 0; i < 25; ++i) {
    cudaEventRecord(e0);
    run(i + 3);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2];
}

void row(const char* op, int64_t T, double bytes, double flops64, double us, double old_us = 0.0) {
  const double floor_us = bytes / kHbm * 1e6, fp64_us = flops64 / kFp64 * 1e6;
  std::printf("%-10s %5ld %9.3f %9.3f %9.3f %10.2f %7.1f", op, long(T), bytes / 1e6, floor_us, fp64_us, us,
              us / std::max(floor_us, fp64_us));
  if (old_us > 0) std::printf(" %9.0f", old_us);
  std::printf("\n");
}

double old_pre_us(int64_t T) { return T == 1 ? 44 : T == 64 ? 60 : T == 256 ? 112 : T == 4096 ? 1160 : 0; }

}  // namespace

int main() {
  auto dev = cuda::query_device(0);
  if (!dev.is_ok()) {
    std::fprintf(stderr, "%s\n", dev.status().message().c_str());
    return 1;
  }
  std::printf("# mHC kernels, %s, %d SMs; n=%ld D=%ld, fn %.2f MB per site\n", dev->name.c_str(), dev->multiprocessors,
              long(kN), long(kD), double(kMixes * kLen * 4) / 1e6);
  const int64_t fn_copies = int64_t(kPoolBytes / size_t(kMixes * kLen * 4)) + 1;
  cuda::DeviceBuffer<float> fn, base, scale, norm_w, hfn, hbase, hscale;
  fill(fn, size_t(fn_copies * kMixes * kLen), 1, 0.02f);
  fill(base, size_t(kMixes), 2, 1.0f);
  fill(scale, 3, 3, 1.0f);
  fill(norm_w, size_t(kD), 4, 1.0f);
  fill(hfn, size_t(fn_copies * kN * kLen), 5, 0.02f);
  fill(hbase, size_t(kN), 6, 1.0f);
  fill(hscale, 1, 7, 1.0f);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("%-10s %5s %9s %9s %9s %10s %7s %9s\n", "op", "T", "MB", "floor_us", "fp64_us", "median_us", "ratio",
              "old_us");
  for (int64_t T : {1, 64, 256, 4096}) {
    const size_t xsz = size_t(T * kLen);
    const int64_t x_copies = std::max<int64_t>(1, int64_t(kPoolBytes / (xsz * 4)));
    cuda::DeviceBuffer<float> X, y, f, post, comb;
    cuda::DeviceBuffer<int32_t> rows;
    fill(X, xsz * size_t(x_copies), 8, 1.0f);
    fill(f, size_t(T * kD), 9, 1.0f);
    BENCH_CHECK(y.alloc(size_t(T * kD)));
    BENCH_CHECK(post.alloc(size_t(T * kN)));
    BENCH_CHECK(comb.alloc(size_t(T * kN * kN)));
    std::vector<int32_t> hr(static_cast<size_t>(T));
    for (int64_t r = 0; r < T; ++r) hr[size_t(r)] = int32_t(r);
    BENCH_CHECK(rows.upload(hr.data(), hr.size()));
    auto params = [&](bool head, int i, bool inv = false) {
      ops::cuda::HcNormParams p;
      p.fn = head ? hfn.data() + (i % fn_copies) * kN * kLen : fn.data() + (i % fn_copies) * kMixes * kLen;
      p.base = head ? hbase.data() : base.data();
      p.scale = head ? hscale.data() : scale.data();
      p.n = kN;
      p.dim = kD;
      p.norm_w = norm_w.data();
      p.batch_invariant = inv;
      return p;
    };
    auto xs = [&](int i) { return X.data() + size_t(i % x_copies) * xsz; };
    const double xb = double(xsz) * 4, yb = double(T * kD) * 4;
    auto pre = [&](int i) {
      BENCH_CHECK(ops::cuda::hc_pre_norm(params(false, i), xs(i), T, y.data(), post.data(), comb.data(), nullptr));
    };
    auto pst = [&](int i) {
      BENCH_CHECK(ops::cuda::hc_post(T, kN, kD, f.data(), post.data(), comb.data(), xs(i), nullptr));
    };
    auto head = [&](int i) {
      BENCH_CHECK(ops::cuda::hc_head_norm(params(true, i), xs(i), rows.data(), T, y.data(), nullptr));
    };
    const double pre_bytes = double(kMixes * kLen) * 4 + xb + yb, pre_flops = 2.0 * double(T) * double(kLen) * (kMixes + 1);
    double us = median_us(pre, e0, e1);
    row("hc_pre", T, pre_bytes, pre_flops, us, old_pre_us(T));
    // The two kernels alone (the default split): mix reads fn + X, the finalize reads X again and writes y.
    const ops::cuda::detail::HcSplit sp = ops::cuda::detail::hc_default_split(T, kN, kD, kMixes);
    us = median_us([&](int i) { ops::cuda::detail::launch_hc_mix(params(false, i), xs(i), nullptr, T, sp, y.data(), nullptr); },
                   e0, e1);
    row("  mix", T, double(kMixes * kLen) * 4 + xb, pre_flops, us);
    if (sp.tile == 32 && sp.mma16) {  // the A/B of the fp64 mma shape (session 16): m8n8k4, the kernels before
      ops::cuda::detail::HcSplit sp8 = sp;
      sp8.mma16 = false;
      us = median_us(
          [&](int i) { ops::cuda::detail::launch_hc_mix(params(false, i), xs(i), nullptr, T, sp8, y.data(), nullptr); },
          e0, e1);
      row("  mix_m8", T, double(kMixes * kLen) * 4 + xb, pre_flops, us);
    }
    // (Repeated finalize runs read their own outputs as partials: the values are garbage, the work is the same.)
    us = median_us([&](int i) {
      ops::cuda::detail::launch_hc_finalize(params(false, i), xs(i), nullptr, T, sp, y.data(), post.data(), comb.data(),
                                            nullptr);
    }, e0, e1);
    row("  fin", T, xb + yb, 0.0, us);
    // The finalize with the coefficients deferred (HcNormParams::defer_comb: pre, collapse, norm; the raw post / comb
    // mixes stored), and hc_comb alone (post + Sinkhorn, a warp per token): the V4 forward's decode split.
    auto deferred = [&](int i) {
      ops::cuda::HcNormParams p = params(false, i);
      p.defer_comb = true;
      return p;
    };
    us = median_us([&](int i) {
      ops::cuda::detail::launch_hc_finalize(deferred(i), xs(i), nullptr, T, sp, y.data(), post.data(), comb.data(),
                                            nullptr);
    }, e0, e1);
    row("  fin_defer", T, xb + yb, 0.0, us);
    us = median_us([&](int i) { ops::cuda::detail::launch_hc_comb(deferred(i), T, post.data(), comb.data(), nullptr); },
                   e0, e1);
    row("  comb", T, 0.0, 0.0, us);
    if (!sp.wide) {  // the A/B of the split finalize (session 19): the fused narrow kernel, the one before
      ops::cuda::detail::HcSplit spf = sp;
      spf.split_fin = false;
      us = median_us([&](int i) {
        ops::cuda::detail::launch_hc_finalize(params(false, i), xs(i), nullptr, T, spf, y.data(), post.data(),
                                              comb.data(), nullptr);
      }, e0, e1);
      row("  fin_fused", T, xb + yb, 0.0, us);
    }
    us = median_us([&](int i) {
      BENCH_CHECK(ops::cuda::hc_pre_norm(params(false, i, true), xs(i), T, y.data(), post.data(), comb.data(), nullptr));
    }, e0, e1);
    row("hc_pre_inv", T, pre_bytes, pre_flops, us);
    us = median_us(pst, e0, e1);
    row("hc_post", T, 2 * xb + yb, 0.0, us);
    if (ops::cuda::hc_post_mix_wanted(params(false, 0), T)) {
      // hc_post fused with the next site's mixing reduction (prefill): against hc_post + mix above, one pass over X.
      us = median_us([&](int i) {
        BENCH_CHECK(
            ops::cuda::hc_post_mix(params(false, i), T, f.data(), post.data(), comb.data(), xs(i), y.data(), nullptr));
      }, e0, e1);
      row("post_mix", T, double(kMixes * kLen) * 4 + 2 * xb + yb, pre_flops, us);
    }
    us = median_us(head, e0, e1);
    row("hc_head", T, double(kN * kLen) * 4 + xb + yb, 2.0 * double(T) * double(kLen) * double(kN + 1), us);
  }
  BENCH_CHECK(cuda::check_launch("mhc bench", __FILE__, __LINE__));
  return 0;
}
