// Sparse attention decode kernels at DeepSeek-V4-Flash shapes (64 heads x 512, window 128, one token per sequence
// at position 4095): CSA (window + indexer top-512) and HCA (window + all 32 entries of ratio 128), batch 1 / 64 /
// 256 sequences. Side by side: the fp32 CUDA-core kernel (exact mode) with its default split count and without
// splits, and the bf16 tensor-core kernel (fast mode) with the runner's split count (sparse_attention_tc_splits)
// and without splits (at batch 1 also 2 / 5 / 10 / 20 splits, to check the heuristic). CUDA events after 5
// warm-ups, median of 20 single calls (launch latency included, as NOTES.md's earlier tables); b2b_us: 20 calls
// back to back / 20 (launch overhead hidden, as in a CUDA graph). Each call uses a different group of sequences
// (and query rows) out of a 512-sequence pool (>1 GB of state, far beyond the 50 MB L2), so every key is read from
// HBM. Bytes that must move: key rows read once per token (fp32 rows, as the state holds them today), q read and o
// written (fp32), the index list. floor = bytes / HBM bandwidth, the bandwidth measured here by a 1 GB
// device-to-device copy (read + write bytes; nominal 4.8e12); %bw = floor / median; GB/s = bytes / median, %4.8T
// its share of the nominal 4.8 TB/s. The last columns give the floor with bf16 rows (1024 B) and with FP8 rows
// (448 FP8 nope + 64 bf16 rope dims + scales, ~584 B), what the state format change would allow. Built only with
// DSINFER_CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_common.h"
#include "cuda/device_buffer.h"
#include "cuda/device.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

using namespace dsinfer;

namespace {

constexpr int64_t kH = 64, kHd = 512, kW = 128, kPos = 4095, kTopk = 512, kPool = 512;
constexpr double kBf16Row = 1024, kFp8Row = 584;  // bytes per key row in the later state formats

#define BENCH_CHECK(x)                                                  \
  do {                                                                  \
    Status s_ = (x);                                                    \
    if (!s_.is_ok()) {                                                  \
      std::fprintf(stderr, "%s: %s\n", #x, s_.message().c_str());      \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

void fill(cuda::DeviceBuffer<float>& b, size_t n, uint32_t seed) {
  std::vector<float> h(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
  }
  BENCH_CHECK(b.upload(h.data(), n));
}

struct Group {  // one rotation: B sequences with their step arrays
  cuda::DeviceBuffer<int32_t> seq, cu, slot, tables, topk;
  cuda::DeviceBuffer<int64_t> pos, start;
  ops::StepDevice step;
};

// Device-to-device copy bandwidth (bytes read + written per second), median of 10 copies of 1 GB.
double measure_hbm() {
  const size_t n = size_t(1) << 28;  // floats
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
  return ms[ms.size() / 2] > 0 ? 2.0 * double(n) * 4 / (double(ms[ms.size() / 2]) * 1e-3) : 4.8e12;
}

}  // namespace

int main() {
  auto dev = cuda::query_device(0);
  if (!dev.is_ok()) {
    std::fprintf(stderr, "%s\n", dev.status().message().c_str());
    return 1;
  }
  const double hbm = measure_hbm();
  std::printf("# sparse attention decode, %s, %d SMs; H=%ld hd=%ld W=%ld pos=%ld; HBM copy %.2f TB/s\n",
              dev->name.c_str(), dev->multiprocessors, long(kH), long(kHd), long(kW), long(kPos), hbm / 1e12);
  // State: per slot a ring [128, 512]; per sequence its CSA entries (1024) or HCA entries (32), one block each.
  const int64_t csa_entries = (kPos + 1) / 4, hca_entries = (kPos + 1) / 128;
  cuda::DeviceBuffer<float> slots, blocks, q, kv, o, ws, sinks, inv;
  fill(slots, size_t(kPool * kW * kHd), 1);
  fill(blocks, size_t(kPool * csa_entries * kHd), 2);
  fill(q, size_t(kPool * kH * kHd), 3);
  fill(kv, size_t(kPool * kHd), 4);
  fill(sinks, size_t(kH), 5);
  fill(inv, 32, 6);
  BENCH_CHECK(o.alloc(size_t(kPool * kH * kHd)));
  std::mt19937 g(7);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("%-4s %-4s %5s %6s %9s %9s %10s %7s %6s %7s %6s %7s %10s %10s\n", "kind", "kern", "batch", "splits", "MB",
              "floor_us", "median_us", "ratio", "%bw", "GB/s", "%4.8T", "b2b_us", "bf16_fl_us", "fp8_fl_us");
  for (bool csa : {true, false}) {
    const int64_t m = csa ? 4 : 128, ncomp = csa ? kTopk : hca_entries;
    ops::LayerStateView v;
    v.slots = slots.data();
    v.slot_stride = kW * kHd;
    v.ring_offset = 0;
    v.ring_rows = kW;
    v.head_dim = kHd;
    v.blocks = blocks.data();
    v.entries_per_block = csa ? csa_entries : hca_entries;
    v.block_stride = v.entries_per_block * kHd;
    v.entries_offset = 0;
    for (int64_t B : {int64_t(1), int64_t(64), int64_t(256)}) {
      const int64_t ngroups = kPool / B;
      std::vector<Group> groups(static_cast<size_t>(ngroups));
      for (int64_t gi = 0; gi < ngroups; ++gi) {
        Group& gr = groups[size_t(gi)];
        std::vector<int32_t> seq(static_cast<size_t>(B)), cu(static_cast<size_t>(B + 1)), slot(static_cast<size_t>(B)),
            tables(static_cast<size_t>(B)), topk;
        std::vector<int64_t> pos(static_cast<size_t>(B), kPos), start(static_cast<size_t>(B), kPos);
        for (int64_t b = 0; b < B; ++b) {
          seq[size_t(b)] = int32_t(b);
          cu[size_t(b)] = int32_t(b);
          slot[size_t(b)] = int32_t(gi * B + b);
          tables[size_t(b)] = int32_t(gi * B + b);
          if (csa) {
            std::vector<int32_t> all(static_cast<size_t>(csa_entries));
            std::iota(all.begin(), all.end(), 0);
            std::shuffle(all.begin(), all.end(), g);
            all.resize(size_t(kTopk));
            std::sort(all.begin(), all.end());
            topk.insert(topk.end(), all.begin(), all.end());
          }
        }
        cu[size_t(B)] = int32_t(B);
        BENCH_CHECK(gr.seq.upload(seq.data(), seq.size()));
        BENCH_CHECK(gr.cu.upload(cu.data(), cu.size()));
        BENCH_CHECK(gr.slot.upload(slot.data(), slot.size()));
        BENCH_CHECK(gr.tables.upload(tables.data(), tables.size()));
        BENCH_CHECK(gr.pos.upload(pos.data(), pos.size()));
        BENCH_CHECK(gr.start.upload(start.data(), start.size()));
        if (csa) BENCH_CHECK(gr.topk.upload(topk.data(), topk.size()));
        gr.step = {B, B, nullptr, gr.pos.data(), gr.seq.data(), gr.cu.data(), gr.start.data(), gr.slot.data(),
                   gr.tables.data(), 1};
      }
      const int64_t nkeys = kW + ncomp;
      auto bytes_for = [&](double row) {
        return double(B) * (double(nkeys) * row + 2.0 * kH * kHd * 4 + (csa ? kTopk * 4 : 0));
      };
      const double bytes = bytes_for(kHd * 4.0);
      const int64_t def_splits = ops::cuda::sparse_attention_splits(B, kH, nkeys, dev->multiprocessors);
      const int64_t tc_splits = ops::cuda::sparse_attention_tc_splits(B, kH, nkeys, dev->multiprocessors);
      struct Run {
        bool tc;
        int64_t splits;
      };
      std::vector<Run> runs = {{false, def_splits}, {false, 1}, {true, tc_splits}, {true, 1}};
      // Batch 1: the tensor-core kernel's other split counts too (checks the heuristic's choice).
      if (B == 1)
        for (int64_t sp : {2, 5, 10, 20})
          if (sp != tc_splits && sp <= (nkeys + 31) / 32) runs.push_back({true, sp});
      for (size_t ri = 0; ri < runs.size(); ++ri) {
        const Run& r = runs[ri];
        if (ri < 4 && ri % 2 == 1 && runs[ri - 1].splits == 1) continue;  // would repeat the row above
        const int64_t wsn = ops::cuda::sparse_attention_workspace_floats(B, kH, kHd, r.splits);
        BENCH_CHECK(ws.alloc(size_t(std::max<int64_t>(1, wsn))));
        ops::cuda::SparseAttentionCudaParams p;
        p.heads = kH;
        p.head_dim = kHd;
        p.scale = 1.0f / std::sqrt(float(kHd));
        p.sinks = sinks.data();
        p.window = kW;
        p.m = m;
        p.topk = csa ? kTopk : 0;
        p.rope_dim = 64;
        p.inv_freq = inv.data();
        p.num_splits = r.splits;
        p.tensor_cores = r.tc;
        std::vector<float> ms;
        for (int it = 0; it < 25; ++it) {
          const Group& gr = groups[size_t(it % ngroups)];
          p.topk_idx = csa ? gr.topk.data() : nullptr;
          const int64_t off = (it % ngroups) * B;
          cudaEventRecord(e0);
          BENCH_CHECK(ops::cuda::sparse_attention(gr.step, v, p, q.data() + off * kH * kHd, kv.data() + off * kHd,
                                                  o.data() + off * kH * kHd, ws.data(), nullptr));
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float t = 0;
          cudaEventElapsedTime(&t, e0, e1);
          if (it >= 5) ms.push_back(t);
        }
        // Back to back (as in a CUDA graph: launch overhead hidden), 20 calls over different groups.
        cudaEventRecord(e0);
        for (int it = 0; it < 20; ++it) {
          const Group& gr = groups[size_t(it % ngroups)];
          p.topk_idx = csa ? gr.topk.data() : nullptr;
          const int64_t off = (it % ngroups) * B;
          BENCH_CHECK(ops::cuda::sparse_attention(gr.step, v, p, q.data() + off * kH * kHd, kv.data() + off * kHd,
                                                  o.data() + off * kH * kHd, ws.data(), nullptr));
        }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float b2b_ms = 0;
        cudaEventElapsedTime(&b2b_ms, e0, e1);
        BENCH_CHECK(cuda::cuda_status(cudaDeviceSynchronize(), "sparse_attention", __FILE__, __LINE__));
        std::sort(ms.begin(), ms.end());
        const double med_us = double(ms[ms.size() / 2]) * 1e3, floor_us = bytes / hbm * 1e6;
        std::printf("%-4s %-4s %5ld %6ld %9.2f %9.2f %10.2f %7.2f %5.1f%% %7.0f %5.1f%% %7.2f %10.2f %10.2f\n",
                    csa ? "CSA" : "HCA", r.tc ? "tc" : "fp32", long(B), long(r.splits), bytes / 1e6, floor_us, med_us,
                    med_us / floor_us, 100.0 * floor_us / med_us, bytes / med_us * 1e-3, bytes / med_us / 4.8e4,
                    double(b2b_ms) * 1e3 / 20, bytes_for(kBf16Row) / hbm * 1e6, bytes_for(kFp8Row) / hbm * 1e6);
      }
    }
  }
  return 0;
}
