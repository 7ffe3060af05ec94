// Helpers for GPU parity tests: skip without a device, upload/download vectors, the normalised error metric.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/cuda_common.h"
#include "cuda/device_buffer.h"

#define DSI_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (!::dsinfer::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace dsinfer::cuda::test {

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
  DeviceBuffer<T> b;
  EXPECT_TRUE(b.upload(v.data(), v.size()).is_ok());
  return b;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_TRUE(b.download(v.data(), n).is_ok());
  return v;
}

// ||a - b|| / ||b|| (L2), the scale-free metric of every parity test; NaN never passes.
inline double normalized_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace dsinfer::cuda::test
