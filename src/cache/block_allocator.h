// BlockAllocator: a fixed pool of equal-size blocks with reference counts. Freed blocks go on a LIFO free
// list (deterministic reuse order, recently used memory first). Reference counts let a later prefix cache
// share complete blocks between sequences; a block returns to the pool when its count reaches zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsinfer::cache {

using BlockId = int32_t;

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  int32_t num_blocks() const { return int32_t(ref_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }
  BlockId allocate();              // refcount 1; -1 when the pool is empty
  void incref(BlockId b);          // b must be allocated
  bool decref(BlockId b);          // true when b went back to the pool
  int32_t refcount(BlockId b) const { return ref_[size_t(b)]; }

 private:
  std::vector<int32_t> ref_;
  std::vector<BlockId> free_;
};

}  // namespace dsinfer::cache
