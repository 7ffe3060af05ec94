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

Result<std::vector<CopyRun>> plan_region_runs(std::span<const StateRegion> regions, const StateMemory& m,
                                              uint8_t* host, size_t host_bytes, CopyRun::Dir dir) {
  if (dir == CopyRun::Dir::kLocal) return Status::error("state regions move to or from a host buffer, not locally");
  std::vector<CopyRun> runs;
  size_t off = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const StateRegion& g = regions[i];
    const bool block = g.kind == StateRegion::Kind::kBlock;
    const int64_t n = block ? m.num_blocks : m.num_snapshots;
    if (!in(g.id, n))
      return Status::errorf("state region {} ({} {}) is out of range (0..{})", i, block ? "block" : "snapshot", g.id, n - 1);
    const size_t bytes = size_t(block ? m.block_bytes : m.slot_bytes);
    uint8_t* state = (block ? m.blocks : m.snapshots) + size_t(g.id) * bytes;
    if (off + bytes > host_bytes)
      return Status::errorf("state region {} ends at byte {} of a {}-byte buffer", i, off + bytes, host_bytes);
    CopyRun r{dir, dir == CopyRun::Dir::kToHost ? host + off : state, dir == CopyRun::Dir::kToHost ? state : host + off,
              bytes};
    CopyRun* p = runs.empty() ? nullptr : &runs.back();
    if (p && p->dst + p->bytes == r.dst && p->src + p->bytes == r.src) p->bytes += bytes;
    else runs.push_back(r);
    off += bytes;
  }
  if (off != host_bytes) return Status::errorf("state regions hold {} bytes, the buffer {}", off, host_bytes);
  return runs;
}

Status regions_on_host(std::span<const StateRegion> regions, const StateMemory& mem, uint8_t* host, size_t host_bytes,
                       CopyRun::Dir dir, const std::string& who) {
  auto runs = plan_region_runs(regions, mem, host, host_bytes, dir);
  if (!runs) return Status::error(who + ": " + runs.status().message());
  for (const CopyRun& r : *runs) std::memcpy(r.dst, r.src, r.bytes);
  return Status::ok();
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
