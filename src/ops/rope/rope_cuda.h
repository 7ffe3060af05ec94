// CUDA fused per-head norm + partial interleaved RoPE (semantics of rmsnorm_ref then rope_apply_ref) for the
// attention query ([T, H, head_dim], unweighted norm), the window kv ([T, 1, head_dim], kv_norm weights), the
// indexer query ([T, Hi, index_head_dim], no norm) and the inverse RoPE of the attention output, with the
// epilogues that follow them fused (HeadNormRopeParams: bf16 rounding of the rotated channels, FP8 block
// simulation of the NoPE channels). All pointers are device pointers; x is updated in place, or only read where
// HeadNormRopeParams::out_bf16 takes the result as bf16 (the split-block sparse prefill kernel's query).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/rope/rope_launch.h"  // HeadNormRopeParams

namespace dsinfer::ops::cuda {

// x: [rows, heads, dim] contiguous fp32, 16-byte aligned; pos: [rows] absolute positions (int64).
// One warp per vector, 8 vectors per block of 256 threads.
Status head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream);

// head_norm_rope(a, xa) and head_norm_rope(b, xb) in one launch (the query and the window kv of a layer: one
// launch instead of two at decode). Same positions; xa and xb must not overlap. Each vector's bits are those of
// the separate calls.
Status head_norm_rope_pair(const HeadNormRopeParams& a, float* xa, const HeadNormRopeParams& b, float* xb,
                           const int64_t* pos, void* stream);

}  // namespace dsinfer::ops::cuda
