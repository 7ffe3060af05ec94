// Benchmark of the CUDA GEMM (V4-Flash projections: old path, streaming kernel, cuBLASLt) at decode and prefill
// sizes (the MoE layer has its own bench, bench/moe_bench.cu). CUDA events, warm-up, median of 25 runs,
// 4 rotating buffer sets (weights + inputs > 60 MB L2), random data (the dummy-weight fills of backends/cuda).
// Prints time, bytes, FLOPs, the roofline floor max(bytes / 4.2e12, flops / 780e12) and measured / floor.
// "lt-runner" is the runner's cuBLASLt engine (ops/gemm/gemm_lt_cuda.h) as the runner calls it: fp32 x quantized
// to FP8 1x128 by its kernel, then the block-scaled cuBLASLt matmul(s), fp32 y; "x2" = the default two-term
// activations (two matmuls), "x1" = one term (official act_quant numerics); ratios against the FP8 floor
// max(bytes / 4.2e12, flops / 1400e12) of one GEMM. For BF16 weights (the lm head, the compressors' wkv) "lt-runner"
// is the engine's dense path (x rounded to bf16 by its kernel, bf16 cuBLASLt matmul, fp32 y; ratio against the bf16
// floor). The raw cuBLASLt columns start from operands already in their formats. Every shape runs at M = 1, 2, 4, 6,
// 8, 16 (decode, speculative verify: the GEMV kernel's range), 64, 256 and 4096 (the lm head up to 256: prefill
// computes logits of the last tokens only). At M <= 16 "gemv" is the GEMV kernel forced (GemmPrecision::kGemv) on
// every shape it can run, also the small weights the plan gives the streaming kernel; "even general" is the same
// plan with its whole-tile form off (GemvParams::even), where the plan takes that form.
// Usage: dsinfer_gemm_bench [--gemv]   (--gemv: only M <= 16)
//        dsinfer_gemm_bench --peer      (bench/peers: the FP8 ungrouped shapes at M = 64 / 1024 / 4096, each also as a
//                                        "PEERROW" line: the runner's path (cuBLASLt x2 from M = 64) and our kernel)
//        dsinfer_gemm_bench --skinny    (issue 31: the FP8 ungrouped shapes at M = 1, 8, 16, 32, 64, 128, 192, 256, with
//                                        PEERROW lines; the runner's path is plan_gemm_call's choice under this
//                                        process's DSINFER_CUBLASLT* settings; session 23: "x2s" = the two terms
//                                        stacked in one matmul (GemmLtStack::kAll), "graph x2 / x2s" = the same
//                                        calls replayed from CUDA graphs, us per call without eager host gaps, and
//                                        the copy ceiling of the run)
//        dsinfer_gemm_bench --grouped   (issues 31 / 30, session 15: wo_a at M = 1 .. 4096 on every path,
//                                        bench_grouped; "stream" = the streaming kernel on the grouped weight,
//                                        M = 17 .. 256)
//        dsinfer_gemm_bench --fp8skinny (issue 31, session 24: the FP8 skinny wgmma kernel (gemm_fp8_skinny_cuda.h)
//                                        beside cuBLASLt x2 / x2s and the streaming kernel at the V4-Flash shapes
//                                        wq_a, wkv, wq_b, wo_b, wo_a (8 groups; batched widened call there) for
//                                        M = 1, 8, 64, 128, 256; graph-replayed us per call, effective TB/s = weight
//                                        bytes / time, the plan's launch shape, the quantization alone, and the
//                                        normalised difference to cuBLASLt x2 on set 0); `--fp8skinny NAME [M]`
//                                        runs that shape (and M) only (a profiler's single case)
//        dsinfer_gemm_bench --fp8skinny-shapes [NAME [M]] (issue 31, session 30: the skinny kernel's launch shapes
//                                        swept through plan_gemm_fp8_skinny_at at M = 8, 64, 256: consumer layout,
//                                        tokens a unit, split cap; us, TB/s, bits against the plan's shape)
//        dsinfer_gemm_bench --prefill   (issue 30, session 16: the FP8 ungrouped shapes at M = 64 .. 8192 with PEERROW
//                                        lines; "wide" = the engine's kBf16 route: the weight widened to bf16 per
//                                        call (its widening alone in brackets), x to bf16, one bf16 matmul)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cublaslt_ref.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_fp8_skinny_cuda.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/gemm/gemm_lt_launch.h"
#include "ops/gemm/gemm_widen_cuda.h"
#include "ops/gemm/gemm_plan.h"

namespace oc = dsinfer::ops::cuda;

namespace {

constexpr int kSets = 4, kWarm = 3, kRuns = 25;
constexpr double kHbm = 4.2e12, kPeak = 780e12, kPeakFp8 = 1400e12;

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
  // kind 0: random bytes (FP4 codes), 1: e4m3 bytes without NaN, 2: E8M0 scales (2^-3), 3: bf16 in [-1, 1],
  // -1: floats in [-1, 1).
  using dsinfer::ops::cuda::DummyFill;
  using dsinfer::ops::cuda::DummySpec;
  const DummySpec spec = kind == 0   ? DummySpec{DummyFill::Fp4Codes}
                         : kind == 1 ? DummySpec{DummyFill::Fp8Codes}
                         : kind == 2 ? DummySpec{DummyFill::Constant8, false, 0.0f, 0.0f, 124}
                         : kind == 3 ? DummySpec{DummyFill::Uniform, true, 0.0f, 1.0f}
                                     : DummySpec{DummyFill::Uniform, false, 0.0f, 1.0f};
  const size_t count = kind == 3 ? bytes / 2 : kind >= 0 ? bytes : bytes / 4;
  if (!ok(dsinfer::ops::cuda::fill_dummy_cuda(b.data(), count, spec, seed, nullptr), "fill")) std::exit(1);
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


// ---- dense GEMMs: V4-Flash decode projections; old path (default precision), new streaming kernel (kBf16) and
// cuBLASLt (bf16, FP8 per-tensor, FP8 128x128 block-scaled) on the same shapes. Effective TB/s = (weights + scales +
// fp32 x + fp32 y bytes) / time of the new kernel.
struct GemmShape {
  const char* name;
  oc::WeightFormat fmt;
  int64_t N, K, groups;  // N: all rows of W (groups * rows per group); K per group
};

// Mean us of one call replayed from a CUDA graph: fn(set, stream) captured once per set on a stream of its own,
// kWarm replays, then kRuns replays rotating the sets between two events; -1 when a capture fails.
double time_graph_us(const std::function<bool(int, cudaStream_t)>& fn) {
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<cudaGraphExec_t> ex;
  bool good = true;
  for (int i = 0; i < kSets && good; ++i) {
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const bool r = fn(i, st);
    const cudaError_t e = cudaStreamEndCapture(st, &g);
    cudaGraphExec_t x = nullptr;
    good = r && e == cudaSuccess && cudaGraphInstantiate(&x, g, 0) == cudaSuccess;
    if (g) cudaGraphDestroy(g);
    if (good) ex.push_back(x);
  }
  double us = -1.0;
  if (good) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < kWarm; ++i) CHECK(cudaGraphLaunch(ex[size_t(i % kSets)], st));
    CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < kRuns; ++i) CHECK(cudaGraphLaunch(ex[size_t(i % kSets)], st));
    CHECK(cudaEventRecord(b, st));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us = double(ms) * 1e3 / kRuns;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  cudaGetLastError();
  for (cudaGraphExec_t x : ex) cudaGraphExecDestroy(x);
  cudaStreamDestroy(st);
  return us;
}

// Median ms of fn over the sets, or -1 when fn is not available (init returned false).
double time_opt(bool available, const std::function<bool(int)>& fn) { return available ? time_ms(fn) : -1.0; }

void print_ms(double ms) {
  if (ms < 0) std::printf("      n/a");
  else std::printf(" %8.1f", ms * 1e3);
}

void bench_gemm_shape(const GemmShape& s, int64_t M, cublasLtHandle_t lt, void* lt_ws, size_t lt_ws_bytes, bool peer) {
  const bool fp8 = s.fmt == oc::WeightFormat::FP8_BLOCK;
  const int64_t Ng = s.N / s.groups, Kx = s.K * s.groups;  // rows per group, x row length
  std::vector<Blob> wd, ws, xs, ys, wb, xb, x8, wsc, xsc;
  std::vector<oc::DeviceWeight> w(kSets);
  const size_t wsc_n = size_t((s.N + 127) / 128 + 1) * size_t((s.K + 127) / 128 + 1), xsc_n = size_t(M + 1) * size_t((s.K + 127) / 128 + 1);
  for (int i = 0; i < kSets; ++i) {
    wd.push_back(blob(oc::weight_data_bytes(s.fmt, s.N, s.K), fp8 ? 1 : 3, 10 + i));
    ws.push_back(fp8 ? blob(oc::weight_scale_bytes(s.fmt, s.N, s.K, true, 128, 128), 2, 20 + i) : Blob{});
    w[size_t(i)] = {s.fmt, s.N, s.K, wd.back().data(), fp8 ? ws.back().data() : nullptr, true, 128, 128};
    xs.push_back(blob(size_t(M * Kx) * 4, -1, 30 + i));
    ys.push_back(blob(size_t(M * s.N) * 4, -1, 40 + i));
    if (s.groups == 1) {  // cuBLASLt operands (grouped shapes: n/a)
      wb.push_back(fp8 ? blob(size_t(s.N * s.K) * 2, 3, 50 + i) : Blob{});
      xb.push_back(blob(size_t(M * s.K) * 2, 3, 60 + i));
      x8.push_back(blob(size_t(M * s.K), 1, 70 + i));
      wsc.push_back(blob(wsc_n * 4, -1, 80 + i));
      xsc.push_back(blob(xsc_n * 4, -1, 90 + i));
    }
  }
  auto gemm = [&](int i, oc::GemmPrecision prec) {
    const float* x = xs[size_t(i)].as<float>();
    float* y = ys[size_t(i)].as<float>();
    if (s.groups == 1) return ok(oc::gemm_cuda(x, M, s.K, w[size_t(i)], y, s.N, false, nullptr, prec), "gemm");
    return ok(oc::gemm_grouped_cuda(x, M, Kx, s.K, w[size_t(i)], s.groups, y, s.N, Ng, nullptr, prec), "grouped gemm");
  };
  oc::detail::GemmArgs a;
  a.M = M;
  a.groups = s.groups;
  a.N = Ng;
  a.K = s.K;
  oc::detail::set_weight_args(a, w[0]);
  oc::detail::StreamParams sp;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  oc::detail::GemvParams gp;
  const bool has_stream = oc::detail::plan_gemm_stream(a, s.fmt, sms, sp);
  const bool uses_gemv = oc::gemm_gemv_preferred(M, Ng, s.groups > 1) && oc::detail::plan_gemm_gemv(a, s.fmt, sms, gp);
  const bool has_new = has_stream || uses_gemv;
  const double t_old = time_ms([&](int i) { return gemm(i, oc::GemmPrecision::kFp32SmallM); });
  const double t_new = time_opt(has_new, [&](int i) { return gemm(i, oc::GemmPrecision::kBf16); });
  // The streaming kernel on its own (kBf16 takes the GEMV kernel at M <= kGemmGemvMaxM): the side-by-side.
  // The call's arguments on input set i (the weight, x and y of that set).
  auto args_of = [&](int i) {
    oc::detail::GemmArgs c = a;
    c.x = xs[size_t(i)].as<float>();
    c.y = ys[size_t(i)].as<float>();
    c.ldx = Kx;
    c.x_gstride = s.groups > 1 ? s.K : 0;
    c.ldy = s.N;
    c.y_gstride = s.groups > 1 ? Ng : 0;
    oc::detail::set_weight_args(c, w[size_t(i)]);
    oc::detail::set_x_vec(c);
    return c;
  };
  const double t_stream = time_opt(has_stream && M <= oc::kGemmGemvMaxM, [&](int i) {
    return oc::detail::launch_gemm_stream(args_of(i), sp, nullptr) == 0;
  });
  // The GEMV kernel wherever it can run (GemmPrecision::kGemv), also below kGemmGemvMinN where the plan takes the
  // streaming kernel: the side-by-side for small weights (router, indexer, compressors).
  oc::detail::GemvParams gforced;
  const double t_gemv = time_opt(M <= oc::kGemmGemvMaxM && oc::detail::plan_gemm_gemv(a, s.fmt, sms, gforced),
                                 [&](int i) { return gemm(i, oc::GemmPrecision::kGemv); });
  // Session 35: the same plan in its general form (GemvParams::even off: bounds checks, divisions, a scale per row),
  // where the plan takes the whole-tile form: the A/B of that form in one binary.
  const double t_gemv_gen = time_opt(t_gemv > 0 && gforced.even, [&](int i) {
    oc::detail::GemvParams q = gforced;
    q.even = false;
    return oc::detail::launch_gemm_gemv(s.fmt, args_of(i), q, nullptr) == 0;
  });
  // The streaming kernel with one block per row block (StreamParams::row_grid = 0: not persistent), for the
  // persistent grid's effect (M > kGemmGemvMaxM, where "new" is the persistent streaming kernel).
  auto stream_variant = [&](int row_grid, int depth) {
    return [&, row_grid, depth](int i) {
      oc::detail::StreamParams v = sp;
      v.row_grid = row_grid;
      v.depth = depth;
      return oc::detail::launch_gemm_stream(args_of(i), v, nullptr) == 0;
    };
  };
  const bool variants = has_stream && M > oc::kGemmGemvMaxM;
  const int alt_depth = sp.depth == 8 ? 4 : 8;
  const double t_flat = time_opt(variants, stream_variant(0, sp.depth));
  // The other prefetch depth on the persistent grid (the plan's depth rule, re-tuned from this column).
  const double t_alt = time_opt(variants, stream_variant(sp.row_grid, alt_depth));
  double t_lt[3] = {-1, -1, -1};
  std::string why[3];
  for (int k = 0; k < 3 && s.groups == 1; ++k) {
    const auto kind = bench_lt::Kind(k);
    std::vector<std::unique_ptr<bench_lt::LtGemm>> g;
    bool all = true;
    for (int i = 0; i < kSets && all; ++i) {
      g.push_back(std::make_unique<bench_lt::LtGemm>());
      const bool bf = kind == bench_lt::Kind::Bf16;
      const void* wp = bf ? (fp8 ? wb[size_t(i)].data() : wd[size_t(i)].data()) : wd[size_t(i)].data();
      all = (bf || fp8) && g.back()->init(lt, kind, M, s.N, s.K, wp, bf ? xb[size_t(i)].data() : x8[size_t(i)].data(),
                                          ys[size_t(i)].data(), wsc[size_t(i)].as<float>(), xsc[size_t(i)].as<float>(),
                                          lt_ws, lt_ws_bytes, &why[k]);
    }
    t_lt[k] = time_opt(all, [&](int i) { return g[size_t(i)]->run(nullptr); });
  }
  // The runner's engine (one per shape: its prepared scales are keyed by weight address), M rows as the runner
  // sends them; n/a with the engine's reason when it refuses (e.g. no block-scaled algorithm at this M).
  std::string why_run;
  // graph_us: also the call replayed from a CUDA graph (one per set, captured on a stream of its own), the mean us of
  // a call over kRuns replays rotating the sets: the device time without the eager call's host gaps.
  auto time_engine = [&](oc::GemmLtActivations act, oc::GemmLtStack stack = oc::GemmLtStack::kOff,
                         double* graph_us = nullptr) {
    if (s.groups != 1 || !oc::GemmLtEngine::supports(w[0]) || (!fp8 && act != oc::GemmLtActivations::kFp8x2)) return -1.0;
    oc::GemmLtEngine eng(act, stack);
    bool all = true;
    for (int i = 0; i < kSets && all; ++i) {
      dsinfer::Status st = eng.prepare(w[size_t(i)], M, nullptr);
      if (st.is_ok()) st = eng.gemm(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)], ys[size_t(i)].as<float>(), s.N, false, nullptr);
      if (!st.is_ok()) {
        why_run = st.message();
        all = false;
      }
    }
    CHECK(cudaDeviceSynchronize());
    if (graph_us) *graph_us = all ? time_graph_us([&](int i, cudaStream_t st) {
      return eng.gemm(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)], ys[size_t(i)].as<float>(), s.N, false, st)
          .is_ok();
    }) : -1.0;
    return time_opt(all, [&](int i) {
      return ok(eng.gemm(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)], ys[size_t(i)].as<float>(), s.N, false, nullptr),
                "lt-runner");
    });
  };
  // Session 23: the two-term route as two matmuls (x2, GemmLtStack::kOff) and stacked (x2s, kAll: one matmul over
  // 2 M rows + the sum kernel), eager and replayed from graphs (g).
  double g_run = -1.0, g_stack = -1.0;
  const double t_run = time_engine(oc::GemmLtActivations::kFp8x2, oc::GemmLtStack::kOff, &g_run),
               t_run1 = time_engine(oc::GemmLtActivations::kFp8);
  const double t_stack = fp8 && M >= 4 && M <= oc::kGemmLtStackMaxM
                             ? time_engine(oc::GemmLtActivations::kFp8x2, oc::GemmLtStack::kAll, &g_stack)
                             : -1.0;
  // Session 16: the engine's widened route (the FP8 weight widened to bf16 per call, x to bf16, one bf16 matmul),
  // and its widening alone.
  const double t_wide = fp8 ? time_engine(oc::GemmLtActivations::kBf16) : -1.0;
  double t_widen = -1.0;
  if (fp8 && s.groups == 1) {
    Blob wide = blob(size_t(s.N * s.K) * 2, 3, 99);
    t_widen = time_ms([&](int i) {
      return oc::widen_fp8_bf16(w[size_t(i)], wide.as<uint16_t>(), s.N * s.K, nullptr).is_ok();
    });
  }
  const double bytes = double(oc::weight_data_bytes(s.fmt, s.N, s.K)) +
                       double(fp8 ? oc::weight_scale_bytes(s.fmt, s.N, s.K, true, 128, 128) : 0) +
                       4.0 * double(M) * double(Kx + s.N);
  const double flops = 2.0 * double(M) * double(s.N) * double(s.K), floor_s = std::max(bytes / kHbm, flops / kPeak);
  std::printf("%-16s %5s N=%5lld K=%4lld M=%4lld %8.2f MB floor %6.1f us | old", s.name, fp8 ? "FP8" : "BF16",
              (long long)s.N, (long long)s.K, (long long)M, bytes / 1e6, floor_s * 1e6);
  print_ms(t_old);
  std::printf(" | new");
  print_ms(t_new);
  if (t_new > 0) std::printf(" %5.2f TB/s %5.2fx", bytes / (t_new * 1e-3) / 1e12, t_new * 1e-3 / floor_s);
  else std::printf("                  ");
  if (M <= oc::kGemmGemvMaxM) {
    std::printf(" %s | stream", uses_gemv ? "gemv" : "    ");
    print_ms(t_stream);
    std::printf(" gemv");
    print_ms(t_gemv);
    std::printf(" %s general", gforced.even ? "even" : "    ");
    print_ms(t_gemv_gen);
  } else if (has_stream) {
    std::printf(" | grid %d x %d x %d depth %d flat", sp.splits, sp.row_grid, sp.token_chunks * int(s.groups), sp.depth);
    print_ms(t_flat);
    std::printf(" depth %d", alt_depth);
    print_ms(t_alt);
  }
  std::printf(" | Lt bf16");
  print_ms(t_lt[0]);
  std::printf(" fp8-tensor");
  print_ms(t_lt[1]);
  std::printf(" fp8-block");
  print_ms(t_lt[2]);
  const double floor8 = fp8 ? std::max(bytes / kHbm, flops / kPeakFp8) : floor_s;
  std::printf(" | lt-runner %s", fp8 ? "x2" : "bf16");
  print_ms(t_run);
  if (t_run > 0) std::printf(" %5.2fx", t_run * 1e-3 / floor8);
  std::printf(" x2s");
  print_ms(t_stack);
  std::printf(" | graph x2 %7.1f x2s %7.1f us", g_run, g_stack);
  if (g_stack > 0) std::printf(" %5.2f TB/s", bytes / (g_stack * 1e-6) / 1e12);
  std::printf(" | x1");
  print_ms(t_run1);
  if (t_run1 > 0) std::printf(" %5.2fx", t_run1 * 1e-3 / floor8);
  std::printf(" wide");
  print_ms(t_wide);
  if (t_wide > 0) std::printf(" %5.2fx (widen", t_wide * 1e-3 / floor8);
  else std::printf("        (widen");
  print_ms(t_widen);
  std::printf(") fp8 floor us\n");
  if (t_run < 0 && !why_run.empty() && (M == 1 || M == 8)) std::printf("    (lt-runner: %s)\n", why_run.c_str());
  // The runner sends FP8 GEMMs of M >= 64 rows to cuBLASLt (two-term activations), smaller ones to our kernels.
  if (peer) {
    // What the runner runs for this weight at M (plan_gemm_call, fast mode, this process's settings).
    const auto settings = oc::gemm_settings_from_env();
    const oc::GemmCallPlan cp = oc::plan_gemm_call(w[0], M, dsinfer::ops::KernelMode::kFast,
                                                   settings.is_ok() ? settings.value() : oc::GemmSettings{});
    const bool wide_route =
        fp8 && oc::gemm_lt_fp8_route(w[0], M, settings.is_ok() ? settings.value().lt_activations
                                                               : oc::GemmSettings{}.lt_activations) ==
                   oc::GemmLtActivations::kBf16;
    const double t_lt_runner = wide_route ? t_wide : t_run;
    const double t_runner = cp.lt && t_lt_runner > 0                                ? t_lt_runner
                            : cp.precision == oc::GemmPrecision::kBf16 && t_new > 0 ? t_new
                                                                                     : t_old;
    std::printf("PEERROW gemm %s N=%lld K=%lld M=%lld runner_us=%.2f kernel_us=%.2f runner=%s runner_TBps=%.2f\n",
                s.name, (long long)s.N, (long long)s.K, (long long)M, t_runner * 1e3, t_new * 1e3,
                cp.lt ? (wide_route ? "cublaslt-wide" : "cublaslt") : cp.precision == oc::GemmPrecision::kBf16 ? (uses_gemv ? "gemv" : "stream") : "default",
                bytes / (t_runner * 1e-3) / 1e12);
  }
  for (int k = 0; k < 3; ++k)
    if (t_lt[k] < 0 && !why[k].empty() && M == 1) std::printf("    (cuBLASLt kind %d: %s)\n", k, why[k].c_str());
}

void bench_gemm(bool gemv_only, bool peer, bool skinny, bool prefill) {
  const GemmShape shapes[] = {
      {"wq_a", oc::WeightFormat::FP8_BLOCK, 1024, 4096, 1},       {"wq_b", oc::WeightFormat::FP8_BLOCK, 32768, 1024, 1},
      {"wkv", oc::WeightFormat::FP8_BLOCK, 512, 4096, 1},         {"wo_a(8 groups)", oc::WeightFormat::FP8_BLOCK, 8192, 4096, 8},
      {"wo_b", oc::WeightFormat::FP8_BLOCK, 4096, 8192, 1},       {"shared w1/w3", oc::WeightFormat::FP8_BLOCK, 2048, 4096, 1},
      {"shared w2", oc::WeightFormat::FP8_BLOCK, 4096, 2048, 1},  {"idx wq_b", oc::WeightFormat::FP8_BLOCK, 8192, 1024, 1},
      {"csa cmp wkv", oc::WeightFormat::BF16, 1024, 4096, 1},     {"hca cmp wkv", oc::WeightFormat::BF16, 512, 4096, 1},
      {"idx cmp wkv", oc::WeightFormat::BF16, 256, 4096, 1},      {"idx weights", oc::WeightFormat::BF16, 64, 4096, 1},
      {"router", oc::WeightFormat::BF16, 256, 4096, 1},
      {"lm_head", oc::WeightFormat::BF16, 129280, 4096, 1},
  };
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasLtCreate failed\n");
    std::exit(1);
  }
  const size_t ws_bytes = size_t(64) << 20;
  Blob lt_ws = blob(ws_bytes, 2, 1);
  {  // the copy ceiling of this run: a device-to-device copy of 256 MB (read + write bytes / time)
    const size_t cb = size_t(256) << 20;
    Blob c0 = blob(cb, 1, 5), c1 = blob(cb, 1, 6);
    const double t = time_ms([&](int) {
      return cudaMemcpyAsync(c1.data(), c0.data(), cb, cudaMemcpyDeviceToDevice) == cudaSuccess;
    });
    std::printf("copy ceiling: %.2f TB/s (256 MB device-to-device, read + write)\n",
                2.0 * double(cb) / (t * 1e-3) / 1e12);
  }
  std::printf("GEMM times in us (median of %d after %d warm-up, %d rotating sets); old = default path (fp32 skinny for "
              "M <= 8, tiled above), new = GemmPrecision::kBf16 (the GEMV kernel at M <= %d where it applies, tagged "
              "'gemv'; else the streaming kernel), stream = the streaming kernel alone\n", kRuns, kWarm, kSets,
              int(oc::kGemmGemvMaxM));
  const std::vector<int64_t> ms = prefill     ? std::vector<int64_t>{64, 256, 1024, 4096, 8192}
                                  : skinny    ? std::vector<int64_t>{1, 8, 16, 32, 64, 128, 192, 256}
                                  : peer      ? std::vector<int64_t>{64, 1024, 4096}
                                  : gemv_only ? std::vector<int64_t>{1, 2, 4, 6, 8, 16}
                                              : std::vector<int64_t>{1, 2, 4, 6, 8, 16, 64, 256, 4096};
  for (const GemmShape& s : shapes) {
    const bool head = std::string(s.name) == "lm_head";
    if ((peer || skinny || prefill) && (s.fmt != oc::WeightFormat::FP8_BLOCK || s.groups != 1)) continue;
    for (int64_t M : ms)
      if (M <= 256 || !head) bench_gemm_shape(s, M, lt, lt_ws.data(), ws_bytes, peer || skinny || prefill);
  }
  cublasLtDestroy(lt);
}

// ---- issue 31 / 30, session 15: the grouped projection wo_a (8 groups of 1,024 x 4,096, FP8 E8M0) at decode and
// prefill sizes, every path side by side: "kernels" = plan_gemm_grouped_call's kernel path (the GEMV kernel at M <=
// 16, the tiled kernel above: the runner's wo_a before session 15 below 1,024 rows); "per-group Lt" = 8 engine calls
// on group views (FP8 x2, the runner's wo_a from 1,024 rows before session 15); "batched" = GemmLtEngine::
// gemm_grouped (widen + x to bf16 + one strided-batched bf16 GEMM: the runner's wo_a from kGemmGroupedBatchedMinM
// rows now), with its widening and x conversion timed alone; wq_b (32,768 x 1,024: the same weight bytes and FLOPs)
// on the engine (FP8 x2) as the yardstick. Ratios against the FP8 floor max(bytes / 4.2e12, flops / 1.4e15)
// (weights + scales + fp32 x + fp32 y). "diff" = normalised L2 difference of the batched result against the kernels'
// on set 0 (both bf16-x numerics: accumulation order only). A "PEERROW grouped" line per M for bench/peers.
void bench_grouped() {
  constexpr int64_t G = 8, Ng = 1024, K = 4096, N = G * Ng;
  const oc::WeightFormat f8 = oc::WeightFormat::FP8_BLOCK;
  const int64_t ms[] = {1, 16, 17, 32, 64, 128, 192, 256, 1024, 4096};
  std::vector<Blob> wd, ws, qd, qs;
  std::vector<oc::DeviceWeight> w(kSets), wq(kSets);
  for (int i = 0; i < kSets; ++i) {
    wd.push_back(blob(oc::weight_data_bytes(f8, N, K), 1, 110 + i));
    ws.push_back(blob(oc::weight_scale_bytes(f8, N, K, true, 128, 128), 2, 120 + i));
    w[size_t(i)] = {f8, N, K, wd.back().data(), ws.back().data(), true, 128, 128};
    qd.push_back(blob(oc::weight_data_bytes(f8, 32768, 1024), 1, 130 + i));
    qs.push_back(blob(oc::weight_scale_bytes(f8, 32768, 1024, true, 128, 128), 2, 140 + i));
    wq[size_t(i)] = {f8, 32768, 1024, qd.back().data(), qs.back().data(), true, 128, 128};
  }
  std::printf("wo_a grouped (G = %lld, N_g = %lld, K = %lld, FP8 E8M0) in us; ratio to the FP8 floor\n", (long long)G,
              (long long)Ng, (long long)K);
  for (int64_t M : ms) {
    std::vector<Blob> xs, ys, xq, yq;
    for (int i = 0; i < kSets; ++i) {
      xs.push_back(blob(size_t(M * G * K) * 4, -1, 150 + i));
      ys.push_back(blob(size_t(M * N) * 4, -1, 160 + i));
      xq.push_back(blob(size_t(M * 1024) * 4, -1, 170 + i));
      yq.push_back(blob(size_t(M * 32768) * 4, -1, 180 + i));
    }
    const oc::GemmCallPlan cp = oc::plan_gemm_grouped_call(w[0], G, M, dsinfer::ops::KernelMode::kFast, oc::GemmSettings{});
    auto kernels = [&](int i) {
      return ok(oc::gemm_grouped_cuda(xs[size_t(i)].as<float>(), M, G * K, K, w[size_t(i)], G, ys[size_t(i)].as<float>(),
                                      N, Ng, nullptr, cp.precision), "grouped kernels");
    };
    const double t_kern = time_ms(kernels);
    // Session 23: the streaming kernel on the grouped weight (GemmPrecision::kBf16 above the GEMV kernel's rows:
    // groups on grid z, the FP8 weight read in place, x to bf16 in each block), the batched call's numerics class.
    const double t_stream = time_opt(M > oc::kGemmGemvMaxM && M <= oc::kGemmStreamMaxM, [&](int i) {
      return ok(oc::gemm_grouped_cuda(xs[size_t(i)].as<float>(), M, G * K, K, w[size_t(i)], G,
                                      ys[size_t(i)].as<float>(), N, Ng, nullptr, oc::GemmPrecision::kBf16),
                "grouped stream");
    });
    std::vector<float> y_kern(size_t(M * N)), y_new(size_t(M * N));
    CHECK(cudaDeviceSynchronize());
    if (!kernels(0)) std::exit(1);
    CHECK(cudaMemcpy(y_kern.data(), ys[0].data(), y_kern.size() * 4, cudaMemcpyDeviceToHost));
    // Per-group cuBLASLt (FP8 x2): block scaling needs M % 4 == 0 (the engine's tail rows run on the fp32 kernel).
    double t_pg = -1.0;
    if (M >= 4) {
      oc::GemmLtEngine eng;
      auto per_group = [&](int i) {
        for (int64_t g = 0; g < G; ++g) {
          const oc::DeviceWeight v = oc::gemm_group_view(w[size_t(i)], G, g);
          if (!ok(eng.gemm(xs[size_t(i)].as<float>() + g * K, M, G * K, v, ys[size_t(i)].as<float>() + g * Ng, N, false,
                           nullptr), "per-group lt"))
            return false;
        }
        return true;
      };
      t_pg = time_opt(per_group(0), per_group);
    }
    oc::GemmLtEngine eng;
    auto batched = [&](int i) {
      return ok(eng.gemm_grouped(xs[size_t(i)].as<float>(), M, G * K, K, w[size_t(i)], G, ys[size_t(i)].as<float>(), N,
                                 Ng, nullptr), "batched grouped lt");
    };
    // n/a (with the engine's reason on stderr) when the engine refuses: the other columns still run.
    const bool runs = ok(eng.prepare_grouped(w[0], G, M, nullptr), "prepare grouped") && batched(0);
    CHECK(cudaDeviceSynchronize());
    if (runs) CHECK(cudaMemcpy(y_new.data(), ys[0].data(), y_new.size() * 4, cudaMemcpyDeviceToHost));
    const double t_new = time_opt(runs, batched);
    double num = 0, den = 0;
    for (size_t j = 0; j < y_new.size() && runs; ++j) {
      num += double(y_new[j] - y_kern[j]) * double(y_new[j] - y_kern[j]);
      den += double(y_kern[j]) * double(y_kern[j]);
    }
    // The batched call's two preparation kernels alone (the widening of 32 MB of FP8; x to bf16).
    Blob wide = blob(size_t(N * K) * 2, 3, 190), xb = blob(size_t(M * G * K) * 2, 3, 191);
    const double t_widen = time_ms([&](int i) {
      return oc::widen_fp8_bf16(w[size_t(i)], wide.as<uint16_t>(), N * K, nullptr).is_ok();
    });
    const double t_xb = time_ms([&](int i) {
      oc::detail::launch_lt_bf16(xs[size_t(i)].as<float>(), M, G * K, G * K, xb.as<uint16_t>(), nullptr);
      return cudaGetLastError() == cudaSuccess;
    });
    double t_wqb = -1.0;
    if (M >= 4) {
      oc::GemmLtEngine e2;
      t_wqb = time_ms([&](int i) {
        return ok(e2.gemm(xq[size_t(i)].as<float>(), M, 1024, wq[size_t(i)], yq[size_t(i)].as<float>(), 32768, false,
                          nullptr), "wq_b lt");
      });
    }
    const double bytes = double(N * K) + double(N / 128 * K / 128) + 4.0 * double(M) * double(G * K + N);
    const double flops = 2.0 * double(M) * double(N) * double(K), floor_s = std::max(bytes / kHbm, flops / kPeakFp8);
    std::printf("wo_a M=%5lld floor %7.1f | kernels(%s)", (long long)M, floor_s * 1e6,
                cp.precision == oc::GemmPrecision::kBf16 ? "gemv" : "tiled");
    print_ms(t_kern);
    std::printf(" %5.2fx | stream", t_kern * 1e-3 / floor_s);
    print_ms(t_stream);
    std::printf(" | per-group Lt x2");
    print_ms(t_pg);
    std::printf(" | batched");
    print_ms(t_new);
    std::printf(" %5.2fx (widen", runs ? t_new * 1e-3 / floor_s : 0.0);
    print_ms(t_widen);
    std::printf(" x->bf16");
    print_ms(t_xb);
    std::printf(") diff %.2e | wq_b Lt x2", den > 0 ? std::sqrt(num / den) : std::sqrt(num));
    print_ms(t_wqb);
    std::printf(" | runner: %s\n", cp.lt ? "batched" : "kernels");
    const double t_runner = cp.lt && runs ? t_new : t_kern;
    std::printf("PEERROW grouped wo_a M=%lld runner_us=%.2f kernels_us=%.2f per_group_lt_us=%.2f batched_us=%.2f "
                "wq_b_lt_us=%.2f floor_us=%.2f\n",
                (long long)M, t_runner * 1e3, t_kern * 1e3, t_pg * 1e3, t_new * 1e3, t_wqb * 1e3, floor_s * 1e6);
    std::fflush(stdout);
  }
}

// kSets FP8_BLOCK weights of shape s (E8M0 128 x 128 scales; seeds seed, seed + 1, ...; the data lives in `keep`).
std::vector<oc::DeviceWeight> fp8_weight_sets(const GemmShape& s, uint64_t seed, std::vector<Blob>& keep) {
  std::vector<oc::DeviceWeight> w(kSets);
  for (int i = 0; i < kSets; ++i) {
    keep.push_back(blob(oc::weight_data_bytes(s.fmt, s.N, s.K), 1, seed + i));
    const void* data = keep.back().data();
    keep.push_back(blob(oc::weight_scale_bytes(s.fmt, s.N, s.K, true, 128, 128), 2, seed + 10 + i));
    w[size_t(i)] = {s.fmt, s.N, s.K, data, keep.back().data(), true, 128, 128};
  }
  return w;
}

// `--fp8skinny NAME [M]` / `--fp8skinny-shapes NAME [M]`: a NAME that no shape of the table has, or an M that is not
// a positive integer, is a usage error naming it (exit 2) rather than an empty table.
void check_fp8_filter(const char* only_shape, bool matched, const char* m_arg) {
  if (only_shape && !matched) {
    std::fprintf(stderr, "dsinfer_gemm_bench: no FP8 skinny shape named '%s'\n", only_shape);
    std::exit(2);
  }
  if (m_arg && std::atoll(m_arg) <= 0) {
    std::fprintf(stderr, "dsinfer_gemm_bench: M must be a positive integer, found '%s'\n", m_arg);
    std::exit(2);
  }
}

// A NAME that no shape of `shapes` has: check_fp8_filter's usage error.
template <size_t N>
void check_fp8_shape_name(const char* only_shape, const GemmShape (&shapes)[N]) {
  bool matched = false;
  for (const GemmShape& sh : shapes) matched = matched || (only_shape && std::string(only_shape) == sh.name);
  check_fp8_filter(only_shape, matched, nullptr);
}

// kSets rotating fp32 sets of x (M x kx, seeds x_seed + i) and y (M x n, seeds y_seed + i).
void xy_sets(int64_t M, int64_t kx, int64_t n, uint64_t x_seed, uint64_t y_seed, std::vector<Blob>& xs,
             std::vector<Blob>& ys) {
  for (int i = 0; i < kSets; ++i) {
    xs.push_back(blob(size_t(M * kx) * 4, -1, x_seed + i));
    ys.push_back(blob(size_t(M * n) * 4, -1, y_seed + i));
  }
}

// ---- issue 31, session 24: the FP8 skinny wgmma kernel against today's decode routes, same shapes and inputs. Every
// column is us per call replayed from CUDA graphs (time_graph_us: kRuns replays rotating kSets sets of weights and
// x, > 60 MB together for the 32 MB weights, so the weight comes from HBM): sk2 / sk1 = the kernel with two / one
// activation terms (quantization + GEMM), "splits n | sk2" = sk2 with the K split doubled (the plan's cluster rule
// against more CTAs), q2 = its quantization alone, stream = the bf16 streaming kernel
// (GemmPrecision::kBf16 when its plan applies), x2 / x2s = the cuBLASLt engine's two-term route as two matmuls /
// stacked (single weights, M % 4 == 0), batched = the engine's grouped call (wo_a). TB/s = weight bytes / time.
// "diff" = normalised L2 difference of sk2 against x2 (or batched, bf16-x numerics) on set 0.
void bench_fp8_skinny(const char* only_shape, int64_t only_m) {
  const GemmShape shapes[] = {
      {"wq_a", oc::WeightFormat::FP8_BLOCK, 1024, 4096, 1}, {"wkv", oc::WeightFormat::FP8_BLOCK, 512, 4096, 1},
      {"wq_b", oc::WeightFormat::FP8_BLOCK, 32768, 1024, 1}, {"wo_b", oc::WeightFormat::FP8_BLOCK, 4096, 8192, 1},
      {"wo_a(8 groups)", oc::WeightFormat::FP8_BLOCK, 8192, 4096, 8},
  };
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("FP8 skinny wgmma kernel vs today's routes, us per call replayed from CUDA graphs (mean of %d replays, "
              "%d rotating sets); TB/s = weight bytes / time\n", kRuns, kSets);
  check_fp8_shape_name(only_shape, shapes);
  for (const GemmShape& s : shapes) {
    if (only_shape && std::string(only_shape) != s.name) continue;
    const int64_t G = s.groups, Ng = s.N / G, Kx = s.K * G;
    std::vector<Blob> wblobs;
    const std::vector<oc::DeviceWeight> w = fp8_weight_sets(s, 210, wblobs);
    const double wbytes = double(oc::weight_data_bytes(s.fmt, s.N, s.K));
    for (int64_t M : {1, 8, 64, 128, 256}) {
      if (only_m > 0 && M != only_m) continue;
      std::vector<Blob> xs, ys;
      xy_sets(M, Kx, s.N, 230, 240, xs, ys);
      Blob yref = blob(size_t(M * s.N) * 4, -1, 250);
      const size_t skb = oc::gemm_fp8_skinny_workspace_bytes(Kx, 2);
      Blob skws = blob(skb, 2, 251);
      auto skinny = [&](int terms) {
        return [&, terms](int i, cudaStream_t st) {
          return ok(oc::gemm_fp8_skinny_cuda(xs[size_t(i)].as<float>(), M, Kx, s.K, w[size_t(i)], G,
                                             ys[size_t(i)].as<float>(), s.N, Ng, false, terms, skws.data(), skb, sms,
                                             st),
                    "fp8 skinny");
        };
      };
      oc::detail::Fp8SkinnyParams p;
      const bool planned = oc::plan_gemm_fp8_skinny(M, Ng, s.K, G, 2, sms, p);
      const double t_sk2 = planned ? time_graph_us(skinny(2)) : -1.0;
      const double t_sk1 = planned ? time_graph_us(skinny(1)) : -1.0;
      // The same call with the K split doubled (clusters of 2 splits -> 4, 4 -> 8, or 1 -> 2; one item per cluster),
      // the plan's co-residency rule (clusters of 4 / 8 on half the SMs) measured: -1 when K does not divide.
      oc::detail::Fp8SkinnyParams p2 = p;
      const bool has_p2 = planned && p.splits < 8 && p.kb_per_split % 2 == 0 && p.kb_per_split >= 4 &&
                          (p.splits > 1 || p.items * 2 <= sms) &&
                          p.stages * oc::detail::fp8sk_stage_bytes(p.terms, p.tok, p.wg_rows) >=
                              oc::detail::fp8sk_partial_bytes(p.tok);
      if (has_p2) {
        p2.splits = p.splits * 2;
        p2.kb_per_split = p.kb_per_split / 2;
        p2.grid = p.items * p2.splits;
      }
      // The quantization and (with `gemm`) the GEMM at launch shape q, by the detail launchers.
      auto manual = [&](const oc::detail::Fp8SkinnyParams& q, bool gemm) {
        return [&, q, gemm](int i, cudaStream_t st) {
          const oc::detail::Fp8SkinnyArgs a = oc::gemm_fp8_skinny_args(
              xs[size_t(i)].as<float>(), M, Kx, s.K, w[size_t(i)], G, ys[size_t(i)].as<float>(), s.N, Ng, false,
              skws.data(), q);
          (void)oc::detail::launch_fp8sk_quant(a, q, st);
          if (gemm && oc::detail::launch_fp8sk_gemm(a, q, st) != 0) return false;
          return cudaGetLastError() == cudaSuccess;
        };
      };
      const double t_sk2x = has_p2 ? time_graph_us(manual(p2, true)) : -1.0;
      const double t_q = planned ? time_graph_us(manual(p, false)) : -1.0;
      // the streaming kernel (plan_gemm_stream applies: FP8, M <= 256, K and block_k multiples of 64)
      const double t_stream = time_graph_us([&](int i, cudaStream_t st) {
        const float* x = xs[size_t(i)].as<float>();
        float* y = ys[size_t(i)].as<float>();
        if (G == 1) return oc::gemm_cuda(x, M, s.K, w[size_t(i)], y, s.N, false, st, oc::GemmPrecision::kBf16).is_ok();
        return oc::gemm_grouped_cuda(x, M, Kx, s.K, w[size_t(i)], G, y, s.N, Ng, st, oc::GemmPrecision::kBf16).is_ok();
      });
      // cuBLASLt: two-term x2 / x2s (single weights), the batched widened call (grouped)
      auto engine_us = [&](oc::GemmLtStack stack, float* keep) {
        oc::GemmLtEngine eng(oc::GemmLtActivations::kFp8x2, stack);
        bool all = true;
        for (int i = 0; i < kSets && all; ++i) {
          dsinfer::Status st = G == 1 ? eng.prepare(w[size_t(i)], M, nullptr) : eng.prepare_grouped(w[size_t(i)], G, M, nullptr);
          if (st.is_ok())
            st = G == 1 ? eng.gemm(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)], ys[size_t(i)].as<float>(), s.N, false, nullptr)
                        : eng.gemm_grouped(xs[size_t(i)].as<float>(), M, Kx, s.K, w[size_t(i)], G,
                                           ys[size_t(i)].as<float>(), s.N, Ng, nullptr);
          all = st.is_ok();
        }
        CHECK(cudaDeviceSynchronize());
        if (all && keep) CHECK(cudaMemcpy(keep, ys[0].data(), size_t(M * s.N) * 4, cudaMemcpyDeviceToDevice));
        return all ? time_graph_us([&](int i, cudaStream_t st) {
          return (G == 1 ? eng.gemm(xs[size_t(i)].as<float>(), M, s.K, w[size_t(i)], ys[size_t(i)].as<float>(), s.N, false, st)
                         : eng.gemm_grouped(xs[size_t(i)].as<float>(), M, Kx, s.K, w[size_t(i)], G,
                                            ys[size_t(i)].as<float>(), s.N, Ng, st))
              .is_ok();
        }) : -1.0;
      };
      const double t_x2 = M % 4 == 0 || G > 1 ? engine_us(oc::GemmLtStack::kOff, yref.as<float>()) : -1.0;
      const double t_x2s = G == 1 && M % 4 == 0 ? engine_us(oc::GemmLtStack::kAll, nullptr) : -1.0;
      double diff = -1.0;
      if (planned && t_x2 > 0 && skinny(2)(0, nullptr)) {
        CHECK(cudaDeviceSynchronize());
        std::vector<float> a(size_t(M * s.N)), b(size_t(M * s.N));
        CHECK(cudaMemcpy(a.data(), ys[0].data(), a.size() * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(b.data(), yref.data(), b.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0.0, den = 0.0;
        for (size_t j = 0; j < a.size(); ++j) {
          num += (double(a[j]) - double(b[j])) * (double(a[j]) - double(b[j]));
          den += double(b[j]) * double(b[j]);
        }
        diff = den > 0 ? std::sqrt(num / den) : -1.0;
      }
      auto col = [&](const char* name, double us) {
        if (us < 0) std::printf(" | %s     n/a", name);
        else std::printf(" | %s %7.1f %4.2f TB/s", name, us, wbytes / (us * 1e-6) / 1e12);
      };
      std::printf("%-15s N=%5lld K=%4lld M=%3lld", s.name, (long long)s.N, (long long)s.K, (long long)M);
      if (planned)
        std::printf(" [tok %3d wg_rows %d splits %d grid %3lld stages %d]", p.tok, p.wg_rows, p.splits,
                    (long long)p.grid, p.stages);
      col("sk2", t_sk2);
      col("sk1", t_sk1);
      if (has_p2) std::printf(" | splits %d", p2.splits);
      col("sk2", t_sk2x);
      std::printf(" | q2 %6.1f", t_q);
      col("stream", t_stream);
      col(G == 1 ? "x2" : "batched", t_x2);
      col("x2s", t_x2s);
      std::printf(" | diff %.2e\n", diff);
      std::fflush(stdout);
    }
  }
}

// ---- issue 31, session 30: the FP8 skinny kernel's launch shapes swept (plan_gemm_fp8_skinny_at): every consumer
// layout (wg_rows 2: 128 rows x tok tokens; 1: 64 rows x 2 units of tok) whose one token tile holds the M tokens,
// at split caps 1, 2 and 8, two activation terms, quantization + GEMM replayed from graphs as in --fp8skinny. "bits"
// compares y with the plan's own shape on set 0: expected equal at the plan's split count (the same sums in the same
// order whatever the layout), not at another (the split partials are added in another grouping).
void bench_fp8_skinny_shapes(const char* only_shape, int64_t only_m) {
  const GemmShape shapes[] = {
      {"wq_a", oc::WeightFormat::FP8_BLOCK, 1024, 4096, 1}, {"wq_b", oc::WeightFormat::FP8_BLOCK, 32768, 1024, 1},
      {"wo_b", oc::WeightFormat::FP8_BLOCK, 4096, 8192, 1},
      {"wo_a(8 groups)", oc::WeightFormat::FP8_BLOCK, 8192, 4096, 8},
  };
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("FP8 skinny launch shapes, two terms, us per call (quantization + GEMM, graph-replayed, mean of %d, %d "
              "rotating sets); * = the plan's shape\n", kRuns, kSets);
  check_fp8_shape_name(only_shape, shapes);
  for (const GemmShape& s : shapes) {
    if (only_shape && std::string(only_shape) != s.name) continue;
    const int64_t G = s.groups, Ng = s.N / G, Kx = s.K * G;
    std::vector<Blob> wblobs;
    const std::vector<oc::DeviceWeight> w = fp8_weight_sets(s, 310, wblobs);
    const double wbytes = double(oc::weight_data_bytes(s.fmt, s.N, s.K));
    for (int64_t M : {8, 64, 256}) {
      if (only_m > 0 && M != only_m) continue;
      std::vector<Blob> xs, ys;
      xy_sets(M, Kx, s.N, 330, 340, xs, ys);
      const size_t skb = oc::gemm_fp8_skinny_workspace_bytes(Kx, 2);
      Blob skws = blob(skb, 2, 351);
      oc::detail::Fp8SkinnyParams planned;
      if (!oc::plan_gemm_fp8_skinny(M, Ng, s.K, G, 2, sms, planned)) continue;
      auto run = [&](const oc::detail::Fp8SkinnyParams& q) {
        return [&, q](int i, cudaStream_t st) {
          const oc::detail::Fp8SkinnyArgs a = oc::gemm_fp8_skinny_args(
              xs[size_t(i)].as<float>(), M, Kx, s.K, w[size_t(i)], G, ys[size_t(i)].as<float>(), s.N, Ng, false,
              skws.data(), q);
          return oc::detail::launch_fp8sk_quant(a, q, st) == 0 && oc::detail::launch_fp8sk_gemm(a, q, st) == 0 &&
                 cudaGetLastError() == cudaSuccess;
        };
      };
      std::vector<float> want(size_t(M * s.N)), got(size_t(M * s.N));
      CHECK(cudaDeviceSynchronize());
      if (!run(planned)(0, nullptr)) continue;
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(want.data(), ys[0].data(), want.size() * 4, cudaMemcpyDeviceToHost));
      for (int wg_rows : {2, 1})
        for (int tok = 8; tok <= 128; tok *= 2) {
          int last_splits = 0;  // split caps that give the same split count give the same shape
          for (int cap : {1, 2, 8}) {
            oc::detail::Fp8SkinnyParams q;
            if ((2 / wg_rows) * tok < M || (2 / wg_rows) * tok >= 2 * M + 16) continue;  // one token tile, tight
            if (!oc::plan_gemm_fp8_skinny_at(M, Ng, s.K, G, 2, sms, wg_rows, tok, cap, q)) continue;
            if (q.splits == last_splits) continue;
            last_splits = q.splits;
            const double us = time_graph_us(run(q));
            CHECK(cudaMemset(ys[0].data(), 0, got.size() * 4));
            const bool ran = run(q)(0, nullptr);
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(got.data(), ys[0].data(), got.size() * 4, cudaMemcpyDeviceToHost));
            const bool same = ran && std::memcmp(got.data(), want.data(), got.size() * 4) == 0;
            const bool is_plan = q.wg_rows == planned.wg_rows && q.tok == planned.tok && q.splits == planned.splits;
            std::printf("%-15s M=%3lld %s wg_rows %d tok %3d splits %d grid %3lld stages %d items %4lld | %7.1f us "
                        "%4.2f TB/s | bits %s\n",
                        s.name, (long long)M, is_plan ? "*" : " ", q.wg_rows, q.tok, q.splits, (long long)q.grid,
                        q.stages, (long long)q.items, us, us > 0 ? wbytes / (us * 1e-6) / 1e12 : 0.0,
                        same ? "same" : "DIFFER");
            std::fflush(stdout);
          }
        }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool gemv_only = argc > 1 && std::string(argv[1]) == "--gemv";
  const bool peer = argc > 1 && std::string(argv[1]) == "--peer";
  const bool skinny = argc > 1 && std::string(argv[1]) == "--skinny";
  const bool grouped = argc > 1 && std::string(argv[1]) == "--grouped";
  const bool prefill = argc > 1 && std::string(argv[1]) == "--prefill";
  const bool fp8skinny = argc > 1 && std::string(argv[1]) == "--fp8skinny";
  const bool fp8shapes = argc > 1 && std::string(argv[1]) == "--fp8skinny-shapes";
  if (argc > 1 && !gemv_only && !peer && !skinny && !grouped && !prefill && !fp8skinny && !fp8shapes) {
    std::fprintf(stderr,
                 "usage: dsinfer_gemm_bench [--gemv | --peer | --skinny | --grouped | --prefill | --fp8skinny "
                 "[NAME [M]] | --fp8skinny-shapes [NAME [M]]], found '%s'\n",
                 argv[1]);
    return 2;
  }
  if ((fp8skinny || fp8shapes) && argc > 3) check_fp8_filter(nullptr, true, argv[3]);
  int dev = 0;
  if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; floor = max(bytes / %.1f TB/s, flops / %.0f TFLOP/s)\n", p.name,
              p.multiProcessorCount, p.l2CacheSize >> 20, kHbm / 1e12, kPeak / 1e12);
  if (grouped) bench_grouped();
  else if (fp8skinny) bench_fp8_skinny(argc > 2 ? argv[2] : nullptr, argc > 3 ? std::atoll(argv[3]) : 0);
  else if (fp8shapes) bench_fp8_skinny_shapes(argc > 2 ? argv[2] : nullptr, argc > 3 ? std::atoll(argv[3]) : 0);
  else bench_gemm(gemv_only, peer, skinny, prefill);
  return 0;
}
