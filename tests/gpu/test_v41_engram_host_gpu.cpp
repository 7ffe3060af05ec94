// DeepSeek-V4.1's Engram tables in pinned host memory on the CUDA runner (--engram-placement host, issue 26): the
// gather kernel reads each step's rows over PCIe on a side stream per Engram layer, forked once the hashes exist and
// joined before the layer's wkv GEMM. Same kernel, same rows: the logits must equal the device placement's bit for
// bit (float fixture tables and the release's FP8 rows), and the tables must leave the GPU (measured with
// cudaMemGetInfo at V4.1-Flash shapes). The fetch's own time from pinned memory, next to the same gather from device
// memory, is printed for bench/NOTES.md (no timing is asserted); whether it hides behind the step is what
// `dsinfer bench --engram-placement host` against device shows (engram_fetch_wait = what the step waited).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_layout.h"
#include "cuda/device_bytes.h"
#include "cuda/gpu_test_util.h"
#include "cuda/pinned_buffer.h"
#include "io/config.h"
#include "model/export_v41.h"
#include "ops/engram/engram_cuda.h"
#include "scheduler/batch_plan.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

std::string find_fixture(const std::string& name) {
  for (const std::string& d : {"tests/fixtures/" + name, test::own_fixture(name)})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

std::unique_ptr<runner::ModelRunner> cuda_runner(runner::RunnerOptions o, model::EngramPlacement p) {
  o.engram_placement = p;
  auto r = backends::create_cuda_runner(o);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

// Two sequences in slots 1 and 0: prefill chunks (one crossing the other's decode), then decode steps; every token's
// logits, concatenated.
std::vector<float> run_steps(runner::ModelRunner& r) {
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 4;
  cc.max_num_seqs = 2;
  cc.max_model_len = 64;
  const cache::StateLayout layout = test::unwrap(cache::compute_state_layout(r.config(), cc));
  const int64_t nb = layout.blocks_per_sequence(64);
  EXPECT_TRUE(r.bind_state(layout, 2, int32_t(2 * nb), 64).is_ok());
  std::vector<std::vector<int32_t>> toks(2);
  std::vector<std::vector<cache::BlockId>> tables(2);
  std::vector<int64_t> done(2, 0);
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 40; ++k) toks[size_t(s)].push_back(int32_t(3 + (s * 131 + k * 37 + k * k) % 500));
    for (int64_t b = 0; b < nb; ++b) tables[size_t(s)].push_back(int32_t(s * nb + b));
  }
  const std::vector<std::vector<std::pair<int, int>>> steps = {{{0, 9}}, {{0, 1}, {1, 17}}, {{0, 1}, {1, 1}},
                                                               {{1, 5}, {0, 1}}, {{0, 1}, {1, 1}}};
  std::vector<float> all;
  for (const auto& step : steps) {
    scheduler::BatchPlan p;
    p.clear();
    for (auto [s, n] : step) {
      scheduler::SeqPlan sp;
      sp.start_pos = done[size_t(s)];
      sp.num_new_tokens = n;
      sp.token_offset = p.num_tokens();
      sp.needs_logits = true;
      sp.slot = 1 - s;
      sp.block_table = tables[size_t(s)];
      for (int i = 0; i < n; ++i) {
        p.logits_token_index.push_back(p.num_tokens());
        p.token_ids.push_back(toks[size_t(s)][size_t(done[size_t(s)] + i)]);
        p.positions.push_back(done[size_t(s)] + i);
      }
      p.cu_seqlens.push_back(p.num_tokens());
      done[size_t(s)] += n;
      p.seqs.push_back(sp);
    }
    std::vector<float> lg;
    const Status st = r.step(p, lg);
    EXPECT_TRUE(st.is_ok()) << st.message();
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

}  // namespace

TEST(GpuV41EngramHost, HostTablesGiveTheDevicePlacementsLogitsBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  const std::string fx = find_fixture("tiny-v41-a");
  if (fx.empty()) GTEST_SKIP() << "tiny-v41-a not found";
  const test::ScratchDir conv("engram_host_fp8");
  ASSERT_TRUE(model::convert_checkpoint_v41(fx, conv.str(), int64_t(512) << 10, 2).is_ok());
  for (const std::string& dir : {fx, conv.str()}) {
    SCOPED_TRACE(dir);
    for (const model::Numerics& num : {model::Numerics::hf_noqat(), model::Numerics::hf()}) {
      runner::RunnerOptions o;
      o.model_dir = dir;
      o.numerics = num;
      o.exact_gemm = true;
      auto dev = cuda_runner(o, model::EngramPlacement::kDevice);
      auto host = cuda_runner(o, model::EngramPlacement::kHost);
      ASSERT_TRUE(dev && host);
      const std::vector<float> a = run_steps(*dev), b = run_steps(*host);
      ASSERT_FALSE(a.empty());
      EXPECT_EQ(a, b) << num.name;
    }
  }
}

// V4.1-Flash shapes, dummy weights, 4 layers (Engram at layer 1, its table 2^22 FP8 rows + scales, ids wrapping):
// the host placement leaves the table off the GPU (the difference of the device bytes the two runners hold after
// load = its bytes, within 4 MiB: session 19 measured 1.9 MiB less through cudaMemGetInfo), and the gather of T
// tokens x 24 rows from pinned memory next to device memory. The bytes are this process's own DeviceBuffers
// (cuda::device_buffer_bytes), not the device's free memory: session 19 saw 0.869 GiB instead of 1.031 when other
// test processes allocated on the same GPU during the loads.
TEST(GpuV41EngramHost, FlashShapedTablesLeaveTheGpuAndTheFetchTime) {
  DSI_SKIP_WITHOUT_GPU();
  const std::string cfg_dir = std::filesystem::exists("configs/deepseek-v4.1-flash/config.json")
                                  ? std::string("configs/deepseek-v4.1-flash")
                                  : test::source_dir() + "/configs/deepseek-v4.1-flash";
  runner::RunnerOptions o;
  o.model_dir = cfg_dir;
  o.load_format = runner::LoadFormat::kDummy;
  o.numerics = model::Numerics::hf();
  o.num_layers = 4;
  double used[2] = {0, 0};
  for (const int host : {0, 1}) {
    const int64_t before = cuda::device_buffer_bytes();
    auto r = cuda_runner(o, host ? model::EngramPlacement::kHost : model::EngramPlacement::kDevice);
    ASSERT_TRUE(r);
    used[host] = double(cuda::device_buffer_bytes() - before);
  }
  const double table = double(int64_t(1) << 22) * (256 + 8);
  std::printf("Flash shapes, 4 layers, dummy: GPU memory after load device placement %.4f GiB, host placement %.4f "
              "GiB, difference %.4f GiB (the table: %.4f GiB)\n", used[0] / double(1 << 30), used[1] / double(1 << 30),
              (used[0] - used[1]) / double(1 << 30), table / double(1 << 30));
  EXPECT_NEAR(used[0] - used[1], table, double(4 << 20));

  // The fetch alone: engram_gather of T tokens x 24 hash columns from a 2^22-row FP8 table in pinned host memory
  // and in device memory (ids uniform over the table, as the hashes spread them).
  constexpr int64_t kRows = int64_t(1) << 22, kHd = 256, kCols = 24;
  cuda::PinnedHostBuffer host_table;
  ASSERT_TRUE(host_table.alloc(size_t(kRows * (kHd + kHd / 32)), "test table").is_ok());
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < host_table.size(); i += 4096) host_table.data()[i] = uint8_t(rng());
  cuda::DeviceBuffer<uint8_t> dev_table;
  ASSERT_TRUE(dev_table.upload(host_table.data(), host_table.size(), "test table").is_ok());
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  for (const int64_t T : {1, 64, 256, 4096}) {
    std::vector<int64_t> ids(size_t(T * kCols));
    for (auto& x : ids) x = int64_t(rng() % uint64_t(kRows));
    auto dids = cuda::test::to_device(ids);
    cuda::DeviceBuffer<float> out;
    ASSERT_TRUE(out.alloc(size_t(T * kCols * kHd)).is_ok());
    double ms[2] = {0, 0};
    for (const int on_host : {0, 1}) {
      const uint8_t* base = on_host ? host_table.data() : dev_table.data();
      const ops::cuda::EngramTableDevice tb{base, base + kRows * kHd, kRows, kHd, false};
      constexpr int kIters = 20;
      ASSERT_TRUE(ops::cuda::engram_gather(dids.data(), T, 1, 0, kCols, tb, out.data(), nullptr).is_ok());  // warm-up
      cudaEventRecord(a, nullptr);
      for (int i = 0; i < kIters; ++i) ASSERT_TRUE(ops::cuda::engram_gather(dids.data(), T, 1, 0, kCols, tb, out.data(), nullptr).is_ok());
      cudaEventRecord(b, nullptr);
      ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      ms[on_host] = double(t) / kIters;
    }
    const double bytes = double(T * kCols) * double(kHd + kHd / 32);
    std::printf("engram_gather T=%lld (%lld rows, %.2f MB of FP8 rows + scales): device memory %.4f ms, pinned host "
                "memory %.4f ms (%.1f GB/s over PCIe)\n", (long long)T, (long long)(T * kCols), bytes / 1e6, ms[0],
                ms[1], bytes / (ms[1] * 1e6));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}
