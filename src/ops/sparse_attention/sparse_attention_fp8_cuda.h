// CUDA sparse attention decode over the FP8 KV storage format (semantics: sparse_attention_fp8.h). Kernel (in
// sparse_attention_fp8.cu): grid (T, ceil(heads / 64), num_splits) x 256 threads, bf16 mma.sync with fp32
// accumulation and softmax as sparse_attention_tc.cu; the key rows travel as their 584 cache bytes (cp.async ring of
// 16-key half tiles, 5 tiles in flight) and are dequantised in shared memory to an exact bf16 tile (e4m3 * 2^k and
// bf16 RoPE channels are bf16 values); q (rounded to bf16) and p (bf16) are the only roundings. num_splits > 1: the
// splits write (o, max, sum) partials and a combine kernel merges them with the sink and the inverse RoPE. The
// split count comes from plan_sparse_attention_fp8 (sparse_attention_plan.h).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"

namespace dsinfer::ops::cuda {

// Workspace floats for num_splits > 1: per (token, split, head) the unnormalised output, (max, sum) and 2 pad floats.
inline int64_t sparse_attention_fp8_workspace_floats(int64_t T, int64_t heads, int64_t num_splits) {
  return num_splits > 1 ? T * num_splits * heads * (512 + 4) : 0;
}

// q: [T, heads, 512] (fp32 or bf16, p.q_bf16); o: [T, heads, 512] fp32. Device pointers.
Status sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, void* stream);

// The key lists of the runner's FP8 state (Fp8StateKeys) for the step st over layer view v (v.fp8).
Status fp8_state_keys(const StepDevice& st, const LayerStateView& v, const Fp8StateKeys& k, void* stream);
// rows[t]: the ring row token t writes (v.ring_index), -1 when a later token of its chunk owns that row; feed to
// kv_encode with v.ring_pages() over the slot pool.
Status fp8_ring_rows(const StepDevice& st, const LayerStateView& v, int32_t* rows, void* stream);

}  // namespace dsinfer::ops::cuda
