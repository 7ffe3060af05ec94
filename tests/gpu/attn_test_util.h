// Shared fixtures of the attention-side GPU parity tests: random data, a state layout + host/device pools for a
// small hand-made config, and ragged steps (sequences with their own slot, start position, chunk length and a
// block table whose blocks are deliberately out of order).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cache/state_layout.h"
#include "cuda/gpu_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4.h"
#include "ops/state_view.h"
#include "ops/step_cuda.h"
#include "test_util.h"

namespace dsinfer::cuda::test {

// Uniform in +-[0.05, 1) * amp: random sign, never zero.
inline std::vector<float> random_vec(size_t n, uint32_t seed, float amp = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (g() & 1 ? 1.0f : -1.0f) * u(g) * amp;
  return v;
}

// Bitwise comparison that treats NaN == NaN (poisoned, never-written places on both sides).
inline bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// A config with only the fields the state layout needs. types: per layer Sliding / CSA / HCA.
inline io::ModelConfig attn_config(int64_t head_dim, int64_t rope_dim, int64_t window, int64_t index_head_dim,
                                   std::vector<io::AttnType> types, std::vector<int64_t> ratios) {
  io::ModelConfig c;
  c.head_dim = head_dim;
  c.qk_rope_head_dim = rope_dim;
  c.sliding_window = window;
  c.index_head_dim = index_head_dim;
  c.layer_types = std::move(types);
  c.compress_ratios = std::move(ratios);
  c.num_hidden_layers = int64_t(c.layer_types.size());
  c.max_position_embeddings = 1 << 20;
  return c;
}

// Host pools (the CPU reference works on them) and device copies (the kernels work on them).
struct TestState {
  cache::StateLayout L;
  std::vector<float> slots, blocks;
  DeviceBuffer<float> dslots, dblocks;

  TestState(const io::ModelConfig& cfg, int32_t num_slots, int32_t num_blocks, int64_t block_size, uint32_t seed,
            int64_t speculative_tokens = 0) {
    cache::StateCacheConfig cc;
    cc.block_size = block_size;
    cc.num_speculative_tokens = speculative_tokens;
    cc.kv_elem_bytes = 4;
    L = dsinfer::test::unwrap(cache::compute_state_layout(cfg, cc));  // a bad layout ends the test with the reason
    slots = random_vec(size_t(num_slots) * size_t(L.slot_bytes / 4), seed);
    blocks = random_vec(size_t(num_blocks) * size_t(L.block_bytes / 4), seed + 1);
  }
  void upload() {
    dslots = to_device(slots);
    dblocks = to_device(blocks);
  }
  ops::LayerStateView host_view(int64_t layer) {
    return model::layer_view(model::StatePool{&L, slots.data(), blocks.data()}, layer);
  }
  ops::LayerStateView device_view(int64_t layer) {
    return model::layer_view(model::StatePool{&L, dslots.data(), dblocks.data()}, layer);
  }
};

struct SeqSpec {
  int32_t slot;
  int64_t start, len;
};

// A ragged step: tokens grouped by sequence, positions start..start+len-1; sequence s owns blocks
// [s*nb, (s+1)*nb) in reversed order (so a wrong table lookup shows).
struct TestStep {
  std::vector<SeqSpec> seqs;
  int64_t nb = 0, T = 0;
  std::vector<int32_t> tokens, seq_of_token, cu, slot, tables;
  std::vector<int64_t> pos, start;
  DeviceBuffer<int32_t> d_tokens, d_seq, d_cu, d_slot, d_tables;
  DeviceBuffer<int64_t> d_pos, d_start;
  ops::StepDevice dev;

  TestStep(std::vector<SeqSpec> s, int64_t block_size) : seqs(std::move(s)) {
    int64_t max_end = 1;
    for (auto& q : seqs) max_end = std::max(max_end, q.start + q.len);
    nb = (max_end + block_size - 1) / block_size;
    cu.push_back(0);
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int64_t k = 0; k < seqs[i].len; ++k) {
        tokens.push_back(int32_t((seqs[i].start + k) % 97));
        pos.push_back(seqs[i].start + k);
        seq_of_token.push_back(int32_t(i));
      }
      cu.push_back(int32_t(pos.size()));
      start.push_back(seqs[i].start);
      slot.push_back(seqs[i].slot);
      for (int64_t b = 0; b < nb; ++b) tables.push_back(int32_t(int64_t(i) * nb + (nb - 1 - b)));
    }
    T = int64_t(pos.size());
    d_tokens = to_device(tokens);
    d_seq = to_device(seq_of_token);
    d_cu = to_device(cu);
    d_slot = to_device(slot);
    d_tables = to_device(tables);
    d_pos = to_device(pos);
    d_start = to_device(start);
    dev = {T, int64_t(seqs.size()), d_tokens.data(), d_pos.data(), d_seq.data(), d_cu.data(), d_start.data(),
           d_slot.data(), d_tables.data(), nb};
  }
  int32_t num_blocks() const { return int32_t(int64_t(seqs.size()) * nb); }
  const int32_t* table(size_t s) const { return tables.data() + s * size_t(nb); }
  size_t seq_index(int64_t t) const { return size_t(seq_of_token[size_t(t)]); }
};

}  // namespace dsinfer::cuda::test
