// Token-level KV compressor (architecture notes §5): every `m` tokens pool into one entry by a per-channel
// softmax over window slots of the gate (plus the learned position-in-window bias `ape`). CSA (overlap) pools
// 2m slots: the first half [0,d) of the previous window's projections and the second half [d,2d) of the
// current window's; window 0 has no previous window. This op is the incremental, one-token-at-a-time state
// machine (official decode semantics) over a frontier of rows indexed by position modulo the row count (the
// state cache layout, ops/state_view.h), which gives identical entries for any split of a sequence into
// chunks. Norm, RoPE and quantization simulation of an emitted entry are done by the caller.
#pragma once
#include <cstdint>

namespace dsinfer::ops {

struct CompressorParams {
  int64_t m = 4;               // compress ratio (window length)
  bool overlap = false;        // CSA: 2m-slot overlapping windows; projections are 2*d wide
  int64_t d = 0;               // entry width (head_dim, or index_head_dim for the indexer's compressor)
  const float* ape = nullptr;  // [m, c*d], c = overlap ? 2 : 1
  int64_t frontier_rows = 0;   // >= c*m
  int64_t c() const { return overlap ? 2 : 1; }
  int64_t row_width() const { return 2 * c() * d; }  // kv then gate
};

// Feeds the token at absolute position `pos` (projections kv_t, gate_t: [c*d], gate without ape) into the
// frontier (base of [frontier_rows, 2*c*d] floats). When the token completes a window ((pos+1) % m == 0),
// writes the pooled entry [d] to `out` and returns true.
bool compressor_step_ref(const CompressorParams& p, float* frontier, const float* kv_t, const float* gate_t,
                         int64_t pos, float* out);

}  // namespace dsinfer::ops
