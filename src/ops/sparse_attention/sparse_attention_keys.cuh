// Device helpers shared by the fp32 (sparse_attention.cu) and tensor-core (sparse_attention_tc.cu) kernels: the
// key list of a token (window rows, then compressed entries) and the inverse RoPE of the output.
#pragma once
#include "cuda/ops_device.cuh"
#include "ops/sparse_attention/sparse_attention_launch.h"

namespace dsinfer::ops::cuda::detail {

struct TokenKeys {
  int64_t p, lo, nwin, ncomp, start, t0;
  int32_t slot;
  const int32_t* table;
};

__device__ __forceinline__ TokenKeys token_keys(const StepDevice& st, const SparseAttentionCudaParams& prm, int64_t t) {
  TokenKeys k;
  k.p = st.pos[t];
  k.lo = k.p - prm.window + 1 > 0 ? k.p - prm.window + 1 : 0;
  k.nwin = k.p - k.lo + 1;
  k.ncomp = prm.m == 0 ? 0 : (prm.topk_idx ? prm.topk : (k.p + 1) / prm.m);
  const int32_t s = st.seq_of_token[t];
  k.start = st.start_pos[s];
  k.t0 = st.cu_seqlens[s];
  k.slot = st.slot[s];
  k.table = st.block_tables + int64_t(s) * st.table_stride;
  return k;
}

// Row of key number `idx` of token t (nullptr: no key, e.g. an indexer pick of -1).
__device__ __forceinline__ const float* key_row(const TokenKeys& k, const LayerStateView& v,
                                                const SparseAttentionCudaParams& prm, const float* kv_new, int64_t t,
                                                int64_t idx) {
  if (idx < k.nwin) {
    const int64_t q = k.lo + idx;
    if (q >= k.start) return kv_new + (k.t0 + (q - k.start)) * prm.head_dim;
    return v.ring_row(k.slot, q);
  }
  const int64_t c = idx - k.nwin;
  const int64_t j = prm.topk_idx ? int64_t(prm.topk_idx[t * prm.topk + c]) : c;
  if (j < 0 || j >= (k.p + 1) / prm.m) return nullptr;
  return v.entry(k.table, j);
}

// Inverse RoPE of the channel pair (d, d+1) (d even) of an output head vector at position p.
__device__ __forceinline__ void out_rope_pair(float& a, float& b, int64_t d, const SparseAttentionCudaParams& prm,
                                              int64_t p) {
  const int64_t rs = prm.head_dim - prm.rope_dim;
  if (prm.rope_dim > 0 && d >= rs) {
    float c, s;
    dsinfer::cuda::dev::rope_cos_sin(prm.inv_freq[(d - rs) / 2], p, prm.attention_factor, true, c, s);
    dsinfer::cuda::dev::rope_rotate(a, b, c, s);
  }
}

// Inverse RoPE of the four channels d..d+3 (pairs never straddle a float4).
__device__ __forceinline__ void out_rope(float (&e)[4], int64_t d, const SparseAttentionCudaParams& prm, int64_t p) {
  out_rope_pair(e[0], e[1], d, prm, p);
  out_rope_pair(e[2], e[3], d + 2, prm, p);
}

}  // namespace dsinfer::ops::cuda::detail
