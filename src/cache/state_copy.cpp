// plan_copy_runs and copy_on_host (see state_copy.h).
#include "cache/state_copy.h"

#include <cstring>

namespace dsinfer::cache {

namespace {

bool in(int32_t i, int64_t n) { return i >= 0 && i < n; }

}  // namespace

Result<std::vector<CopyRun>> plan_copy_runs(std::span<const StateCopy> copies, const StateMemory& m) {
  using K = StateCopy::Kind;
  using D = CopyRun::Dir;
  const size_t sb = size_t(m.slot_bytes), bb = size_t(m.block_bytes);
  std::vector<CopyRun> runs;
  bool prev_mergeable = false;
  K prev_kind = K::kZeroSlot;
  for (const StateCopy& c : copies) {
    CopyRun r;
    bool ok = false, mergeable = true;  // mergeable: source and destination pools differ
    switch (c.kind) {
      case K::kSlotToSnapshot:
        ok = in(c.src, m.num_slots) && in(c.dst, m.num_snapshots);
        if (ok) r = {D::kLocal, m.snapshots + size_t(c.dst) * sb, m.slots + size_t(c.src) * sb, sb};
        break;
      case K::kSnapshotToSlot:
        ok = in(c.src, m.num_snapshots) && in(c.dst, m.num_slots);
        if (ok) r = {D::kLocal, m.slots + size_t(c.dst) * sb, m.snapshots + size_t(c.src) * sb, sb};
        break;
      case K::kBlockToBlock:
        ok = in(c.src, m.num_blocks) && in(c.dst, m.num_blocks);
        mergeable = false;
        if (ok) r = {D::kLocal, m.blocks + size_t(c.dst) * bb, m.blocks + size_t(c.src) * bb, bb};
        break;
      case K::kZeroSlot:
        ok = in(c.dst, m.num_slots);
        mergeable = false;
        if (ok) r = {D::kLocal, m.slots + size_t(c.dst) * sb, nullptr, sb};
        break;
      case K::kBlockToHost:
        ok = in(c.src, m.num_blocks) && in(c.dst, m.num_host_blocks);
        if (ok) r = {D::kToHost, m.host_blocks + size_t(c.dst) * bb, m.blocks + size_t(c.src) * bb, bb};
        break;
      case K::kHostToBlock:
        ok = in(c.src, m.num_host_blocks) && in(c.dst, m.num_blocks);
        if (ok) r = {D::kToDevice, m.blocks + size_t(c.dst) * bb, m.host_blocks + size_t(c.src) * bb, bb};
        break;
    }
    if (!ok) return Status::errorf("state copy {} -> {} (kind {}) is out of range", c.src, c.dst, int(c.kind));
    if (r.bytes == 0) continue;
    CopyRun* p = runs.empty() ? nullptr : &runs.back();
    if (p && prev_mergeable && mergeable && prev_kind == c.kind && p->dst + p->bytes == r.dst && p->src + p->bytes == r.src) {
      p->bytes += r.bytes;
    } else {
      runs.push_back(r);
    }
    prev_mergeable = mergeable;
    prev_kind = c.kind;
  }
  return runs;
}

Status copy_on_host(std::span<const StateCopy> copies, const StateMemory& mem, const std::string& who) {
  auto runs = plan_copy_runs(copies, mem);
  if (!runs) return Status::error(who + ": " + runs.status().message());
  for (const CopyRun& r : *runs) {
    if (r.src)
      std::memcpy(r.dst, r.src, r.bytes);
    else
      std::memset(r.dst, 0, r.bytes);
  }
  return Status::ok();
}

}  // namespace dsinfer::cache
