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

cache::StateMemory CudaRunner::state_memory() {
  const size_t sb = size_t(layout_.slot_bytes), bb = size_t(layout_.block_bytes);
  auto count = [](size_t bytes, size_t unit) { return unit ? int64_t(bytes / unit) : int64_t(0); };
  return cache::StateMemory{slots_.data(), blocks_.data(), snapshots_.data(), host_blocks_.data(),
                            count(slots_.size(), sb), count(blocks_.size(), bb), count(snapshots_.size(), sb),
                            count(host_blocks_.size(), bb), layout_.slot_bytes, layout_.block_bytes};
}

Status CudaRunner::copy_state(std::span<const cache::StateCopy> copies) {
  const cache::StateMemory mem = state_memory();
  return issue_copies(copies, mem.snapshots, mem.num_snapshots, mem.host_blocks, mem.num_host_blocks);
}

Status CudaRunner::copy_state_with_pools(std::span<const cache::StateCopy> copies, uint8_t* snapshots,
                                         int64_t num_snapshots, uint8_t* host_blocks, int64_t num_host_blocks) {
  DSI_RETURN_IF_ERROR(issue_copies(copies, snapshots, num_snapshots, host_blocks, num_host_blocks));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));  // the next copy may be another rank's
  return Status::ok();
}

Status CudaRunner::copy_state_with_host_tier(std::span<const cache::StateCopy> copies, uint8_t* host_blocks,
                                             int64_t num_host_blocks) {
  const cache::StateMemory own = state_memory();
  return copy_state_with_pools(copies, own.snapshots, own.num_snapshots, host_blocks, num_host_blocks);
}

Status CudaRunner::issue_copies(std::span<const cache::StateCopy> copies, uint8_t* snapshots, int64_t num_snapshots,
                                uint8_t* host_blocks, int64_t num_host_blocks) {
  if (copies.empty()) return Status::ok();
  DSI_RETURN_IF_ERROR(bind_device());
  cache::StateMemory mem = state_memory();  // with the snapshot and host pools the caller names
  mem.snapshots = snapshots;
  mem.num_snapshots = num_snapshots;
  mem.host_blocks = host_blocks;
  mem.num_host_blocks = num_host_blocks;
  auto runs = cache::plan_copy_runs(copies, mem);
  if (!runs) return Status::error("cuda runner: " + runs.status().message());
  return issue_copy_runs(*runs, stream_);
}

Status CudaRunner::region_copies(std::span<const cache::StateRegion> regions, uint8_t* host, size_t bytes,
                                 cache::CopyRun::Dir dir) {
  DSI_RETURN_IF_ERROR(bind_device());
  auto runs = cache::plan_region_runs(regions, state_memory(), host, bytes, dir);
  if (!runs) return Status::error("cuda runner: " + runs.status().message());
  DSI_RETURN_IF_ERROR(issue_copy_runs(*runs, stream_));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

// P/D state export / import: the blocks and snapshots are the runner's whole per-sequence state (slots_, blocks_ and
// snapshots_ in the layout's rows, fp32 or FP8; no per-sequence state lives elsewhere on the device), so the CPU
// runner's region runs move all of it (tests/gpu/test_pd_transfer_gpu.cpp). The caller's buffer is pageable host
// memory, read or reused when the call returns: the copies are waited for.
Status CudaRunner::read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) {
  return region_copies(regions, out.data(), out.size(), cache::CopyRun::Dir::kToHost);
}

Status CudaRunner::write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) {
  return region_copies(regions, const_cast<uint8_t*>(in.data()), in.size(), cache::CopyRun::Dir::kToDevice);
}

}  // namespace dsinfer::backends
