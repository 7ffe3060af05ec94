// Sampling cost per decode step, host path vs device path (issue 14), on random logits [batch, vocab] already on
// the GPU (where the forward leaves them):
//   host:   copy all rows to pinned host memory + the reference Sampler on every row (what --sampling host does);
//   device: describe the rows (PackedRows) + upload + ops::cuda::sample_rows + copy the results back.
// Also the kernel alone (CUDA events) and the bytes each path moves. Prints one table row per (batch, setting).
// usage: sampling_bench [batches (64,256)] [vocab (129280)] [iterations (5)]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "ops/sampling/sampling_cuda.h"
#include "sampling/row_pack.h"
#include "sampling/sampler.h"

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

#define CHECK_CUDA(x)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                         \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)
#define CHECK_OK(x)                                                   \
  do {                                                                \
    Status s_ = (x);                                                  \
    if (!s_) {                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, s_.message().c_str());     \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

struct Setting {
  const char* name;
  SamplingParams p;
};

std::vector<Setting> settings() {
  std::vector<Setting> v(5);
  v[0].name = "greedy";
  v[0].p.temperature = 0;
  v[1].name = "T=1";
  v[1].p.temperature = 1.0;
  v[2].name = "T=0.7 top_p=0.9";
  v[2].p.temperature = 0.7;
  v[2].p.top_p = 0.9;
  v[3].name = "top_k=50 top_p=0.95";
  v[3].p.temperature = 0.8;
  v[3].p.top_k = 50;
  v[3].p.top_p = 0.95;
  v[4].name = "T=1 logprobs=5 pen";
  v[4].p.temperature = 1.0;
  v[4].p.logprobs = true;
  v[4].p.top_logprobs = 5;
  v[4].p.frequency_penalty = 0.5;
  v[4].p.repetition_penalty = 1.1;
  return v;
}

void run(int64_t B, int64_t V, int iters, const Setting& st, cuda::DeviceBuffer<float>& dlogits) {
  std::vector<int32_t> prompt(512), out(128);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % size_t(V));
  for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t((i * 104729) % size_t(V));
  // Host path: download + Sampler per row (one iteration: it is slow).
  float* pinned = nullptr;
  CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), size_t(B * V) * 4));
  auto t0 = Clock::now();
  CHECK_CUDA(cudaMemcpy(pinned, dlogits.data(), size_t(B * V) * 4, cudaMemcpyDeviceToHost));
  const double copy_ms = ms_since(t0);
  sampling::Sampler sampler;
  t0 = Clock::now();
  for (int64_t r = 0; r < B; ++r) {
    sampling::SampleInput in;
    in.logits = std::span<const float>(pinned + r * V, size_t(V));
    in.params = &st.p;
    in.prompt_tokens = prompt;
    in.output_tokens = out;
    in.rng = {uint64_t(r), 0};
    (void)sampler.sample(in);
  }
  const double host_ms = ms_since(t0);
  CHECK_CUDA(cudaFreeHost(pinned));
  // Device path.
  sampling::PackedRows pr;
  cuda::DeviceBuffer<uint8_t> din;
  cuda::DeviceBuffer<float> work;
  cuda::DeviceBuffer<ops::SampleRowOut> dout;
  CHECK_OK(work.alloc(size_t(B * V)));
  CHECK_OK(dout.alloc(size_t(B)));
  std::vector<ops::SampleRowOut> res(static_cast<size_t>(B));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  double pack_ms = 0, total_ms = 0;
  float kernel_ms = 0;
  for (int it = 0; it < iters; ++it) {
    t0 = Clock::now();
    pr.clear(V);
    for (int64_t r = 0; r < B; ++r) {
      sampling::RowRequest rq;
      rq.logits_row = int32_t(r);
      rq.params = &st.p;
      rq.prompt_tokens = prompt;
      rq.output_tokens = out;
      rq.rng = {uint64_t(r), 0};
      CHECK_OK(pr.add(rq));
    }
    pack_ms += ms_since(t0);
    const size_t desc = pr.rows.size() * sizeof(ops::SampleRowDesc), ent = pr.entries.size() * sizeof(ops::SampleEntry);
    std::vector<uint8_t> staging(desc + ent + 16);
    std::memcpy(staging.data(), pr.rows.data(), desc);
    if (ent) std::memcpy(staging.data() + desc, pr.entries.data(), ent);
    CHECK_OK(din.upload(staging.data(), staging.size()));
    ops::cuda::SampleRowsArgs a;
    a.logits = dlogits.data();
    a.logits_stride = V;
    a.V = V;
    a.logits_rows = B;
    a.rows = din.as<ops::SampleRowDesc>();
    a.num_rows = B;
    a.entries = reinterpret_cast<const ops::SampleEntry*>(din.data() + desc);
    a.num_entries = int64_t(pr.entries.size());
    a.words_per_row = pr.words_per_row();
    a.work = work.data();
    a.out = dout.data();
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_OK(ops::cuda::sample_rows(a, nullptr));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_OK(dout.download(res.data(), res.size()));
    total_ms += ms_since(t0);
    float k = 0;
    CHECK_CUDA(cudaEventElapsedTime(&k, e0, e1));
    kernel_ms += k;
  }
  std::printf("| %4lld | %-20s | %8.1f | %8.2f | %9.1f | %8.3f | %8.3f | %9.3f | %7.1f |\n", (long long)B, st.name,
              double(B * V * 4) / 1e6, copy_ms, host_ms, pack_ms / iters, kernel_ms / iters, total_ms / iters,
              double(B) * sizeof(ops::SampleRowOut) / 1e3);
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {64, 256};
  if (argc > 1) {
    batches.clear();
    std::stringstream ss(argv[1]);
    for (std::string t; std::getline(ss, t, ',');) batches.push_back(std::atoll(t.c_str()));
  }
  const int64_t V = argc > 2 ? std::atoll(argv[2]) : 129280;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 5;
  if (V <= 0 || iters <= 0) return std::fprintf(stderr, "usage: sampling_bench [batches] [vocab] [iterations]\n"), 2;
  std::printf("| batch | setting | logits MB | D2H ms | host sample ms | dev pack ms | kernel ms | dev total ms | result KB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t B : batches) {
    if (B <= 0) continue;
    std::vector<float> logits(size_t(B * V));
    std::mt19937 g(static_cast<uint32_t>(B));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (auto& x : logits) x = nd(g);
    cuda::DeviceBuffer<float> d;
    CHECK_OK(d.upload(logits.data(), logits.size(), "logits"));
    for (const Setting& st : settings()) run(B, V, iters, st, d);
  }
  return 0;
}
