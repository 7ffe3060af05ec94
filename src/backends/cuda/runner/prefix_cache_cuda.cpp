// CudaRunner prefix-cache state copies (ModelRunner::bind_snapshots / bind_host_blocks / copy_state): the CPU
// runner's copies (cache::plan_copy_runs: same bounds checks, adjacent blocks merged into one transfer), issued
// with cudaMemcpyAsync / cudaMemsetAsync on the runner's stream, so they are ordered before the next step's
// kernels (and before decode-graph replays, which read the same slot / block memory). Host-tier blocks live in
// pinned memory; the host never touches it, so stream order is the only ordering needed.
#include "backends/cuda/runner/cuda_runner_impl.h"
#include "backends/cuda/runner/host_tier_cuda.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

Status issue_copy_runs(std::span<const cache::CopyRun> runs, void* stream) {
  cudaStream_t cs = static_cast<cudaStream_t>(stream);
  for (const cache::CopyRun& r : runs) {
    if (!r.src) {
      DSI_CUDA_TRY(cudaMemsetAsync(r.dst, 0, r.bytes, cs));
      continue;
    }
    const cudaMemcpyKind kind = r.dir == cache::CopyRun::Dir::kToHost     ? cudaMemcpyDeviceToHost
                                : r.dir == cache::CopyRun::Dir::kToDevice ? cudaMemcpyHostToDevice
                                                                          : cudaMemcpyDeviceToDevice;
    DSI_CUDA_TRY(cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, cs));
  }
  return Status::ok();
}

Status CudaRunner::bind_snapshots(int32_t num_snapshots) {
  if (num_snapshots < 0) return Status::errorf("cuda runner: {} snapshots", num_snapshots);
  if (num_snapshots == 0 || layout_.slot_bytes == 0) return Status::ok();
  DSI_RETURN_IF_ERROR(bind_device());
  return snapshots_.alloc(size_t(num_snapshots) * size_t(layout_.slot_bytes), "prefix-cache snapshots");
}

Status CudaRunner::bind_host_blocks(int32_t num_host_blocks) {
  if (num_host_blocks < 0) return Status::errorf("cuda runner: {} host blocks", num_host_blocks);
  return host_blocks_.alloc(size_t(num_host_blocks) * size_t(layout_.block_bytes), "the prefix-cache host tier");
}

Status CudaRunner::copy_state(std::span<const cache::StateCopy> copies) {
  if (copies.empty()) return Status::ok();
  DSI_RETURN_IF_ERROR(bind_device());
  const size_t sb = size_t(layout_.slot_bytes), bb = size_t(layout_.block_bytes);
  auto count = [](size_t bytes, size_t unit) { return unit ? int64_t(bytes / unit) : int64_t(0); };
  const cache::StateMemory mem{slots_.data(), blocks_.data(), snapshots_.data(), host_blocks_.data(),
                               count(slots_.size(), sb), count(blocks_.size(), bb), count(snapshots_.size(), sb),
                               count(host_blocks_.size(), bb), layout_.slot_bytes, layout_.block_bytes};
  auto runs = cache::plan_copy_runs(copies, mem);
  if (!runs) return Status::error("cuda runner: " + runs.status().message());
  return issue_copy_runs(*runs, stream_);
}

}  // namespace dsinfer::backends
