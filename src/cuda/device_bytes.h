// The device bytes this process holds in DeviceBuffers (device_buffer.h; counted in device_buffer.cpp, where they
// are allocated and freed), on every device: what a test can measure of its own allocations while other processes
// allocate on the same GPU (cudaMemGetInfo is device-wide). Plain header.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

int64_t device_buffer_bytes();

}  // namespace dsinfer::cuda
