// Sparse attention decode over the FP8 KV storage format (ops/sparse_attention/sparse_attention_fp8_cuda.h) at
// DeepSeek-V4-Flash shapes, on exactly the inputs bench/peers/fp8_attention_peer.py then gives FlashMLA's sparse FP8
// decode in the same device call. The layout of run_peers.py's FlashMLA bench: a pool of 512 sequences, each with a
// 128-row window in a window cache and 1,024 (CSA, ratio 4 at 4K context) or 32 (HCA, ratio 128) compressed entries
// in an entry cache (584-byte MODEL1 rows, blocks of 64); one token per sequence with the whole window and the top
// 512 (CSA, a random sorted subset) or all 32 (HCA) entries; batch B = 1 / 64 / 256 over min(256, 512 / B) disjoint
// groups of sequences (every key from HBM: >350 MB of state against the 50 MB L2). Rows: random fp32 rows encoded by
// kv_encode; q: bf16 values (ours reads them as fp32, the runner's q, or as bf16), sinks random.
// Timing after 2 s of copies (the clocks ramp up from 345 MHz), as run_peers.py's time_us: every group's call 4
// times in one CUDA graph, replayed 6 times, the median of the last 5 / (4 x groups). Bytes a call must move: per
// token its key rows (584 B), q (fp32 128 KB or bf16 64 KB) and o (fp32 128 KB) and its index lists; GB/s and %hbm
// against a 1 GB device-to-device copy measured here. The split count of plan_sparse_attention_fp8, then a sweep of
// forced counts (the heuristic's check). Every shape also times detail::kProbeWgmma, the same loop with wgmma
// products (session 16: the kernel's bits), beside the kernel.
// Session 17: each shape times both kernels (Fp8AttentionKernel: the plan's, then the lock-step one forced), and a
// prefill shape (bench_prefill: 4,096 tokens, the model bench's 4 layers) runs first.
// Session 18: prefill and every decode shape also time each variant of the warp-specialised kernel
// (detail::launch_sparse_attention_fp8_ws_variant; session 19: 0 one block, 1 the two-block cluster pair).
// --dump DIR writes the caches, the lists, q (bf16), the sinks and our set-0 output for the peer script; --quick
// leaves out the split sweep and the phase probes (a device call that only needs the plan's timings).
// --ab: the prefill shape's A/B of main's prefill op against the split-block op (session 24; bench_prefill).
// --once (with --prefill-only): the split op and its q-norm form once each, eagerly, then exit (for ncu).
// Session 24, --r64 (decode only; bench_r64): main's choice (A: plan_sparse_attention_fp8's count, the kAuto kernel)
// against the opt-in kRoles64 kernel (B: plan_sparse_attention_fp8_r64's count), A B A B on the same inputs (CSA and
// HCA, batch 1 / 64 / 256, q fp32: the runner's), then B with q bf16 and without its L2 prefetch
// (detail::kR64NoPrefetch), and a sweep of B's split counts (--r64 --r64-persistent instead: A, B and B persistent,
// detail::kR64Persistent); the outputs of
// A and B on group 0 compared (||B - A|| / ||A||: the GPU test's kTolMain bound is 2e-3).
// Built only with DSINFER_CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/small_float.h"
#include "cuda/cuda_common.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "ops/kv_format/kv_format.h"
#include "ops/kv_format/kv_format_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"
#include "ops/sparse_attention/sparse_attention_prefill_cuda.h"
#include "ops/sparse_attention/sparse_attention_prefill_launch.h"

using namespace dsinfer;

namespace {

constexpr int64_t kH = 64, kD = 512, kW = 128, kPool = 512, kTopk = 512, kCsaEntries = 1024, kHcaEntries = 32;

#define BENCH_CHECK(x)                                             \
  do {                                                             \
    Status s_ = (x);                                               \
    if (!s_.is_ok()) {                                             \
      std::fprintf(stderr, "%s: %s\n", #x, s_.message().c_str()); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

template <typename T>
void write_file(const std::string& path, const T* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, sizeof(T), n, f) != n) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer<T>& b, size_t n) {
  std::vector<T> h(n);
  BENCH_CHECK(b.download(h.data(), n));
  return h;
}

// A cache of `rows` rows filled from random fp32 rows (a 65,536-row chunk, encoded again at each offset).
void fill_cache(cuda::DeviceBuffer<uint8_t>& cache, int64_t rows, const cuda::DeviceBuffer<float>& chunk,
                int64_t chunk_rows) {
  BENCH_CHECK(cache.alloc(size_t(ops::kv_cache_bytes(rows))));
  std::vector<int32_t> dst(static_cast<size_t>(chunk_rows));
  cuda::DeviceBuffer<int32_t> ddst;
  for (int64_t base = 0; base < rows; base += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - base);
    for (int64_t i = 0; i < n; ++i) dst[size_t(i)] = int32_t(base + i);
    BENCH_CHECK(ddst.upload(dst.data(), size_t(n)));
    BENCH_CHECK(ops::cuda::kv_encode(chunk.data(), n, kD, ddst.data(), cache.data(), rows, nullptr));
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::fprintf(stderr, "fill_cache failed\n");
      std::exit(1);
    }
  }
}

double measure_hbm() {  // bytes read + written per second of a 1 GB device-to-device copy, median of 10
  const size_t n = size_t(1) << 28;
  cuda::DeviceBuffer<float> a, b;
  BENCH_CHECK(a.alloc(n));
  BENCH_CHECK(b.alloc(n));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int it = 0; it < 13; ++it) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b.data(), a.data(), n * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (it >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  // Two more seconds of copies: the clocks idle at 345 MHz and ramp up under load (as run_peers.py's warm-up).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 20; ++i) cudaMemcpyAsync(b.data(), a.data(), n * 4, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
  }
  return 2.0 * double(n) * 4 / (double(ms[ms.size() / 2]) * 1e-3);
}

struct Kind {
  const char* name;
  int64_t entries, topk;
};

// One kind at one batch: G groups of B tokens (token b of group g is sequence g * B + b), lists and q of all.
struct Batch {
  int64_t B = 0, G = 0, ext_k = 0;
  std::vector<int32_t> idx0, idx1, len0, len1;
  std::vector<uint16_t> qb;
  cuda::DeviceBuffer<int32_t> didx0, didx1, dlen0, dlen1;
  cuda::DeviceBuffer<float> dqf;
  cuda::DeviceBuffer<uint16_t> dqb;
};

void make_batch(Batch& b, const Kind& k, int64_t B, uint32_t seed) {
  b.B = B;
  b.G = std::min<int64_t>(256, kPool / B);
  b.ext_k = std::max<int64_t>(64, (k.topk + 63) / 64 * 64);  // FlashMLA's top-k block; the tail is -1
  const int64_t T = b.B * b.G;
  std::mt19937 g(seed);
  b.idx0.resize(size_t(T * kW));
  b.idx1.assign(size_t(T * b.ext_k), -1);
  b.len0.assign(size_t(T), int32_t(kW));
  b.len1.assign(size_t(T), int32_t(k.topk));
  std::vector<int32_t> pick(static_cast<size_t>(k.entries));
  for (int64_t t = 0; t < T; ++t) {  // token t is sequence t (groups are disjoint)
    for (int64_t j = 0; j < kW; ++j) b.idx0[size_t(t * kW + j)] = int32_t(t * kW + j);
    for (int64_t e = 0; e < k.entries; ++e) pick[size_t(e)] = int32_t(e);
    std::shuffle(pick.begin(), pick.end(), g);
    std::sort(pick.begin(), pick.begin() + k.topk);
    for (int64_t j = 0; j < k.topk; ++j) b.idx1[size_t(t * b.ext_k + j)] = int32_t(t * k.entries + pick[size_t(j)]);
  }
  std::normal_distribution<float> n(0.0f, 2.0f);
  b.qb.resize(size_t(T * kH * kD));
  std::vector<float> qf(b.qb.size());
  for (size_t i = 0; i < qf.size(); ++i) {
    b.qb[i] = small_float::f32_to_bf16_bits(n(g));
    qf[i] = small_float::from_bits(uint32_t(b.qb[i]) << 16);
  }
  BENCH_CHECK(b.didx0.upload(b.idx0.data(), b.idx0.size()));
  BENCH_CHECK(b.didx1.upload(b.idx1.data(), b.idx1.size()));
  BENCH_CHECK(b.dlen0.upload(b.len0.data(), b.len0.size()));
  BENCH_CHECK(b.dlen1.upload(b.len1.data(), b.len1.size()));
  BENCH_CHECK(b.dqf.upload(qf.data(), qf.size()));
  BENCH_CHECK(b.dqb.upload(b.qb.data(), b.qb.size()));
}

struct Run {
  const cuda::DeviceBuffer<uint8_t>* win;
  const cuda::DeviceBuffer<uint8_t>* ent;
  int64_t ent_rows;
  const float* sinks;
  float* out;
  float* ws;
};

// The call of group g with `splits` splits on stream s (probe != 0: the diagnostic kernel with phases left out;
// variant >= 0: that variant of the warp-specialised kernel).
void call(const Batch& b, const Run& r, int64_t g, int64_t splits, bool q_bf16, cudaStream_t s, int probe = 0,
          ops::cuda::Fp8AttentionKernel kernel = ops::cuda::Fp8AttentionKernel::kAuto, int variant = -1) {
  ops::cuda::SparseAttentionFp8Params p;
  p.kernel = kernel;
  p.T = b.B;
  p.heads = kH;
  p.scale = float(1.0 / std::sqrt(double(kD)));
  p.sinks = r.sinks;
  const int64_t t0 = g * b.B;
  p.keys[0] = {r.win->data(), kPool * kW, b.didx0.data() + t0 * kW, kW, b.dlen0.data() + t0, ops::kModel1Pages};
  p.keys[1] = {r.ent->data(), r.ent_rows, b.didx1.data() + t0 * b.ext_k, b.ext_k, b.dlen1.data() + t0,
               ops::kModel1Pages};
  p.q_bf16 = q_bf16;
  p.num_splits = splits;
  const void* q = q_bf16 ? static_cast<const void*>(b.dqb.data() + t0 * kH * kD)
                         : static_cast<const void*>(b.dqf.data() + t0 * kH * kD);
  if (variant >= 0 && kernel == ops::cuda::Fp8AttentionKernel::kRoles64) {  // a kRoles64 variant, then the combine
    if (!ops::cuda::detail::launch_sparse_attention_fp8_r64_variant(p, q, r.out, r.ws, variant, s)) {
      std::fprintf(stderr, "r64 variant %d failed\n", variant);
      std::exit(1);
    }
    if (splits > 1) ops::cuda::detail::launch_sparse_attention_fp8_combine(p, r.ws, r.out, s);
  } else if (variant >= 0) {
    if (!ops::cuda::detail::launch_sparse_attention_fp8_ws_variant(p, q, r.out, r.ws, variant, s)) {
      std::fprintf(stderr, "variant %d failed\n", variant);
      std::exit(1);
    }
  } else if (probe == 0) {
    BENCH_CHECK(ops::cuda::sparse_attention_fp8(p, q, r.out, r.ws, s));
  } else if (!ops::cuda::detail::launch_sparse_attention_fp8_probe(p, q, r.out, r.ws, probe, s) ||
             cudaGetLastError() != cudaSuccess) {
    std::fprintf(stderr, "probe %d failed\n", probe);
    std::exit(1);
  }
}

// Per-call microseconds: all groups' calls 4 times in one graph, median of 5 replays.
// Microseconds of one `calls(stream)` (which issues `per` calls): captured 4 times in one graph, median of 5 replays.
template <typename Calls>
double graph_us(const Calls& calls, int64_t per) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  calls(s);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  for (int rep = 0; rep < 4; ++rep) calls(s);
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    std::fprintf(stderr, "graph capture failed\n");
    std::exit(1);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int it = 0; it < 6; ++it) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (it > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return double(ms[ms.size() / 2]) * 1e3 / double(4 * per);
}

double time_us(const Batch& b, const Run& r, int64_t splits, bool q_bf16, int probe = 0,
               ops::cuda::Fp8AttentionKernel kernel = ops::cuda::Fp8AttentionKernel::kAuto, int variant = -1) {
  return graph_us(
      [&](cudaStream_t s) {
        for (int64_t g = 0; g < b.G; ++g) call(b, r, g, splits, q_bf16, s, probe, kernel, variant);
      },
      b.G);
}

// The peer script's inputs for one kind and batch, and our output of group 0 (q fp32, no RoPE).
void dump(const std::string& dir, const std::string& tag, const Batch& b, const Run& r,
          const cuda::DeviceBuffer<float>& out, int64_t splits) {
  const std::string pre = dir + "/" + tag + "_";
  write_file(pre + "q.bin", b.qb.data(), b.qb.size());
  write_file(pre + "idx0.bin", b.idx0.data(), b.idx0.size());
  write_file(pre + "idx1.bin", b.idx1.data(), b.idx1.size());
  call(b, r, 0, splits, false, nullptr);
  const std::vector<float> o = download(out, size_t(b.B * kH * kD));
  write_file(pre + "out0.bin", o.data(), o.size());
}
// Prefill of 4,096 tokens from position 0 in 2,048-token chunks over the model bench's 4 layers (sliding, sliding,
// CSA ratio 4 with top-512, HCA ratio 128), as `dsinfer bench --prefill 4096` runs them: a token at p attends its
// min(p + 1, 128) window rows, then min(512, (p + 1) / 4) CSA entries (a random sorted subset of the visible ones;
// the indexer's picks) or its (p + 1) / 128 HCA entries. 131,072 FLOPs a key (64 heads x 512, Q K^T and P V).
// Prints both kernels' ms for the 8 calls (q fp32, the runner's) and their TFLOP/s.
// Session 19: also the prefill op (sparse_attention_prefill_cuda.h: the lists' rows staged once as bf16, then the
// bf16 wgmma kernel; its staging inside the timing), and every line's % of the BF16 tensor peak (781 TFLOP/s, the
// measured dense bf16 figure of bench/NOTES.md, session 15). --prefill-only stops after this shape.
// Session 21: with the runner's inverse RoPE of the output (rope_dim 64, the tokens' positions, inv_freq
// 10000^(-2i/64)): its cost is in the epilogue of every kernel, as in the model bench.
// Session 24: --ab (with --prefill-only) times main's prefill op (fp32 q, fp32 o: the runner's today; A) against the
// split-block op (sparse_attention_prefill_split: bf16 q, bf16 o; B) on the same inputs, A B A B, then each per layer,
// main's op with bf16 q (the q width alone), and the two outputs' normalised difference on the last call's chunk
// (bf16 q to both); nothing else of this shape. Session 28: the split kernel's variants beside B, and with --dump DIR
// (and --prefill-only) the inputs for bench/peers/sparse_prefill_peer.py (FlashMLA's sparse prefill on the same lists).
void bench_prefill(const cuda::DeviceBuffer<float>& chunk, int64_t chunk_rows, const float* sinks,
                   const std::vector<float>& sinks_host, int64_t sms, bool ab, bool once, const std::string& dir) {
  constexpr int64_t kT = 4096, kChunk = 2048, kCsaRatio = 4, kHcaRatio = 128;
  cuda::DeviceBuffer<uint8_t> win, ent;
  fill_cache(win, kT, chunk, chunk_rows);
  fill_cache(ent, kT / kCsaRatio, chunk, chunk_rows);
  struct Layer {
    std::vector<int32_t> idx0, len0, idx1, len1;
    int64_t stride1 = 0, tiles = 0;  // tiles: 32-key tiles over both chunks (one split)
    cuda::DeviceBuffer<int32_t> d0, dl0, d1, dl1;
  };
  std::mt19937 g(17);
  std::vector<Layer> layers(4);
  double keys = 0;
  for (int64_t li = 0; li < 4; ++li) {
    Layer& L = layers[size_t(li)];
    const int64_t ratio = li == 2 ? kCsaRatio : (li == 3 ? kHcaRatio : 0);
    L.stride1 = ratio == kCsaRatio ? kTopk : (ratio == kHcaRatio ? kT / kHcaRatio : 0);
    L.idx0.assign(size_t(kT * kW), -1);
    L.len0.assign(size_t(kT), 0);
    if (L.stride1 > 0) {
      L.idx1.assign(size_t(kT * L.stride1), -1);
      L.len1.assign(size_t(kT), 0);
    }
    std::vector<int32_t> pick;
    for (int64_t p = 0; p < kT; ++p) {
      const int64_t nw = std::min<int64_t>(p + 1, kW);
      L.len0[size_t(p)] = int32_t(nw);
      for (int64_t j = 0; j < nw; ++j) L.idx0[size_t(p * kW + j)] = int32_t(p - nw + 1 + j);
      keys += double(nw);
      if (ratio == 0) {
        L.tiles += (nw + 31) / 32;
        continue;
      }
      const int64_t vis = (p + 1) / ratio;
      const int64_t n = std::min<int64_t>(vis, L.stride1);
      pick.resize(size_t(vis));
      for (int64_t e = 0; e < vis; ++e) pick[size_t(e)] = int32_t(e);
      if (n < vis) std::shuffle(pick.begin(), pick.end(), g);
      std::sort(pick.begin(), pick.begin() + n);
      for (int64_t j = 0; j < n; ++j) L.idx1[size_t(p * L.stride1 + j)] = pick[size_t(j)];
      L.len1[size_t(p)] = int32_t(n);
      keys += double(n);
      L.tiles += (nw + n + 31) / 32;
    }
    BENCH_CHECK(L.d0.upload(L.idx0.data(), L.idx0.size()));
    BENCH_CHECK(L.dl0.upload(L.len0.data(), L.len0.size()));
    if (L.stride1 > 0) {
      BENCH_CHECK(L.d1.upload(L.idx1.data(), L.idx1.size()));
      BENCH_CHECK(L.dl1.upload(L.len1.data(), L.len1.size()));
    }
  }
  std::vector<float> qh(size_t(kChunk * kH * kD));
  std::normal_distribution<float> n(0.0f, 2.0f);
  for (auto& v : qh) v = small_float::from_bits(uint32_t(small_float::f32_to_bf16_bits(n(g))) << 16);
  cuda::DeviceBuffer<float> q, o, ws, inv_freq;
  BENCH_CHECK(q.upload(qh.data(), qh.size()));
  // The same q as bf16 (qh holds bf16 values: exact) and a bf16 output for the split-block op.
  std::vector<uint16_t> qbh(qh.size());
  for (size_t i = 0; i < qh.size(); ++i) qbh[i] = uint16_t(small_float::f32_to_bf16_bits(qh[i]));
  cuda::DeviceBuffer<uint16_t> qb, ob;
  BENCH_CHECK(qb.upload(qbh.data(), qbh.size()));
  BENCH_CHECK(ob.alloc(qh.size()));
  constexpr int64_t kRopeDim = 64;
  std::vector<int32_t> posh(static_cast<size_t>(kT));
  for (int64_t p = 0; p < kT; ++p) posh[size_t(p)] = int32_t(p);
  std::vector<float> invh;
  for (int64_t i = 0; i < kRopeDim / 2; ++i)
    invh.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(kRopeDim))));
  cuda::DeviceBuffer<int32_t> pos;
  BENCH_CHECK(pos.upload(posh.data(), posh.size()));
  // Session 29: the query's norm + RoPE op (head_norm_rope, bf16 in place: int64 positions) on a scratch copy of qb.
  const std::vector<int64_t> pos64h(posh.begin(), posh.end());
  cuda::DeviceBuffer<int64_t> pos64;
  cuda::DeviceBuffer<uint16_t> qn;
  BENCH_CHECK(pos64.upload(pos64h.data(), pos64h.size()));
  BENCH_CHECK(qn.upload(qbh.data(), qbh.size()));
  BENCH_CHECK(inv_freq.upload(invh.data(), invh.size()));
  BENCH_CHECK(o.alloc(qh.size()));
  int64_t max_splits = 1;
  for (const Layer& L : layers)
    max_splits = std::max(max_splits, ops::cuda::plan_sparse_attention_fp8(kChunk, kH, kW + L.stride1, sms));
  BENCH_CHECK(ws.alloc(size_t(ops::cuda::sparse_attention_fp8_workspace_floats(kChunk, kH, max_splits)) + 64));
  int64_t staging_bytes = 0;
  for (const Layer& L : layers) {
    const int64_t rows[3] = {kT, L.stride1 > 0 ? kT / kCsaRatio : 0, 0};  // as run() passes them
    const int64_t strides[3] = {kW, L.stride1, 0};
    staging_bytes = std::max(staging_bytes, ops::cuda::sparse_attention_prefill_staging_bytes(kChunk, rows, strides));
  }
  cuda::DeviceBuffer<uint8_t> staging;
  BENCH_CHECK(staging.alloc(size_t(staging_bytes)));
  // variant -1: the op with `kernel`; -2: the prefill op; -3: its probe `probe`; -4: the split-block op (bf16 q and
  // o, one split); -5: the prefill op with bf16 q; -6: the split op's probe `probe`; -7: the query's norm + RoPE op
  // the split op's q_norm replaces (on qn: its values drift, not its time); -8: the split op on raw q with q_norm;
  // >= 0: that variant of the warp-specialised kernel. only >= 0: that layer alone.
  int only = -1, probe = 0;
  auto run = [&](cudaStream_t s, ops::cuda::Fp8AttentionKernel kernel, int variant) {
    for (int li = 0; li < 4; ++li)
      for (int64_t c0 = 0; c0 < kT && (only < 0 || only == li); c0 += kChunk) {
        const Layer& L = layers[size_t(li)];
        ops::cuda::SparseAttentionFp8Params p;
        p.T = kChunk;
        p.heads = kH;
        p.scale = float(1.0 / std::sqrt(double(kD)));
        p.sinks = sinks;
        p.keys[0] = {win.data(), kT, L.d0.data() + c0 * kW, kW, L.dl0.data() + c0, ops::kModel1Pages};
        if (L.stride1 > 0)
          p.keys[1] = {ent.data(), kT / kCsaRatio, L.d1.data() + c0 * L.stride1, L.stride1, L.dl1.data() + c0,
                       ops::kModel1Pages};
        p.rope_dim = kRopeDim;
        p.pos = pos.data() + c0;
        p.inv_freq = inv_freq.data();
        p.num_splits = ops::cuda::plan_sparse_attention_fp8(kChunk, kH, kW + L.stride1, sms);
        p.kernel = kernel;
        if (variant == -7) {
          ops::cuda::HeadNormRopeParams hp{kChunk, kH, kD, ops::cuda::HeadNorm::Unweighted, nullptr, 1e-6f, kRopeDim,
                                           inv_freq.data(), 1.0f, false};
          hp.in_bf16 = true;
          hp.out_bf16 = qn.data();
          BENCH_CHECK(ops::cuda::head_norm_rope(hp, nullptr, pos64.data() + c0, s));
        } else if (variant == -4 || variant == -6 || variant == -8) {
          p.q_bf16 = true;
          p.num_splits = 1;
          p.q_norm = variant == -8;
          if (variant != -6)
            BENCH_CHECK(ops::cuda::sparse_attention_prefill_split(p, qb.data(), ob.data(), staging.data(),
                                                                  staging_bytes, s));
          else
            BENCH_CHECK(ops::cuda::sparse_attention_prefill_split_probe(p, qb.data(), ob.data(), staging.data(),
                                                                        staging_bytes, probe, s));
        } else if (variant == -5) {
          p.q_bf16 = true;
          BENCH_CHECK(ops::cuda::sparse_attention_prefill(p, qb.data(), o.data(), ws.data(), staging.data(),
                                                          staging_bytes, s));
        } else if (variant == -2) {
          BENCH_CHECK(ops::cuda::sparse_attention_prefill(p, q.data(), o.data(), ws.data(), staging.data(),
                                                          staging_bytes, s));
        } else if (variant == -3) {
          BENCH_CHECK(ops::cuda::sparse_attention_prefill_probe(p, q.data(), o.data(), ws.data(), staging.data(),
                                                                staging_bytes, probe, s));
        } else if (variant < 0) {
          BENCH_CHECK(ops::cuda::sparse_attention_fp8(p, q.data(), o.data(), ws.data(), s));
        } else if (!ops::cuda::detail::launch_sparse_attention_fp8_ws_variant(p, q.data(), o.data(), ws.data(),
                                                                               variant, s)) {
          std::fprintf(stderr, "variant %d failed\n", variant);
          std::exit(1);
        }
      }
  };
  if (once) {  // --once (session 40): each split form once, eagerly, for a profiler's launch filter; nothing timed
    run(nullptr, ops::cuda::Fp8AttentionKernel::kAuto, -4);
    run(nullptr, ops::cuda::Fp8AttentionKernel::kAuto, -8);
    if (cudaDeviceSynchronize() != cudaSuccess) std::exit(1);
    return;
  }
  const double flops = keys * 131072.0;
  std::printf("prefill 4096 (2 chunks of 2048, 4 layers): %.1f keys a token, %.1f GFLOP\n", keys / kT, flops / 1e9);
  constexpr double kBf16Peak = 781e12;
  std::printf("  %-28s %10s %9s %10s\n", "kernel", "ms", "TFLOP/s", "% BF16 peak");
  if (ab) {
    auto line = [&](const char* name, const char* tag, int variant) {
      const double us = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, variant); }, 1);
      std::printf("  %-28s %10.3f %9.0f %10.1f\n", name, us / 1e3, flops / us / 1e6,
                  100.0 * flops / (us * 1e-6) / kBf16Peak);
      std::printf("RESULT prefill %s %.2f\n", tag, us);
      std::fflush(stdout);
      return us;
    };
    for (int round = 0; round < 2; ++round) {
      line("A: prefill op (fp32 q, o)", "A", -2);
      line("B: split op (bf16 q, o)", "B", -4);
    }
    line("prefill op, bf16 q", "A_bf16q", -5);
    // The split kernel's variants (session 28; the same bits, GpuSparseAttentionPrefillSplit), each beside the op
    // (B: its planned variant, store16 with the key reuse unless DSINFER_SPARSE_PREFILL_SPLIT_VARIANT says otherwise;
    // the variants here without the reuse: "store16" is session 29-39's B), twice.
    {
      namespace d = ops::cuda::detail;
      for (int round = 0; round < 2; ++round) {
        line("B: split op", "B", -4);
        for (const auto& [name, v] : {std::pair<const char*, int>{"B l2 (L2 policies)", d::kSplitVarL2Hints},
                                      {"B store16 (no reuse)", d::kSplitVarStore16},
                                      {"B early (next item's lengths)", d::kSplitVarEarlyItem},
                                      {"B all three", d::kSplitVarAll}}) {
          probe = v;
          char tag[32];
          std::snprintf(tag, sizeof tag, "Bvar%d", v);
          line(name, tag, -6);
        }
        probe = 0;
      }
    }
    // Session 29: the query's norm + RoPE inside the split kernel (q_norm, raw q) against the op it replaces, twice.
    for (int round = 0; round < 2; ++round) {
      line("q norm + RoPE op (bf16 q)", "QNormOp", -7);
      line("B: split op", "B", -4);
      line("B + q norm (raw q)", "BQNorm", -8);
    }
    for (only = 0; only < 4; ++only) {
      const double a = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -2); }, 1);
      const double b = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -4); }, 1);
      probe = ops::cuda::detail::kSplitVarAll;  // session 28: where the variants' time goes, layer by layer
      const double c = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -6); }, 1);
      // session 29: the query norm in the kernel, and the bare probe (barriers, lookups, bookkeeping: per item and per
      // step overheads, told apart by the layers' steps an item)
      const double qn = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -8); }, 1);
      probe = ops::cuda::detail::kSplitProbeBare;
      const double bare = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -6); }, 1);
      probe = ops::cuda::detail::kSplitVarStore16;  // session 40: the op's variant without the key reuse
      const double plain = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -6); }, 1);
      probe = 0;
      std::printf("  layer %d: A %.1f us, B %.1f us (no reuse %.1f), B all variants %.1f us, B + q norm %.1f us, bare "
                  "%.1f us\n", only, a, b, plain, c, qn, bare);
      std::printf("RESULT prefill layer%d A %.2f B %.2f Bplain %.2f Ball %.2f BQNorm %.2f Bbare %.2f\n", only, a, b,
                  plain, c, qn, bare);
    }
    // The split kernel with phases left out (the output wrong by design): where B's time goes. Every layer again
    // (the loop above left `only` past the last one, which timed an empty graph: session 26's 0.32 us probes).
    only = -1;
    namespace d = ops::cuda::detail;
    for (const auto& [name, pr] : {std::pair<const char*, int>{"no math", d::kSplitProbeNoMath},
                                   {"no softmax", d::kSplitProbeNoSoftmax},
                                   {"no gathers", d::kSplitProbeNoGather},
                                   {"no epilogue stores", d::kSplitProbeNoStore},
                                   {"no q load", d::kSplitProbeNoQ},
                                   {"skeleton", d::kSplitProbeSkeleton},
                                   {"bare (all five left out)", d::kSplitProbeBare}}) {
      probe = pr;
      const double us = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -6); }, 1);
      std::printf("  split op probe %-22s %10.3f ms\n", name, us / 1e3);
      std::printf("RESULT prefill Bprobe%d %.2f\n", pr, us);
      std::fflush(stdout);
    }
    probe = 0;
    // Parity on the same inputs: one call of each on layer 2 (CSA) with bf16 q; the second chunk's outputs compared.
    only = 2;
    cudaStream_t s0;
    cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
    run(s0, ops::cuda::Fp8AttentionKernel::kAuto, -5);
    run(s0, ops::cuda::Fp8AttentionKernel::kAuto, -4);
    cudaStreamSynchronize(s0);
    cudaStreamDestroy(s0);
    only = -1;
    std::vector<float> a(qh.size());
    std::vector<uint16_t> b(qh.size());
    cudaMemcpy(a.data(), o.data(), a.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), ob.data(), b.size() * 2, cudaMemcpyDeviceToHost);
    double num = 0, den = 0;
    int64_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double bv = small_float::from_bits(small_float::bf16_f32_bits(b[i]));
      if (!std::isfinite(bv)) ++bad;
      num += (bv - a[i]) * (bv - a[i]);
      den += double(a[i]) * a[i];
    }
    std::printf("  parity (layer 2, second chunk, bf16 q): ||B - A|| / ||A|| = %.3e, %lld non-finite\n",
                std::sqrt(num / (den > 0 ? den : 1)), (long long)bad);
    std::printf("RESULT prefill parity %.3e nonfinite %lld\n", std::sqrt(num / (den > 0 ? den : 1)), (long long)bad);
    if (!dir.empty()) {
      // The peer script's inputs (bench/peers/sparse_prefill_peer.py: FlashMLA's sparse prefill on these lists) and
      // the split op's output of layer 2's second chunk (bf16; the call above).
      write_file(dir + "/prefill_q.bin", qbh.data(), qbh.size());
      write_file(dir + "/prefill_out_l2c1.bin", b.data(), b.size());
      write_file(dir + "/prefill_sinks.bin", sinks_host.data(), sinks_host.size());
      write_file(dir + "/prefill_win.bin", download(win, size_t(ops::kv_cache_bytes(kT))).data(),
                 size_t(ops::kv_cache_bytes(kT)));
      write_file(dir + "/prefill_ent.bin", download(ent, size_t(ops::kv_cache_bytes(kT / kCsaRatio))).data(),
                 size_t(ops::kv_cache_bytes(kT / kCsaRatio)));
      for (int64_t li = 0; li < 4; ++li) {
        const Layer& L = layers[size_t(li)];
        const std::string pre = dir + "/prefill_l" + std::to_string(li) + "_";
        write_file(pre + "idx0.bin", L.idx0.data(), L.idx0.size());
        write_file(pre + "len0.bin", L.len0.data(), L.len0.size());
        write_file(pre + "idx1.bin", L.idx1.data(), L.idx1.size());
        write_file(pre + "len1.bin", L.len1.data(), L.len1.size());
      }
    }
    return;
  }
  {
    const double us = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -2); }, 1);
    std::printf("  %-28s %10.3f %9.0f %10.1f\n", "prefill (bf16 staging)", us / 1e3, flops / us / 1e6,
                100.0 * flops / (us * 1e-6) / kBf16Peak);
    std::printf("RESULT prefill staged %.2f\n", us);
    std::fflush(stdout);
  }
  for (const auto& [name, kernel] : {std::pair<const char*, ops::cuda::Fp8AttentionKernel>{
                                         "lock-step", ops::cuda::Fp8AttentionKernel::kLockstep},
                                     {"warp-specialised", ops::cuda::Fp8AttentionKernel::kWarpSpecialised}}) {
    const double us = graph_us([&](cudaStream_t s) { run(s, kernel, -1); }, 1);
    std::printf("  %-28s %10.3f %9.0f %10.1f\n", name, us / 1e3, flops / us / 1e6,
                100.0 * flops / (us * 1e-6) / kBf16Peak);
    std::printf("RESULT prefill %s %.2f\n", name, us);
    std::fflush(stdout);
  }
  for (int v = 0; v < ops::cuda::detail::kWsVariants; ++v) {
    const double us = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, v); }, 1);
    std::printf("  warp-specialised variant %d    %10.3f %9.0f %10.1f\n", v, us / 1e3, flops / us / 1e6,
                100.0 * flops / (us * 1e-6) / kBf16Peak);
    std::printf("RESULT prefill variant%d %.2f\n", v, us);
    std::fflush(stdout);
  }
  // Per layer (blocks = 4,096 tokens, one a token; tiles over both chunks): fixed cost a block and cost a tile.
  for (only = 0; only < 4; ++only) {
    const double a = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -2); }, 1);
    const double b =
        graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kWarpSpecialised, -1); }, 1);
    std::printf("  layer %d: 4096 blocks, %lld tiles: prefill op %.1f us, warp-specialised %.1f us\n", only,
                (long long)layers[size_t(only)].tiles, a, b);
    std::printf("RESULT prefill layer%d staged %.2f ws %.2f tiles %lld\n", only, a, b,
                (long long)layers[size_t(only)].tiles);
  }
  only = -1;
  // The prefill op's kernel with phases left out (the output wrong by design): where its time goes.
  namespace d = ops::cuda::detail;
  for (const auto& [name, pr] : {std::pair<const char*, int>{"no QK", d::kPrefillProbeNoQk},
                                 {"no PV", d::kPrefillProbeNoPv},
                                 {"no softmax+exchange", d::kPrefillProbeNoSoftmax},
                                 {"no q load", d::kPrefillProbeNoQ},
                                 {"no epilogue", d::kPrefillProbeNoStore},
                                 {"no gathers", d::kPrefillProbeNoGather},
                                 {"no math", d::kPrefillProbeNoMath},
                                 {"skeleton", d::kPrefillProbeSkeleton}}) {
    probe = pr;
    const double us = graph_us([&](cudaStream_t s) { run(s, ops::cuda::Fp8AttentionKernel::kAuto, -3); }, 1);
    std::printf("  prefill op probe %-22s %10.3f ms\n", name, us / 1e3);
    std::printf("RESULT prefill probe%d %.2f\n", pr, us);
    std::fflush(stdout);
  }
}
}  // namespace

// --r64: A (main's plan) B (kRoles64) A B per kind and batch; one line each and RESULT_R64 lines (kind, batch, A us
// twice, B us twice, B us with q bf16, B us without its L2 prefetch, A's splits, B's splits, ||B - A|| / ||A||).
// persistent (--r64-persistent): A, B and B persistent (detail::kR64Persistent) only.
void bench_r64(const cuda::DeviceBuffer<uint8_t>& win, const cuda::DeviceBuffer<float>& chunk, int64_t chunk_rows,
               const float* sinks, float* ws, int64_t sms, double hbm, bool persistent) {
  using K = ops::cuda::Fp8AttentionKernel;
  cuda::DeviceBuffer<float> out_a, out_b;
  BENCH_CHECK(out_a.alloc(size_t(256 * kH * kD)));
  BENCH_CHECK(out_b.alloc(size_t(256 * kH * kD)));
  for (const Kind& k : {Kind{"CSA", kCsaEntries, kTopk}, Kind{"HCA", kHcaEntries, kHcaEntries}}) {
    cuda::DeviceBuffer<uint8_t> ent;
    fill_cache(ent, kPool * k.entries, chunk, chunk_rows);
    for (int64_t B : {1, 64, 256}) {
      Batch b;
      make_batch(b, k, B, uint32_t(B) * 7 + 1);
      const int64_t nkeys = kW + k.topk;
      const int64_t sa = ops::cuda::plan_sparse_attention_fp8(B, kH, nkeys, sms);
      const int64_t sb = ops::cuda::plan_sparse_attention_fp8_r64(B, kH, nkeys, sms);
      const Run ra{&win, &ent, kPool * k.entries, sinks, out_a.data(), ws};
      const Run rb{&win, &ent, kPool * k.entries, sinks, out_b.data(), ws};
      if (persistent) {  // --r64-persistent: A, B, B persistent only (its own invocation: a hang hides nothing else)
        std::printf("r64 persistent %s B=%lld: A %.1f us, B %.1f us, B persistent %.1f us\n", k.name, (long long)B,
                    time_us(b, ra, sa, false), time_us(b, rb, sb, false, 0, K::kRoles64),
                    time_us(b, rb, sb, false, 0, K::kRoles64, ops::cuda::detail::kR64Persistent));
        std::fflush(stdout);
        continue;
      }
      double t[4];
      for (int i = 0; i < 4; ++i)
        t[i] = i % 2 == 0 ? time_us(b, ra, sa, false) : time_us(b, rb, sb, false, 0, K::kRoles64);
      const double tb_bf16 = time_us(b, rb, sb, true, 0, K::kRoles64);
      const double tb_nopf = time_us(b, rb, sb, false, 0, K::kRoles64, ops::cuda::detail::kR64NoPrefetch);
      // Group 0's outputs of both (q fp32), compared.
      call(b, ra, 0, sa, false, nullptr);
      call(b, rb, 0, sb, false, nullptr, 0, K::kRoles64);
      if (cudaDeviceSynchronize() != cudaSuccess) {
        std::fprintf(stderr, "r64 %s B=%lld: %s\n", k.name, (long long)B, cudaGetErrorString(cudaGetLastError()));
        std::exit(1);
      }
      const size_t n = size_t(B * kH * kD);
      const std::vector<float> oa = download(out_a, n);
      const std::vector<float> ob = download(out_b, n);
      double num = 0, den = 0;
      for (size_t i = 0; i < n; ++i) {
        num += (double(ob[i]) - oa[i]) * (double(ob[i]) - oa[i]);
        den += double(oa[i]) * oa[i];
      }
      const double diff = std::sqrt(num / std::max(den, 1e-30));
      const double bytes = double(B) * (double(nkeys) * ops::kKvRowBytes + 2.0 * kH * kD * 4 + 4.0 * nkeys);
      const double ta = std::min(t[0], t[2]), tbm = std::min(t[1], t[3]);
      std::printf("r64 %s B=%lld keys %lld: A (main, %lld splits) %.1f / %.1f us, B (kRoles64, %lld splits) %.1f / "
                  "%.1f us (%.0f%% hbm), B q bf16 %.1f us, B without the L2 prefetch %.1f us; B/A %.3f; "
                  "||B - A|| / ||A|| %.2e\n",
                  k.name, (long long)B, (long long)nkeys, (long long)sa, t[0], t[2], (long long)sb, t[1], t[3],
                  100.0 * bytes / tbm / 1e-6 / hbm, tb_bf16, tb_nopf, tbm / ta, diff);
      std::printf("  r64 split sweep (q fp32):");
      for (int64_t s : {1, 2, 3, 4, 5, 10})
        if (s <= (nkeys + 63) / 64) std::printf(" %lld:%.1f", (long long)s, time_us(b, rb, s, false, 0, K::kRoles64));
      std::printf("\n");
      std::printf("RESULT_R64 %s %lld %.2f %.2f %.2f %.2f %.2f %.2f %lld %lld %.3e\n", k.name, (long long)B, t[0], t[2],
                  t[1], t[3], tb_bf16, tb_nopf, (long long)sa, (long long)sb, diff);
      std::fflush(stdout);
    }
  }
}

int main(int argc, char** argv) {
  std::string dir;
  bool quick = false, prefill_only = false, ab = false, once = false, r64 = false, r64_persistent = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--dump" && i + 1 < argc) dir = argv[i + 1];
    quick = quick || std::string(argv[i]) == "--quick";
    prefill_only = prefill_only || std::string(argv[i]) == "--prefill-only";
    ab = ab || std::string(argv[i]) == "--ab";
    once = once || std::string(argv[i]) == "--once";
    r64 = r64 || std::string(argv[i]) == "--r64";
    r64_persistent = r64_persistent || std::string(argv[i]) == "--r64-persistent";
  }
  auto dev = cuda::query_device(0);
  if (!dev.is_ok()) {
    std::fprintf(stderr, "no CUDA device: %s\n", dev.status().message().c_str());
    return 1;
  }
  const int64_t sms = dev->multiprocessors;
  const double hbm = measure_hbm();
  std::printf("device %s, %lld SMs, HBM copy %.0f GB/s\n", dev->name.c_str(), (long long)sms, hbm / 1e9);
  // Random fp32 rows: one 65,536-row chunk, encoded into every region of the caches.
  const int64_t chunk_rows = 65536;
  std::vector<float> h(size_t(chunk_rows * kD));
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& v : h) v = n(g);
  cuda::DeviceBuffer<float> chunk, sinks, out, ws;
  BENCH_CHECK(chunk.upload(h.data(), h.size()));
  std::vector<float> hs(static_cast<size_t>(kH));
  for (auto& v : hs) v = n(g);
  BENCH_CHECK(sinks.upload(hs.data(), hs.size()));
  BENCH_CHECK(out.alloc(size_t(256 * kH * kD)));
  BENCH_CHECK(ws.alloc(size_t(ops::cuda::sparse_attention_fp8_workspace_floats(256, kH, 64))));
  if (!r64) bench_prefill(chunk, chunk_rows, sinks.data(), hs, sms, ab, once, prefill_only ? dir : std::string());
  if (prefill_only) return 0;
  cuda::DeviceBuffer<uint8_t> win;
  fill_cache(win, kPool * kW, chunk, chunk_rows);
  if (r64) {
    bench_r64(win, chunk, chunk_rows, sinks.data(), ws.data(), sms, hbm, r64_persistent);
    return 0;
  }
  if (!dir.empty()) {
    write_file(dir + "/win.bin", download(win, size_t(ops::kv_cache_bytes(kPool * kW))).data(),
               size_t(ops::kv_cache_bytes(kPool * kW)));
    write_file(dir + "/sinks.bin", hs.data(), hs.size());
  }
  for (const Kind& k : {Kind{"CSA", kCsaEntries, kTopk}, Kind{"HCA", kHcaEntries, kHcaEntries}}) {
    cuda::DeviceBuffer<uint8_t> ent;
    fill_cache(ent, kPool * k.entries, chunk, chunk_rows);
    if (!dir.empty())
      write_file(dir + "/" + k.name + "_ent.bin", download(ent, size_t(ops::kv_cache_bytes(kPool * k.entries))).data(),
                 size_t(ops::kv_cache_bytes(kPool * k.entries)));
    const Run r{&win, &ent, kPool * k.entries, sinks.data(), out.data(), ws.data()};
    for (int64_t B : {1, 64, 256}) {
      Batch b;
      make_batch(b, k, B, uint32_t(B) * 7 + 1);
      const int64_t nkeys = kW + k.topk;
      const int64_t plan = ops::cuda::plan_sparse_attention_fp8(B, kH, nkeys, sms);
      const double bytes_fp32 = double(B) * (double(nkeys) * ops::kKvRowBytes + 2.0 * kH * kD * 4 + 4.0 * nkeys);
      const double bytes_bf16 = bytes_fp32 - double(B) * kH * kD * 2;
      const double us = time_us(b, r, plan, false), us_b = time_us(b, r, plan, true);
      std::printf("%s B=%lld keys %lld splits %lld (plan): q fp32 %.1f us (%.0f GB/s, %.0f%% hbm), q bf16 %.1f us "
                  "(%.0f GB/s, %.0f%% hbm)\n",
                  k.name, (long long)B, (long long)nkeys, (long long)plan, us, bytes_fp32 / us / 1e3,
                  100.0 * bytes_fp32 / us / 1e-6 / hbm, us_b, bytes_bf16 / us_b / 1e3,
                  100.0 * bytes_bf16 / us_b / 1e-6 / hbm);
      // The lock-step kernel (session 16's; the same bits) beside the plan's, q fp32 and bf16, the plan's splits.
      std::printf("  lock-step kernel: q fp32 %.1f us, q bf16 %.1f us\n",
                  time_us(b, r, plan, false, 0, ops::cuda::Fp8AttentionKernel::kLockstep),
                  time_us(b, r, plan, true, 0, ops::cuda::Fp8AttentionKernel::kLockstep));
      std::printf("  warp-specialised variants (q fp32):");
      for (int v = 0; v < ops::cuda::detail::kWsVariants; ++v)
        std::printf(" %d:%.1f", v, time_us(b, r, plan, false, 0, ops::cuda::Fp8AttentionKernel::kAuto, v));
      std::printf("\n");
      // The two-block cluster pair (session 19) at forced split counts: each split takes two SMs.
      std::printf("  pair sweep (q fp32):");
      for (int64_t s : {1, 2, 3, 4, 5, 8, 10, 20})
        if (s <= (nkeys + 31) / 32)
          std::printf(" %lld:%.1f", (long long)s,
                      time_us(b, r, s, false, 0, ops::cuda::Fp8AttentionKernel::kAuto, ops::cuda::detail::kWsPair));
      std::printf("\n");
      if (!quick)  // the wgmma products (session 16's probe of the lock-step kernel)
        std::printf("  wgmma probe (q fp32): %.1f us\n", time_us(b, r, plan, false, ops::cuda::detail::kProbeWgmma));
      if (!quick) {
        std::printf("  sweep (q fp32):");
        for (int64_t s : {1, 2, 3, 4, 5, 8, 10, 20})
          if (s <= (nkeys + 31) / 32) std::printf(" %lld:%.1f", (long long)s, time_us(b, r, s, false));
        std::printf("\n");
      }
      if (!quick && B > 1 && std::string(k.name) == "CSA") {  // where a tile's time goes (phases left out; q fp32)
        namespace d = ops::cuda::detail;
        const std::pair<const char*, int> probes[] = {
            {"no QK", d::kProbeNoQk}, {"no PV", d::kProbeNoPv}, {"no softmax", d::kProbeNoSoftmax},
            {"no dequant", d::kProbeNoDequant}, {"no loads", d::kProbeNoLoads},
            {"no loads+dequant", d::kProbeNoLoads | d::kProbeNoDequant},
            {"no QK+PV+softmax", d::kProbeNoQk | d::kProbeNoPv | d::kProbeNoSoftmax},
            {"serial loop (session 12)", d::kProbeSerial}};
        std::printf("  probes (splits %lld):", (long long)plan);
        for (const auto& [name, bits] : probes) std::printf(" %s %.1f |", name, time_us(b, r, plan, false, bits));
        std::printf("\n");
      }
      std::printf("RESULT %s %lld %.2f %.2f %lld\n", k.name, (long long)B, us, us_b, (long long)plan);
      if (!dir.empty()) dump(dir, std::string(k.name) + "_" + std::to_string(B), b, r, out, plan);
      std::fflush(stdout);
    }
  }
  return 0;
}
