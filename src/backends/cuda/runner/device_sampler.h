// CudaRunner's device sampling buffers (sampling_runner_cuda.cpp). Two sets, used in turn, so that with asynchronous
// steps the sampling of step t+1 is launched while the host still reads step t's results: each set holds the
// pinned staging of the packed rows (one upload) and of the results (one download), their device copies and an
// event that marks the results downloaded. The sampler's work rows are shared (used in stream order). The ids of
// the most recent launch feed the next step's token fills (token_fill_cuda.h). Grown, never shrunk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/device_buffer.h"
#include "ops/sampling/sampling.h"

namespace dsinfer::backends {

struct SamplerSet {
  SamplerSet() = default;
  SamplerSet(const SamplerSet&) = delete;
  SamplerSet& operator=(const SamplerSet&) = delete;
  ~SamplerSet();

  uint8_t* host_in = nullptr;  // pinned: descriptions | entries | mask words
  size_t host_in_bytes = 0;
  ops::SampleRowOut* host_out = nullptr;  // pinned results
  size_t host_out_rows = 0;
  cuda::DeviceBuffer<uint8_t> dev_in;
  cuda::DeviceBuffer<ops::SampleRowOut> dev_out;
  void* done = nullptr;  // cudaEvent_t: results downloaded
  int64_t rows = 0;      // rows of its last launch
  bool outstanding = false;
};

// Device idle time between steps (RunnerDiagnostics::set_step_events): an event pair per step, recorded at the start
// of its device work and after its sampling results, in a ring (at most two steps are outstanding).
struct StepEvents {
  StepEvents() = default;
  StepEvents(const StepEvents&) = delete;
  StepEvents& operator=(const StepEvents&) = delete;
  ~StepEvents();
  static constexpr int kRing = 4;
  bool on = false;
  void* start[kRing] = {};  // cudaEvent_t
  void* end[kRing] = {};
  int64_t started = 0, ended = 0, counted = 0;  // steps whose start / end was recorded / whose times were summed
  int64_t steps = 0;
  double busy_ms = 0, idle_ms = 0;
};

struct DeviceSamplerBuffers {
  SamplerSet set[2];
  int next = 0;      // the set the next launch uses
  int oldest = 0;    // the set the next wait reads
  int last = -1;     // the set of the most recent launch (token fills read its dev_out)
  int outstanding = 0;
  cuda::DeviceBuffer<float> work;
  bool defer_logits = false;  // set by begin_sampled_step: step() leaves the logits on the device
  int64_t logits_rows = -1;   // logits rows the last begin_sampled_step left on the device (-1: none)
  StepEvents events;
  ~DeviceSamplerBuffers();
};

}  // namespace dsinfer::backends
