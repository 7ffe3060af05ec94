// BlockAllocator (see header). Misuse (decref of a free block) is a programming error, caught by assert.
#include "cache/block_allocator.h"

#include <cassert>

namespace dsinfer::cache {

BlockAllocator::BlockAllocator(int32_t num_blocks) : ref_(size_t(num_blocks), 0) {
  free_.reserve(size_t(num_blocks));
  // Highest id at the bottom so that a fresh pool hands out 0, 1, 2, ...
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

BlockId BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  BlockId b = free_.back();
  free_.pop_back();
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
  free_.push_back(b);
  return true;
}

}  // namespace dsinfer::cache
