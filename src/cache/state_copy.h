// StateCopy: a copy of prefix-cache state the runner performs between steps (ModelRunner::copy_state), and the
// one place that turns a list of them into byte ranges (bounds-checked, adjacent copies merged), so that the CPU
// runner (memcpy) and the CUDA runner (cudaMemcpyAsync on its stream) do exactly the same copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsinfer::cache {

// Slots and snapshots are slot_bytes long, device and host-tier blocks block_bytes. The host tier holds blocks
// the device pool evicted (kBlockToHost, "spill") until a hit brings them back (kHostToBlock, "restore").
struct StateCopy {
  enum class Kind : uint8_t { kSlotToSnapshot, kSnapshotToSlot, kBlockToBlock, kZeroSlot, kBlockToHost, kHostToBlock };
  Kind kind = Kind::kZeroSlot;
  int32_t src = -1, dst = -1;  // kZeroSlot: dst only
};

// The runner's state memory: base pointers and counts (host_blocks lives in host memory, the rest wherever the
// runner keeps its state; a null base with count 0 is an absent pool).
struct StateMemory {
  uint8_t *slots = nullptr, *blocks = nullptr, *snapshots = nullptr, *host_blocks = nullptr;
  int64_t num_slots = 0, num_blocks = 0, num_snapshots = 0, num_host_blocks = 0;
  int64_t slot_bytes = 0, block_bytes = 0;
};

// One contiguous copy (src == nullptr: zero-fill). kToHost / kToDevice cross the host tier's boundary; kLocal
// stays within the runner's state memory.
struct CopyRun {
  enum class Dir : uint8_t { kLocal, kToHost, kToDevice };
  Dir dir = Dir::kLocal;
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  size_t bytes = 0;
};

// The runs for `copies`, in order. A copy that continues the previous one (same kind, source and destination
// both directly after it, in different pools so that they cannot overlap) extends its run: spills and restores of
// consecutive blocks become one transfer. Fails, naming the copy, when an id is out of range.
Result<std::vector<CopyRun>> plan_copy_runs(std::span<const StateCopy> copies, const StateMemory& mem);

// P/D export / import (engine state transfer, cache/state_blob.h): whole token blocks and snapshots between the
// runner's state memory and a caller's host buffer, packed back to back in the order given.
struct StateRegion {
  enum class Kind : uint8_t { kBlock, kSnapshot };
  Kind kind = Kind::kBlock;
  int32_t id = -1;
};
// The runs moving `regions` to (kToHost) or from (kToDevice) `host`, which must be exactly as long as the regions
// together. Fails, naming the region, when an id is out of range or the buffer's length differs.
Result<std::vector<CopyRun>> plan_region_runs(std::span<const StateRegion> regions, const StateMemory& mem,
                                              uint8_t* host, size_t host_bytes, CopyRun::Dir dir);

// Plans `copies` and carries them out with memcpy / memset: for state that lives in host memory (the CPU runners).
// Errors carry `who` ("cpu runner: ...").
Status copy_on_host(std::span<const StateCopy> copies, const StateMemory& mem, const std::string& who);
// plan_region_runs carried out with memcpy (state in host memory).
Status regions_on_host(std::span<const StateRegion> regions, const StateMemory& mem, uint8_t* host, size_t host_bytes,
                       CopyRun::Dir dir, const std::string& who);

}  // namespace dsinfer::cache
