// Device helpers shared by the indexer's kernels (indexer.cu: scores; indexer_select.cu: top-k).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {

// Compressed entries a token at position pos sees (ratio m), at most max_visible.
__device__ __forceinline__ int64_t idx_visible(int64_t pos, int64_t m, int64_t max_visible) {
  const int64_t n = (pos + 1) / m;
  return n < max_visible ? n : max_visible;
}

}  // namespace dsinfer::ops::cuda::detail
