// CUDA fused per-head norm + partial interleaved RoPE (semantics of rmsnorm_ref then rope_apply_ref) for the
// attention query ([T, H, head_dim], unweighted norm), the window kv ([T, 1, head_dim], kv_norm weights), the
// indexer query ([T, Hi, index_head_dim], no norm) and the inverse RoPE of the attention output. All pointers are
// device pointers; x is updated in place.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/rope/rope_launch.h"  // HeadNormRopeParams

namespace dsinfer::ops::cuda {

// x: [rows, heads, dim] contiguous fp32, 16-byte aligned; pos: [rows] absolute positions (int64).
// One warp per vector, 8 vectors per block of 256 threads.
Status head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream);

}  // namespace dsinfer::ops::cuda
