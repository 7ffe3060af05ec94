// BlockAllocator: a fixed pool of equal-size blocks with reference counts. Freed blocks go on a LIFO free
// list (deterministic reuse order, recently used memory first). Reference counts let a later prefix cache
// share complete blocks between sequences; a block returns to the pool when its count reaches zero.
// Partitions (DP attention, docs/multi_gpu.md): with parts > 1 the ids are split into parts equal ranges, block b in
// part b / (num_blocks / parts), each with its own free list (a rank's state memory holds only its part).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsinfer::cache {

using BlockId = int32_t;

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks, int32_t parts = 1);  // num_blocks % parts == 0

  int32_t num_blocks() const { return int32_t(ref_.size()); }
  int32_t num_free() const { return num_free_; }
  int32_t num_free(int32_t part) const { return int32_t(free_[size_t(part)].size()); }
  int32_t parts() const { return int32_t(free_.size()); }
  int32_t part_of(BlockId b) const { return per_part_ > 0 ? b / per_part_ : 0; }
  BlockId allocate(int32_t part = 0);  // refcount 1; -1 when the part's pool is empty
  void incref(BlockId b);          // b must be allocated
  bool decref(BlockId b);          // true when b went back to the pool
  int32_t refcount(BlockId b) const { return ref_[size_t(b)]; }

 private:
  std::vector<int32_t> ref_;
  std::vector<std::vector<BlockId>> free_;  // per part
  int32_t per_part_ = 0, num_free_ = 0;
};

}  // namespace dsinfer::cache
