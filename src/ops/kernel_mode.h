// The runner's precision mode: the one input every op's kernel-choice plan (ops/gemm/gemm_plan.h,
// ops/moe/moe_plan.h, ops/sparse_attention/sparse_attention_plan.h) starts from. Plain C++17 (shared with .cu files).
#pragma once

namespace dsinfer::ops {

// kExact: the fp32 CUDA-core kernels (check-reference; GEMMs in chunks of kGemmSkinnyMaxM rows).
// kDefault: the default kernels without the fast path's choices (the GPU drafter outside exact mode:
//   GemmPrecision::kFp32SmallM in one call, the fp32 attention kernel).
// kFast: the CUDA runner's fast path, V4 and V4.1 (cuBLASLt, the GEMV / streaming kernels, the tensor-core attention
//   kernel).
// kBatchInvariant: kernels and splits chosen from the weight / a fixed size, never from the batch.
enum class KernelMode { kExact, kDefault, kFast, kBatchInvariant };

}  // namespace dsinfer::ops
