// Issue 27, session 17: the FP8 wire of DP attention's expert dispatch on the device (backends/cuda/parallel/
// fp8_wire.cu) against its host reference (parallel/fp8_wire.h), bit for bit: every packed byte (codes, padding,
// fp32 scales) and every unpacked value, over rows gathered in a shuffled order, blocks of magnitudes 2^-30 .. 2^30,
// a zero block, values below e4m3's normal range, and the hidden sizes of the fixtures and of V4 / V4.1 / V4-Pro.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cuda/parallel/fp8_wire_cuda.h"
#include "cuda/gpu_test_util.h"
#include "parallel/fp8_wire.h"

using namespace dsinfer;

TEST(GpuFp8Wire, PackAndUnpackMatchTheHostReferenceBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int64_t dim : {64, 96, 256, 4096, 5120, 7168}) {
    const int64_t src_rows = 41, n = 37, nb = parallel::fp8_wire_scales(dim);
    std::vector<float> x(size_t(src_rows * dim));
    for (int64_t r = 0; r < src_rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const float scale = (r + b) % 7 == 3 ? 0.0f : std::ldexp(1.0f, e(rng));  // some blocks all zero
        for (int64_t i = b * 128; i < std::min(dim, b * 128 + 128); ++i) {
          float v = g(rng) * scale;
          if (i % 17 == 5) v *= 1e-4f;  // far below the block's maximum: e4m3 subnormals after scaling
          x[size_t(r * dim + i)] = v;
        }
      }
    std::vector<int32_t> rows(static_cast<size_t>(n));
    std::iota(rows.begin(), rows.end(), 2);
    std::shuffle(rows.begin(), rows.end(), rng);
    const int64_t rb = parallel::fp8_wire_row_bytes(dim);
    std::vector<uint8_t> want(size_t(n * rb));
    std::vector<float> want_x(size_t(n * dim));
    for (int64_t j = 0; j < n; ++j) {
      parallel::fp8_wire_pack_ref(x.data() + size_t(rows[size_t(j)]) * size_t(dim), dim, want.data() + j * rb);
      parallel::fp8_wire_unpack_ref(want.data() + j * rb, dim, want_x.data() + j * dim);
    }
    auto dx = cuda::test::to_device(x);
    auto drows = cuda::test::to_device(rows);
    cuda::DeviceBuffer<uint8_t> packed;
    ASSERT_TRUE(packed.alloc(size_t(n * rb), "packed").is_ok());
    cuda::DeviceBuffer<float> unpacked;
    ASSERT_TRUE(unpacked.alloc(size_t(n * dim), "unpacked").is_ok());
    backends::detail::launch_fp8_wire_pack(dx.data(), dim, drows.data(), n, packed.data(), nullptr);
    backends::detail::launch_fp8_wire_unpack(packed.data(), n, dim, unpacked.data(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<uint8_t> got = cuda::test::to_host(packed, size_t(n * rb));
    const std::vector<float> got_x = cuda::test::to_host(unpacked, size_t(n * dim));
    int64_t bad_bytes = 0, bad_values = 0;
    for (size_t i = 0; i < got.size(); ++i) bad_bytes += got[i] != want[i] ? 1 : 0;
    for (size_t i = 0; i < got_x.size(); ++i) bad_values += std::memcmp(&got_x[i], &want_x[i], 4) != 0 ? 1 : 0;
    EXPECT_EQ(bad_bytes, 0) << "dim " << dim;
    EXPECT_EQ(bad_values, 0) << "dim " << dim;
    std::printf("fp8 wire dim %lld: %lld rows, %lld bytes each (%.4f a value), bytes and values bit for bit: %s\n",
                (long long)dim, (long long)n, (long long)rb, double(rb) / double(dim),
                bad_bytes == 0 && bad_values == 0 ? "yes" : "NO");
  }
}
