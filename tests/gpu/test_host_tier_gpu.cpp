// Prefix-cache host tier on the GPU (backends/cuda/runner/host_tier_cuda.h): spills of device blocks into pinned host
// memory and restores back, planned by cache::plan_copy_runs (adjacent blocks merged into one transfer) and issued
// with cudaMemcpyAsync on one stream, leave exactly the bytes that the same copies done one by one with memmove on
// the host leave (skips without a device). Byte equality: copies do no arithmetic.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/runner/host_tier_cuda.h"
#include "cache/state_copy.h"
#include "cuda/gpu_test_util.h"

using namespace dsinfer;
using K = cache::StateCopy::Kind;

TEST(GpuHostTier, SpillAndRestoreRoundTripEqualsTheHostReference) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t bb = 4096 * 3 + 64, B = 8, H = 5;  // block bytes not a power of two
  std::vector<uint8_t> blocks(size_t(B * bb)), host(size_t(H * bb), 0xAB);
  std::mt19937 rng(5);
  for (uint8_t& x : blocks) x = uint8_t(rng());
  const std::vector<cache::StateCopy> copies = {
      {K::kBlockToHost, 2, 0}, {K::kBlockToHost, 3, 1}, {K::kBlockToHost, 4, 2},  // one merged run
      {K::kBlockToHost, 6, 4},
      {K::kHostToBlock, 0, 0}, {K::kHostToBlock, 1, 1},                            // merged: restore 2, 3 -> 0, 1
      {K::kHostToBlock, 4, 7}, {K::kHostToBlock, 2, 5},
      {K::kBlockToBlock, 7, 3},                                                    // device to device after a restore
      {K::kBlockToHost, 3, 3},                                                     // reads what that copy wrote
  };
  // Host reference: every copy on its own, in order.
  std::vector<uint8_t> ref_blocks = blocks, ref_host = host;
  const cache::StateMemory ref_mem{nullptr, ref_blocks.data(), nullptr, ref_host.data(), 0, B, 0, H, 0, bb};
  for (const cache::StateCopy& c : copies) {
    auto one = cache::plan_copy_runs(std::span<const cache::StateCopy>(&c, 1), ref_mem);
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    for (const cache::CopyRun& r : *one) std::memmove(r.dst, r.src, r.bytes);
  }

  cuda::DeviceBuffer<uint8_t> dev = cuda::test::to_device(blocks);
  backends::PinnedHostBuffer pinned;
  ASSERT_TRUE(pinned.alloc(host.size(), "test host tier").is_ok());
  std::memcpy(pinned.data(), host.data(), host.size());
  const cache::StateMemory mem{nullptr, dev.data(), nullptr, pinned.data(), 0, B, 0, H, 0, bb};
  auto runs = cache::plan_copy_runs(copies, mem);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  EXPECT_LT(runs->size(), copies.size());  // merged
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Status issued = backends::issue_copy_runs(*runs, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  ASSERT_TRUE(issued.is_ok()) << issued.message();
  EXPECT_TRUE(cuda::test::to_host(dev, blocks.size()) == ref_blocks);
  EXPECT_EQ(std::memcmp(pinned.data(), ref_host.data(), ref_host.size()), 0);
}
