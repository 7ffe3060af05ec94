// Shared fixture of the DeepSeek-V4.1 GPU parity tests: a hand-made state of one KV-source layer (frontier in the
// slot, compressed entries + indexer keys in the token blocks) on the host and the device.
#pragma once
#include "attn_test_util.h"

namespace dsinfer::cuda::test {

struct V41State {
  int64_t r, d, di, epb, frontier_rows;
  std::vector<float> slots, blocks;
  DeviceBuffer<float> dslots, dblocks;
  V41State(int64_t ratio, int64_t d_, int64_t di_, int64_t block_size, int32_t num_slots, int32_t num_blocks, uint32_t seed)
      : r(ratio), d(d_), di(di_), epb(block_size / ratio), frontier_rows(ratio + 1) {
    slots = random_vec(size_t(num_slots * frontier_rows * 2 * d), seed);
    blocks = random_vec(size_t(num_blocks * epb * (d + di)), seed + 1);
  }
  void upload() {
    dslots = to_device(slots);
    dblocks = to_device(blocks);
  }
  ops::LayerStateView view(float* s, float* b) const {
    ops::LayerStateView v;
    v.slots = s;
    v.slot_stride = frontier_rows * 2 * d;
    v.blocks = b;
    v.block_stride = epb * (d + di);
    v.head_dim = d;
    v.frontier_offset = 0;
    v.frontier_rows = frontier_rows;
    v.frontier_width = 2 * d;
    v.entries_offset = 0;
    v.entries_per_block = epb;
    v.index_keys_offset = epb * d;
    v.index_head_dim = di;
    return v;
  }
  ops::LayerStateView host() { return view(slots.data(), blocks.data()); }
  ops::LayerStateView device() { return view(dslots.data(), dblocks.data()); }
};

inline double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace dsinfer::cuda::test
