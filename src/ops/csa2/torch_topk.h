// torch.topk's CPU selection (ATen TopKImpl.h: (value, index) pairs in index order, std::partial_sort when
// k * 64 <= n, else std::nth_element, comparator value_a > value_b) written out step for step as libstdc++ runs it
// (stl_heap.h __make_heap / __adjust_heap / __push_heap / __pop_heap, stl_algo.h __heap_select / __introselect /
// __unguarded_partition_pivot / __insertion_sort), so that exact ties -- frequent between bf16 scores -- resolve
// the same way on the GPU (one thread per row) as ops::torch_cpu_topk does with the standard library on the host.
// Only which pairs end in the first k places matters to the callers (they sort the indices); the CPU test
// TorchTopk.* checks the set against ops::torch_cpu_topk on tie-heavy inputs.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::ops::torch_topk {

struct Pair {
  float v;
  int32_t i;
};

DSI_HD bool greater(const Pair& a, const Pair& b) { return a.v > b.v; }
DSI_HD void swap(Pair& a, Pair& b) {
  const Pair t = a;
  a = b;
  b = t;
}

DSI_HD void push_heap(Pair* f, int64_t hole, int64_t top, Pair value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && greater(f[parent], value)) {
    f[hole] = f[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  f[hole] = value;
}

DSI_HD void adjust_heap(Pair* f, int64_t hole, int64_t len, Pair value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (greater(f[child], f[child - 1])) --child;
    f[hole] = f[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    f[hole] = f[child - 1];
    hole = child - 1;
  }
  push_heap(f, hole, top, value);
}

DSI_HD void make_heap(Pair* f, int64_t len) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    adjust_heap(f, parent, len, f[parent]);
    if (parent == 0) return;
  }
}

// The first `middle` places end up holding the selection (as a heap).
DSI_HD void heap_select(Pair* f, int64_t middle, int64_t len) {
  make_heap(f, middle);
  for (int64_t i = middle; i < len; ++i)
    if (greater(f[i], f[0])) {  // __pop_heap(first, middle, i)
      const Pair value = f[i];
      f[i] = f[0];
      adjust_heap(f, 0, middle, value);
    }
}

DSI_HD void insertion_sort(Pair* f, int64_t len) {
  for (int64_t i = 1; i < len; ++i) {
    const Pair val = f[i];
    if (greater(val, f[0])) {
      for (int64_t j = i; j > 0; --j) f[j] = f[j - 1];
      f[0] = val;
    } else {
      int64_t last = i;
      while (greater(val, f[last - 1])) {
        f[last] = f[last - 1];
        --last;
      }
      f[last] = val;
    }
  }
}

DSI_HD int64_t floor_log2(int64_t n) {
  int64_t k = 0;
  while (n > 1) {
    n >>= 1;
    ++k;
  }
  return k;
}

// std::nth_element(f, f + nth, f + len) (__introselect with depth limit 2 * floor(log2(len))).
DSI_HD void nth_element(Pair* f, int64_t nth, int64_t len) {
  if (len == 0 || nth == len) return;
  int64_t first = 0, last = len, depth = 2 * floor_log2(len);
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(f + first, nth + 1 - first, last - first);
      swap(f[first], f[nth]);
      return;
    }
    --depth;
    // __unguarded_partition_pivot: median of (first + 1, mid, last - 1) moved to first, then partition.
    const int64_t mid = first + (last - first) / 2;
    Pair* r = f + first;
    Pair *a = f + first + 1, *b = f + mid, *c = f + last - 1;
    if (greater(*a, *b)) {
      if (greater(*b, *c)) swap(*r, *b);
      else if (greater(*a, *c)) swap(*r, *c);
      else swap(*r, *a);
    } else if (greater(*a, *c)) {
      swap(*r, *a);
    } else if (greater(*b, *c)) {
      swap(*r, *c);
    } else {
      swap(*r, *b);
    }
    int64_t lo = first + 1, hi = last;
    const Pair pivot = f[first];
    while (true) {
      while (greater(f[lo], pivot)) ++lo;
      --hi;
      while (greater(pivot, f[hi])) --hi;
      if (!(lo < hi)) break;
      swap(f[lo], f[hi]);
      ++lo;
    }
    if (lo <= nth) first = lo;
    else last = lo;
  }
  insertion_sort(f + first, last - first);
}

// q [n] holds (values[j], j) in index order; afterwards q[0, min(k, n)) holds the pairs torch.topk(largest) keeps.
DSI_HD int64_t select(Pair* q, int64_t n, int64_t k) {
  if (k > n) k = n;
  if (k <= 0) return 0;
  if (k * 64 <= n) heap_select(q, k, n);  // std::partial_sort's selection (its final sort_heap moves nothing out)
  else nth_element(q, k - 1, n);
  return k;
}

}  // namespace dsinfer::ops::torch_topk
