// Benchmark of the Lightning Indexer kernels at V4-Flash shapes (64 heads x 128, top-512, ratio 4): the scores on
// tensor cores over FP8 keys (bf16-exact queries: one split, as the official FP4-simulated queries, with one token a
// block and with four tokens a block sharing each key tile; fp32 queries: three splits, the plan's kernel), the fp32
// CUDA-core scores over fp32 keys, and the radix top-k, each timed alone with CUDA events
// (2 warm-up calls, mean of 10). Cases: prefill of 4,096 tokens from position 0; a 32K prompt in four 8,192-token
// chunks (summed); decode batch 1 / 64 / 256 at context 4,096; decode batch 1 at context 131,072 (32,768
// candidates: the top-k's rows exceed its shared-memory cache and re-read the scores).
// Floors: scores = 2 x sum(visible) x heads x dim FLOP at the FP8 peak (1,393 TFLOP/s measured by dsinfer bench on the
// H200) or their key bytes (132 B a key a sequence) at 4.18 TB/s, whichever is larger; top-k = the scores read once
// (4 B a candidate) plus the output written, at 4.18 TB/s. The top-k also in every form (the full scan, the
// candidate form at 4,096 slots, the sample form on rows over 0 .. 8,192 keys; their outputs compared), with the size of
// pass 0's boundary bin and the sample form's candidate count in sampled rows; long-prompt cases: 128K's chunks 8 and 15 and a 512K prompt's last 512 tokens (~131K candidates a row).
// The wgmma kernel (8 tokens a block; fast mode's opt-in prefill plan) in its own columns, one and three splits, with
// its largest score difference from the four-token kernel (relative to the largest score, 64 sampled rows) and the
// rows whose top-k differs between the two kernels' scores (near-ties).
// Usage: dsinfer_indexer_bench (DSINFER_INDEXER_BENCH_WG_ONLY=1: one wgmma launch of 128K chunk 8 alone, for ncu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ops/indexer/indexer_cuda.h"
#include "ops/kv_format/kv_format.h"

namespace oc = dsinfer::ops::cuda;
using dsinfer::ops::LayerStateView;
using dsinfer::ops::StepDevice;

namespace {

constexpr int64_t kHeads = 64, kDim = 128, kTopk = 512, kM = 4, kEntriesPerBlock = 64;
constexpr double kFp8Peak = 1393e12, kHbm = 4.18e12;
constexpr int kWarm = 2, kRuns = 10;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  check(cudaMalloc(&d, h.size() * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

// One step: seqs sequences, each `len` tokens from position `start`, each with its own keys.
struct Case {
  std::string name;
  int64_t seqs, start, len;
};

// The top-k forms timed side by side: the full scan, the candidate form (session 21's plan: 4,096 slots) and the
// sample form at these slot counts.
constexpr oc::detail::IdxSelForm kForms[] = {{0, false, 0},    {4096, false, 0},    {4096, true, 0},
                                             {4096, true, 2048}, {4096, true, 4096}, {4096, true, 8192}};
constexpr int kNumForms = int(sizeof(kForms) / sizeof(kForms[0]));
std::string form_name(const oc::detail::IdxSelForm& f) {
  if (f.cand_slots == 0) return "full";
  if (!f.sample) return "cand " + std::to_string(f.cand_slots);
  return "smp>" + std::to_string(f.sample_min_keys);  // rows over this many keys
}

struct Timing {
  double tc1 = 0, tc1_4 = 0, tc3 = 0, fp32 = 0, select = 0, flops = 0, key_bytes = 0, cand = 0, T = 0;
  double wg1 = 0, wg3 = 0;  // the wgmma kernel (fast mode's prefill plan), one and three splits
  double wg_rel = 0;        // max |wg - tc 4tok| / max |tc 4tok| over the sampled rows (1 split)
  int64_t wg_rows_diff = 0; // rows whose top-k differs between the two kernels' scores (1 split)
  double forms[kNumForms] = {};
  int plan = 1;         // tokens a block the plan picks (the tc 3-split column runs it)
  bool identical = true;  // every form's output equal to the full scan's
  int bin_median = 0, bin_max = 0, bin_rows = 0, bin_over = 0;  // pass-0 boundary bin sizes of sampled rows
  int reach_median = 0, reach_max = 0, reach_miss = 0;  // the sample form's candidates in the same rows
};

uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The sample form's candidates in a row (the kernel's rule, on the host): keys at or above the 22-bit prefix of the
// sample's rank-r key (ns = min(n, 1,024) keys at even strides, r = K ns / n + 4 sqrt of it + 4).
int sample_reach(const std::vector<float>& row) {
  const int64_t n = int64_t(row.size()), ns = std::min<int64_t>(n, 1024);
  std::vector<uint32_t> v(static_cast<size_t>(ns));
  for (int64_t i = 0; i < ns; ++i) v[size_t(i)] = order_key(row[size_t(i * n / ns)]);
  std::sort(v.begin(), v.end(), std::greater<uint32_t>());
  const float mean = float(kTopk) * float(ns) / float(n);
  const int64_t r = std::min<int64_t>(ns, int64_t(std::ceil(mean + 4.0f * std::sqrt(mean) + 4.0f)));
  const uint32_t lo = v[size_t(r - 1)] & ~0x3FFu;
  int c = 0;
  for (float f : row) c += order_key(f) >= lo ? 1 : 0;
  return c;
}

// Pass 0's boundary bin (top 11 bits of the order key) of the k-th largest score: how many keys it holds.
int boundary_bin_keys(const std::vector<float>& row) {
  std::vector<int> hist(2048, 0);
  for (float f : row) ++hist[order_key(f) >> 21];
  int64_t cum = 0;
  for (int b = 2047; b >= 0; --b) {
    cum += hist[size_t(b)];
    if (cum >= kTopk) return hist[size_t(b)];
  }
  return 0;
}

template <class F>
double time_ms(F&& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < kWarm; ++i) f();
  cudaEventRecord(a);
  for (int i = 0; i < kRuns; ++i) f();
  cudaEventRecord(b);
  check(cudaEventSynchronize(b), "kernel");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / kRuns;
}

Timing run(const Case& c, std::mt19937& g) {
  const int64_t T = c.seqs * c.len, end = c.start + c.len, entries = end / kM;
  const int64_t nb = (entries + kEntriesPerBlock - 1) / kEntriesPerBlock;
  std::vector<int64_t> pos;
  std::vector<int32_t> seq_of, tables, cu{0}, slot, tokens;
  std::vector<int64_t> start;
  Timing tm;
  for (int64_t s = 0; s < c.seqs; ++s) {
    for (int64_t i = 0; i < c.len; ++i) {
      pos.push_back(c.start + i);
      seq_of.push_back(int32_t(s));
      tokens.push_back(0);
      tm.cand += double((c.start + i + 1) / kM);
    }
    cu.push_back(int32_t(pos.size()));
    start.push_back(c.start);
    slot.push_back(0);
    for (int64_t b = 0; b < nb; ++b) tables.push_back(int32_t(s * nb + b));
  }
  tm.T = double(T);
  tm.flops = 2.0 * tm.cand * kHeads * kDim;
  tm.key_bytes = double(c.seqs) * double(entries) * double(dsinfer::ops::kIdxRowBytes);
  StepDevice st{T, c.seqs, upload(tokens), upload(pos), upload(seq_of), upload(cu), upload(start), upload(slot),
                upload(tables), nb};
  const int64_t blocks = c.seqs * nb;
  // FP8 keys: random finite e4m3 codes, scale 1; fp32 keys: random.
  std::vector<uint32_t> fp8(size_t(blocks * dsinfer::ops::kIdxBlockBytes / 4));
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t* p = fp8.data() + b * dsinfer::ops::kIdxBlockBytes / 4;
    for (int64_t i = 0; i < kEntriesPerBlock * kDim / 4; ++i) p[i] = g() & 0xEFEFEFEFu;  // exponent < 15: no NaN
    for (int64_t i = 0; i < kEntriesPerBlock; ++i) p[kEntriesPerBlock * kDim / 4 + i] = 0x3f800000u;
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f32(size_t(blocks * kEntriesPerBlock * kDim));
  for (auto& x : f32) x = u(g);
  LayerStateView v8, v32;
  v8.blocks = reinterpret_cast<float*>(upload(fp8));
  v8.block_stride = dsinfer::ops::kIdxBlockBytes / 4;
  v8.entries_per_block = kEntriesPerBlock;
  v8.index_keys_offset = 0;
  v8.index_head_dim = kDim;
  v8.fp8 = true;
  v32 = v8;
  v32.blocks = upload(f32);
  v32.block_stride = kEntriesPerBlock * kDim;
  v32.fp8 = false;
  std::vector<float> q1(size_t(T * kHeads * kDim)), q3(q1.size()), w(size_t(T * kHeads));
  for (size_t i = 0; i < q1.size(); ++i) {
    q3[i] = u(g);
    q1[i] = float(int(q3[i] * 12.0f)) / 8.0f;  // few significant bits: bf16-exact
  }
  for (auto& x : w) x = u(g) * 0.125f;
  float *dq1 = upload(q1), *dq3 = upload(q3), *dw = upload(w), *scores = nullptr;
  int32_t* out = nullptr;
  const int64_t max_visible = end / kM;
  check(cudaMalloc(&scores, size_t(T * max_visible) * 4), "scores");
  check(cudaMalloc(&out, size_t(T * kTopk) * 4), "out");
  const oc::IndexerCudaParams p{kHeads, kDim, kM, kTopk};
  // One token a block (the session-15 kernel), four tokens a block sharing each key tile, and the plan's choice.
  tm.tc1 = time_ms([&] { oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores, nullptr, 1); });
  tm.tc1_4 = time_ms([&] { oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores, nullptr, 4); });
  if (std::getenv("DSINFER_INDEXER_BENCH_WG_ONLY")) {  // one wgmma launch (for a profiler), nothing else
    oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores, nullptr, 8);
    check(cudaDeviceSynchronize(), "wg");
    return tm;
  }
  oc::IndexerCudaParams fast = p;  // the plan as the fast-mode runner asks it (the wgmma kernel is fast-mode only)
  fast.fast = true;
  tm.plan = oc::detail::indexer_tc_tokens_per_block(st, fast, max_visible);
  tm.wg1 = time_ms([&] { oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores, nullptr, 8); });
  tm.wg3 = time_ms([&] { oc::detail::launch_indexer_scores_tc(st, v8, p, dq3, dw, max_visible, scores, nullptr, 8); });
  {  // the wgmma kernel's scores and selection against the four-token kernel's (1 split)
    float* scores4 = nullptr;
    int32_t* out4 = nullptr;
    check(cudaMalloc(&scores4, size_t(T * max_visible) * 4), "scores4");
    check(cudaMalloc(&out4, size_t(T * kTopk) * 4), "out4");
    oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores4, nullptr, 4);
    oc::detail::launch_indexer_scores_tc(st, v8, p, dq1, dw, max_visible, scores, nullptr, 8);
    oc::detail::launch_indexer_select(st, p, scores4, max_visible, out4, nullptr);
    oc::detail::launch_indexer_select(st, p, scores, max_visible, out, nullptr);
    std::vector<int32_t> o4(size_t(T * kTopk)), o8(o4.size());
    check(cudaMemcpy(o4.data(), out4, o4.size() * 4, cudaMemcpyDeviceToHost), "o4");
    check(cudaMemcpy(o8.data(), out, o8.size() * 4, cudaMemcpyDeviceToHost), "o8");
    for (int64_t t = 0; t < T; ++t)
      tm.wg_rows_diff +=
          std::equal(o4.begin() + t * kTopk, o4.begin() + (t + 1) * kTopk, o8.begin() + t * kTopk) ? 0 : 1;
    std::vector<float> a, b;
    double mx = 0, md = 0;
    for (int64_t k = 0; k < std::min<int64_t>(64, T); ++k) {
      const int64_t t = (T - 1) - k * T / 64, n = std::min((pos[size_t(t)] + 1) / kM, max_visible);
      a.resize(size_t(n));
      b.resize(size_t(n));
      check(cudaMemcpy(a.data(), scores4 + t * max_visible, size_t(n) * 4, cudaMemcpyDeviceToHost), "a");
      check(cudaMemcpy(b.data(), scores + t * max_visible, size_t(n) * 4, cudaMemcpyDeviceToHost), "b");
      for (int64_t j = 0; j < n; ++j) {
        mx = std::max(mx, double(std::fabs(a[size_t(j)])));
        md = std::max(md, double(std::fabs(a[size_t(j)] - b[size_t(j)])));
      }
    }
    tm.wg_rel = mx > 0 ? md / mx : 0;
    cudaFree(scores4);
    cudaFree(out4);
  }
  tm.tc3 = time_ms([&] { oc::detail::launch_indexer_scores_tc(st, v8, p, dq3, dw, max_visible, scores, nullptr); });
  tm.fp32 = time_ms([&] { oc::detail::launch_indexer_scores(st, v32, p, dq3, dw, max_visible, scores, nullptr); });
  tm.select = time_ms([&] { oc::detail::launch_indexer_select(st, p, scores, max_visible, out, nullptr); });
  std::vector<int32_t> ref(size_t(T * kTopk)), got(ref.size());
  for (int f = 0; f < kNumForms; ++f) {
    tm.forms[f] =
        time_ms([&] { oc::detail::launch_indexer_select(st, p, scores, max_visible, out, nullptr, &kForms[f]); });
    check(cudaMemcpy(f == 0 ? ref.data() : got.data(), out, ref.size() * 4, cudaMemcpyDeviceToHost), "out");
    if (f > 0 && got != ref) tm.identical = false;
  }
  // The boundary bin of up to 64 rows spread over the step (rows with more than K candidates).
  std::vector<int> bins, reach;
  std::vector<float> row;
  for (int64_t k = 0; k < std::min<int64_t>(64, T); ++k) {
    const int64_t t = (T - 1) - k * T / 64;
    const int64_t n = std::min((pos[size_t(t)] + 1) / kM, max_visible);
    if (n <= kTopk) continue;
    row.resize(size_t(n));
    check(cudaMemcpy(row.data(), scores + t * max_visible, size_t(n) * 4, cudaMemcpyDeviceToHost), "row");
    bins.push_back(boundary_bin_keys(row));
    reach.push_back(sample_reach(row));
  }
  if (!bins.empty()) {
    std::sort(bins.begin(), bins.end());
    tm.bin_median = bins[bins.size() / 2];
    tm.bin_max = bins.back();
    tm.bin_rows = int(bins.size());
    for (int b : bins) tm.bin_over += b > oc::detail::kIdxSelCandSlots ? 1 : 0;
    std::sort(reach.begin(), reach.end());
    tm.reach_median = reach[reach.size() / 2];
    tm.reach_max = reach.back();
    for (int c : reach) tm.reach_miss += c < kTopk || c > oc::detail::kIdxSelCandSlots ? 1 : 0;
  }
  for (void* ptr : {(void*)st.tokens, (void*)st.pos, (void*)st.seq_of_token, (void*)st.cu_seqlens,
                    (void*)st.start_pos, (void*)st.slot, (void*)st.block_tables, (void*)v8.blocks, (void*)v32.blocks,
                    (void*)dq1, (void*)dq3, (void*)dw, (void*)scores, (void*)out})
    cudaFree(ptr);
  return tm;
}

void print(const std::string& name, const Timing& t) {
  const double fl_ms = std::max(t.flops / kFp8Peak, t.key_bytes / kHbm) * 1e3;
  const double sel_floor = (t.cand * 4 + t.T * kTopk * 4) / kHbm * 1e3;
  const double tc = t.plan == 4 ? t.tc1_4 : t.tc1;  // the plan's 1-split kernel
  std::printf("%-26s %9.4f %9.4f %4d %9.4f %9.4f %8.4f %6.1fx %7.1f | %8.4f %8.4f %6.1fx | %7.1fx | %9.4f %9.4f "
              "%6.1fx %7.1f %9.2e %6lld\n", name.c_str(),
              t.tc1, t.tc1_4, t.plan, t.tc3, t.fp32, fl_ms, tc / fl_ms, t.flops / (tc * 1e9), t.select, sel_floor,
              t.select / sel_floor, (tc + t.select) / (fl_ms + sel_floor), t.wg1, t.wg3, t.wg1 / fl_ms,
              t.flops / (t.wg1 * 1e9), t.wg_rel, (long long)t.wg_rows_diff);
}

void print_forms(const std::string& name, const Timing& t) {
  const double sel_floor = (t.cand * 4 + t.T * kTopk * 4) / kHbm * 1e3;
  std::printf("%-26s", name.c_str());
  for (int f = 0; f < kNumForms; ++f) std::printf(" %9.4f", t.forms[f]);
  std::printf(" %9.4f %6.2fx %6.2fx  %-3s  %6d %6d %3d/%d  %6d %6d %3d\n", sel_floor, t.forms[0] / sel_floor,
              t.select / sel_floor, t.identical ? "yes" : "NO", t.bin_median, t.bin_max, t.bin_over, t.bin_rows,
              t.reach_median, t.reach_max, t.reach_miss);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("indexer bench: %s, %lld heads x %lld, top-%lld, ratio %lld; ms per call (mean of %d)\n", prop.name,
              (long long)kHeads, (long long)kDim, (long long)kTopk, (long long)kM, kRuns);
  std::printf("%-26s %9s %9s %4s %9s %9s %8s %7s %7s | %8s %8s %7s | %8s | %9s %9s %7s %7s %9s %6s\n", "case",
              "tc 1tok", "tc 4tok", "plan", "tc 3split", "fp32 cc", "floor", "x floor", "TFLOP/s", "top-k", "floor",
              "x floor", "op x floor", "wg 1split", "wg 3split", "x floor", "TFLOP/s", "wg-tc rel", "rows!=");
  std::mt19937 g(1234);
  if (std::getenv("DSINFER_INDEXER_BENCH_WG_ONLY")) {  // the wgmma scores of 128K chunk 8 alone (for a profiler)
    run({"prefill 128K chunk 8", 1, 8 * 8192, 8192}, g);
    return 0;
  }
  const std::vector<Case> cases = {{"prefill 4096", 1, 0, 4096},       {"decode b1 ctx 4096", 1, 4095, 1},
                                   {"decode b64 ctx 4096", 64, 4095, 1}, {"decode b256 ctx 4096", 256, 4095, 1},
                                   {"decode b1 ctx 131072", 1, 131071, 1}};
  std::vector<std::pair<std::string, Timing>> all;
  for (const Case& c : cases) {
    all.push_back({c.name, run(c, g)});
    print(c.name, all.back().second);
  }
  Timing sum;
  for (int64_t k = 0; k < 4; ++k) {
    const Timing t = run({"", 1, k * 8192, 8192}, g);
    print("prefill 32K chunk " + std::to_string(k), t);
    all.push_back({"prefill 32K chunk " + std::to_string(k), t});
    sum.tc1 += t.tc1;
    sum.tc1_4 += t.tc1_4;
    sum.plan = t.plan;
    sum.tc3 += t.tc3;
    sum.wg1 += t.wg1;
    sum.wg3 += t.wg3;
    sum.wg_rel = std::max(sum.wg_rel, t.wg_rel);
    sum.wg_rows_diff += t.wg_rows_diff;
    sum.fp32 += t.fp32;
    sum.select += t.select;
    for (int f = 0; f < kNumForms; ++f) sum.forms[f] += t.forms[f];
    sum.identical = sum.identical && t.identical;
    sum.bin_max = std::max(sum.bin_max, t.bin_max);
    sum.bin_over += t.bin_over;
    sum.bin_rows += t.bin_rows;
    sum.flops += t.flops;
    sum.key_bytes += t.key_bytes;
    sum.cand += t.cand;
    sum.T += t.T;
  }
  print("prefill 32K (4 chunks)", sum);
  all.push_back({"prefill 32K (4 chunks)", sum});
  // Long prompts: 128K's middle and last 8,192-token chunks (16K-18K and 30K-32K candidates: past the shared-memory
  // cache), and the last 512 tokens of a 512K prompt (~131K candidates a row).
  const std::vector<Case> longer = {{"prefill 128K chunk 8", 1, 8 * 8192, 8192},
                                    {"prefill 128K chunk 15", 1, 15 * 8192, 8192},
                                    {"prefill 512K last 512", 1, 524288 - 512, 512}};
  for (const Case& c : longer) {
    all.push_back({c.name, run(c, g)});
    print(c.name, all.back().second);
  }
  std::printf("\ntop-k forms, ms per call: the full scan, the candidate form with N slots, the sample form (4,096 "
              "slots) on rows over N keys; the plan's form; pass-0 boundary bin keys over sampled rows (median, max, rows over %d slots / rows); the "
              "sample form's candidates in the same rows (median, max, rows outside [K, %d])\n",
              oc::detail::kIdxSelCandSlots, oc::detail::kIdxSelCandSlots);
  std::printf("%-26s", "case");
  for (int f = 0; f < kNumForms; ++f)
    std::printf(" %9s", form_name(kForms[f]).c_str());
  std::printf(" %9s %7s %7s  %-3s  %6s %6s %s  %6s %6s %s\n", "floor", "full x", "plan x", "eq", "bin50", "binmax",
              "over", "smp50", "smpmax", "miss");
  for (const auto& [name, t] : all) print_forms(name, t);
  return 0;
}
