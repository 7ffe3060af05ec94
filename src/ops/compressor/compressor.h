// Token-level KV compressor (architecture notes §5): every `m` tokens pool into one entry by a per-channel
// softmax over window slots of the gate (plus the learned position-in-window bias `ape`). CSA (overlap) pools
// 2m slots: the first half of the previous window's projections and the second half of the current one's.
// This op does the incremental, one-token-at-a-time state machine (official decode semantics), which gives
// identical entries for any split of a sequence into chunks. Norm, RoPE and quantization simulation of an
// emitted entry are done by the caller.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops {

struct CompressorParams {
  int64_t m = 4;          // compress ratio (window length)
  bool overlap = false;   // CSA: 2m-slot overlapping windows; projections are 2*d wide
  int64_t d = 0;          // entry width (head_dim, or index_head_dim for the indexer's compressor)
  const float* ape = nullptr;  // [m, c*d], c = overlap ? 2 : 1
  int64_t c() const { return overlap ? 2 : 1; }
};

// Per-sequence frontier: rows are token slots ([0,m) previous window for CSA, then the current window).
struct CompressorState {
  std::vector<float> kv;     // [c*m, c*d], reset 0
  std::vector<float> score;  // [c*m, c*d], reset -inf
  void reset(const CompressorParams& p);
};

// Feeds token at absolute position `pos` (projections kv_t, gate_t: [c*d], gate without ape). When the token
// completes a window ((pos+1) % m == 0) writes the pooled entry [d] to `out` and returns true.
bool compressor_step_ref(const CompressorParams& p, CompressorState& s, const float* kv_t, const float* gate_t,
                         int64_t pos, float* out);

}  // namespace dsinfer::ops
