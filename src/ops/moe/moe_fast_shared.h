// The MoE's shared expert inside the fast (decode) kernels of moe_fast.cu: its FP8 weights streamed by extra work items
// of the routed kernels' grid (decoded like the FP4 ones, moe_fast_common.h e4m3_pair_bits), so no second kernel
// queues behind the routed experts, which hold every SM slot (bench/NOTES.md "Session 17 — MoE decode"). Host code
// without CUDA types. When the kernels take the shared expert is the plan's choice (moe_plan.h moe_shared_fused).
#pragma once
#include <cstdint>

#include "ops/moe/moe_launch.h"  // MoeFastArgs

namespace dsinfer::ops::cuda {

// The shared expert's part of one fast kernel launch: grid rows [0, ceil(rows / 8)) take its tokens 8 at a time, the
// routed experts follow. Gate/up: w1 / s1 = W1, w3 / s3 = W3 ([N, K] e4m3, [N / 128, K / 128] E8M0); B rows of token t
// at xb row t (or fp32 x row t with MoeFastArgs::xf); SwiGLU (clamp `limit`) to hout row row0 + t. Down: w1 /
// s1 = W2; B rows at xb (= the gate/up kernel's hout) row row0 + t; fp32 output `out` [rows, N]. rows = 0: none.
struct MoeFastShared {
  const void* w1 = nullptr;
  const void* s1 = nullptr;
  const void* w3 = nullptr;
  const void* s3 = nullptr;
  int64_t rows = 0, row0 = 0;
  float limit = 0.0f;
  float* out = nullptr;
};

// The decode kernels' variant (the same bits; moe_plan.h moe_fast_variant picks it). kSession18: each bf16 pair of
// FP4 weights by its own shifts and masks (moe_fast_common.h fp4_pair_bits). kWordDecode: an FP4 word's four pairs at
// once (fp4_word_pairs: 11 integer operations instead of ~16).
enum class MoeFastVariant { kSession18 = 0, kWordDecode = 1 };

namespace detail {
// moe_fast.cu: launch_moe_fast with the shared expert's grid rows in front ("moe_fast_kernel").
void launch_moe_fast_shared(bool gate_up, const MoeFastArgs& a, const MoeFastShared& s, int64_t max_active,
                            void* stream, MoeFastVariant variant);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
