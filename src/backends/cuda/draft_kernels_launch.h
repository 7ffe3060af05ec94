// Kernel launchers behind draft_kernels_cuda.h (no CUDA types, no Status; validated by draft_kernels_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::backends::detail {

// Keys of one query token of the drafter's window attention: ring positions [ring_lo, ring_hi) of `slot` (row
// pos % window of the layer's ring), then rows [new_lo, new_hi) of this call's kv.
struct DraftKeys {
  int32_t slot = 0, new_lo = 0, new_hi = 0, pad = 0;
  int64_t ring_lo = 0, ring_hi = 0;
};

struct DraftAttnArgs {
  const float* q = nullptr;      // [T, heads, dim]
  const float* kv = nullptr;     // [rows, dim]: this call's K=V rows
  const float* ring = nullptr;   // the layer's ring of slot 0: row (slot, p) at ring + slot*slot_stride + (p % window)*dim
  int64_t slot_stride = 0, window = 0;
  const DraftKeys* keys = nullptr;  // [T]
  const float* sinks = nullptr;     // [heads]
  float scale = 1.0f;
  int64_t T = 0, heads = 0, dim = 0, max_keys = 0;
  float* out = nullptr;  // [T, heads, dim]
};

void launch_draft_attention(const DraftAttnArgs& a, void* stream);           // draft_kernels.cu ("draft_attention_kernel")
// feats[t, l*dim + d] = mean_j hidden[rows[t], l, j, d] (float sum in stream order, then / n).
void launch_stream_mean(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream);                         // ("stream_mean_kernel")
// ring[slot[t]*slot_stride + (pos[t] % window)*dim + :dim] = kv[t] for t < T.
void launch_ring_scatter(const float* kv, const int32_t* slot, const int64_t* pos, int64_t T, int64_t dim, float* ring,
                         int64_t slot_stride, int64_t window, void* stream);  // ("ring_scatter_kernel")
// y[t] = a[t] + b[t / rep] for t < T rows of dim floats (MTP-1: per-stream h_proj plus the token's e_proj).
void launch_add_rows(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream);  // ("add_rows_kernel")

}  // namespace dsinfer::backends::detail
