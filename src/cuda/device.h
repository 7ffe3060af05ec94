// Device discovery for the CLI and benchmarks (plain types; implemented in device.cpp against the CUDA runtime).
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsinfer::cuda {

struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, multiprocessors = 0;
  int64_t total_bytes = 0, free_bytes = 0, l2_bytes = 0;
};

Result<DeviceInfo> query_device(int device = 0);

}  // namespace dsinfer::cuda
