// The prefix cache's host tier on the CUDA runner: page-locked host memory for spilled blocks (so that
// cudaMemcpyAsync really is asynchronous and ordered on the runner's stream), and the issuing of planned state
// copies (cache::plan_copy_runs) on a stream. Implemented in prefix_cache_cuda.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "cache/state_copy.h"
#include "core/status.h"
#include "cuda/pinned_buffer.h"

namespace dsinfer::backends {

using PinnedHostBuffer = cuda::PinnedHostBuffer;

// Issues every run on `stream` (a cudaStream_t) with cudaMemcpyAsync / cudaMemsetAsync: kLocal device to device,
// kToHost device to host, kToDevice host to device. Nothing waits for them.
Status issue_copy_runs(std::span<const cache::CopyRun> runs, void* stream);

}  // namespace dsinfer::backends
