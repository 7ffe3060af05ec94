// CudaRunner prefix-cache state copies (ModelRunner::bind_snapshots / copy_state): the CPU runner's copies, done
// device-to-device with cudaMemcpyAsync / cudaMemsetAsync on the runner's stream, so they are ordered before the
// next step's kernels (and before decode-graph replays, which read the same slot / block memory).
#include "backends/cuda/cuda_runner_impl.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

Status CudaRunner::bind_snapshots(int32_t num_snapshots) {
  if (num_snapshots < 0) return Status::errorf("cuda runner: {} snapshots", num_snapshots);
  if (num_snapshots == 0 || layout_.slot_bytes == 0) return Status::ok();
  return snapshots_.alloc(size_t(num_snapshots) * size_t(layout_.slot_bytes), "prefix-cache snapshots");
}

Status CudaRunner::copy_state(std::span<const cache::StateCopy> copies) {
  if (copies.empty()) return Status::ok();
  using K = cache::StateCopy::Kind;
  const size_t sb = size_t(layout_.slot_bytes), bb = size_t(layout_.block_bytes);
  const int64_t num_slots = sb ? int64_t(slots_.size() / sb) : 0, num_blocks = bb ? int64_t(blocks_.size() / bb) : 0;
  const int64_t num_snaps = sb ? int64_t(snapshots_.size() / sb) : 0;
  auto in = [](int32_t i, int64_t n) { return i >= 0 && i < n; };
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  for (const cache::StateCopy& c : copies) {
    uint8_t* dst = nullptr;
    const uint8_t* src = nullptr;
    size_t bytes = sb;
    bool ok = false;
    switch (c.kind) {
      case K::kSlotToSnapshot:
        ok = in(c.src, num_slots) && in(c.dst, num_snaps);
        if (ok) src = slots_.data() + size_t(c.src) * sb, dst = snapshots_.data() + size_t(c.dst) * sb;
        break;
      case K::kSnapshotToSlot:
        ok = in(c.src, num_snaps) && in(c.dst, num_slots);
        if (ok) src = snapshots_.data() + size_t(c.src) * sb, dst = slots_.data() + size_t(c.dst) * sb;
        break;
      case K::kBlockToBlock:
        bytes = bb;
        ok = in(c.src, num_blocks) && in(c.dst, num_blocks);
        if (ok) src = blocks_.data() + size_t(c.src) * bb, dst = blocks_.data() + size_t(c.dst) * bb;
        break;
      case K::kZeroSlot:
        ok = in(c.dst, num_slots);
        if (ok) dst = slots_.data() + size_t(c.dst) * sb;
        break;
    }
    if (!ok)
      return Status::errorf("cuda runner: state copy {} -> {} (kind {}) is out of range", c.src, c.dst, int(c.kind));
    if (src)
      DSI_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs));
    else
      DSI_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, cs));
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
