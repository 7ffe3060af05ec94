// Sparse attention decode over DeepSeek-V4's KV storage format (FP8 NoPE + bf16 RoPE rows, ops/kv_format): the
// semantics of sparse_attention.h (K = V, s = q.k * scale, softmax over the keys plus the per-head sink logit,
// o = sum p_j k_j) with each key row decoded from its cache bytes, then the inverse RoPE of the output's trailing
// rope_dim channels at the token's position (the contract of sparse_attention_cuda.h's output). Keys come from two
// explicit lists per token (SparseAttentionFp8Params::keys, FlashMLA's indices + extra indices); -1 entries and
// entries past a list's length are no key.
#pragma once
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"  // SparseAttentionFp8Params

namespace dsinfer::ops {

// CPU reference: every pointer of p and q / out host memory; q [T, heads, 512] (fp32 or bf16 bits), out the same
// shape in fp32. Decodes with kv_decode_row_ref, attends with sparse_attention_ref (double), rotates with
// rope_apply_ref.
void sparse_attention_fp8_ref(const cuda::SparseAttentionFp8Params& p, const void* q, float* out);

}  // namespace dsinfer::ops
