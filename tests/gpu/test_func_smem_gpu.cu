// cuda/func_smem.h: a kernel's dynamic shared memory limit raised from several host threads, as ranks sharing one GPU
// do. A launcher that set the attribute to each call's size failed launches here (a smaller value set by the other
// thread between this thread's set and launch). Plain CUDA runtime: gpu_test_util.h brings fmt, which .cu files avoid.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cuda/func_smem.h"

namespace {

__global__ void fill_smem_kernel(int* out, int words) {
  extern __shared__ int s[];
  for (int i = int(threadIdx.x); i < words; i += int(blockDim.x)) s[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[words - 1];
}

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int max_dynamic_smem() {
  cudaFuncAttributes a{};
  EXPECT_EQ(cudaFuncGetAttributes(&a, fill_smem_kernel), cudaSuccess);
  return a.maxDynamicSharedSizeBytes;
}

}  // namespace

TEST(GpuFuncSmem, NeverLowersTheLimit) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const void* f = reinterpret_cast<const void*>(fill_smem_kernel);
  ASSERT_EQ(dsinfer::cuda::raise_max_dynamic_smem(f, 150 * 1024), cudaSuccess);
  const int raised = max_dynamic_smem();
  EXPECT_GE(raised, 150 * 1024);
  ASSERT_EQ(dsinfer::cuda::raise_max_dynamic_smem(f, 80 * 1024), cudaSuccess);
  EXPECT_EQ(max_dynamic_smem(), raised);
}

TEST(GpuFuncSmem, ThreadsRaisingDifferentSizesNeverFailALaunch) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const void* f = reinterpret_cast<const void*>(fill_smem_kernel);
  std::atomic<int> failures{0};
  auto rank = [&](size_t bytes) {
    cudaSetDevice(0);
    cudaStream_t st = nullptr;
    int* out = nullptr;
    if (cudaStreamCreate(&st) != cudaSuccess || cudaMalloc(&out, sizeof(int)) != cudaSuccess) {
      ++failures;
      return;
    }
    for (int i = 0; i < 400; ++i) {
      if (dsinfer::cuda::raise_max_dynamic_smem(f, bytes) != cudaSuccess) ++failures;
      fill_smem_kernel<<<1, 128, bytes, st>>>(out, int(bytes / sizeof(int)));
      if (cudaGetLastError() != cudaSuccess) ++failures;
    }
    int last = 0;
    if (cudaMemcpyAsync(&last, out, sizeof(int), cudaMemcpyDeviceToHost, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess || last != int(bytes / sizeof(int)) - 1)
      ++failures;
    cudaFree(out);
    cudaStreamDestroy(st);
  };
  // Sizes above NeverLowersTheLimit's so the attribute really moves here (the tests share one process).
  std::vector<std::thread> ranks;
  for (size_t kib : {160, 200, 170, 210}) ranks.emplace_back(rank, kib * 1024);
  for (auto& r : ranks) r.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(max_dynamic_smem(), 210 * 1024);
}
