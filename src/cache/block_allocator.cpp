// BlockAllocator (see header). Misuse (decref of a free block) is a programming error, caught by assert.
#include "cache/block_allocator.h"

#include <cassert>

namespace dsinfer::cache {

BlockAllocator::BlockAllocator(int32_t num_blocks, int32_t parts)
    : ref_(size_t(num_blocks), 0), free_(size_t(parts < 1 ? 1 : parts)) {
  assert(num_blocks % int32_t(free_.size()) == 0);
  per_part_ = num_blocks / int32_t(free_.size());
  // Highest id at the bottom so that a fresh pool hands out 0, 1, 2, ...
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_[size_t(part_of(b))].push_back(b);
  num_free_ = num_blocks;
}

BlockId BlockAllocator::allocate(int32_t part) {
  auto& f = free_[size_t(part)];
  if (f.empty()) return -1;
  BlockId b = f.back();
  f.pop_back();
  --num_free_;
  ref_[size_t(b)] = 1;
  return b;
}

void BlockAllocator::incref(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  ++ref_[size_t(b)];
}

bool BlockAllocator::decref(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  if (--ref_[size_t(b)] > 0) return false;
  free_[size_t(part_of(b))].push_back(b);
  ++num_free_;
  return true;
}

}  // namespace dsinfer::cache
