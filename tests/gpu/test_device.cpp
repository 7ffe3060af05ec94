// The CUDA runtime is reachable and the device is a Hopper-or-newer GPU (skips without a device).
#include <gtest/gtest.h>

#include "cuda/device.h"
#include "cuda/gpu_test_util.h"

TEST(GpuDevice, QueryReportsHopper) {
  DSI_SKIP_WITHOUT_GPU();
  auto d = dsinfer::cuda::query_device(0);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_GE(d->sm_major, 9);
  EXPECT_GT(d->free_bytes, 0);
}

TEST(GpuDevice, AllocationFailureIsAClearError) {
  DSI_SKIP_WITHOUT_GPU();
  dsinfer::cuda::DeviceBuffer<float> b;
  dsinfer::Status s = b.alloc(size_t(1) << 45, "test tensor");  // 128 TiB
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("out of GPU memory allocating test tensor"), std::string::npos) << s.message();
}
