// CudaRunner's device sampling buffers (sampling_runner_cuda.cpp): pinned staging of the packed rows (one upload
// per step) and of the results (one download), the device copies and the sampler's work rows. Grown, never shrunk.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/device_buffer.h"
#include "ops/sampling/sampling.h"

namespace dsinfer::backends {

struct DeviceSamplerBuffers {
  DeviceSamplerBuffers() = default;
  DeviceSamplerBuffers(const DeviceSamplerBuffers&) = delete;
  DeviceSamplerBuffers& operator=(const DeviceSamplerBuffers&) = delete;
  ~DeviceSamplerBuffers();

  uint8_t* host_in = nullptr;  // pinned: descriptions | entries | mask words
  size_t host_in_bytes = 0;
  ops::SampleRowOut* host_out = nullptr;  // pinned results
  size_t host_out_rows = 0;
  cuda::DeviceBuffer<uint8_t> dev_in;
  cuda::DeviceBuffer<ops::SampleRowOut> dev_out;
  cuda::DeviceBuffer<float> work;
  bool defer_logits = false;  // set by begin_sampled_step: step() leaves the logits on the device
  int64_t logits_rows = -1;   // logits rows the last begin_sampled_step left on the device (-1: none)
};

}  // namespace dsinfer::backends
