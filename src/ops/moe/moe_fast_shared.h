// The MoE's shared expert inside the fast (decode) kernels of moe_fast.cu: its FP8 weights streamed by extra work items
// of the routed kernels' grid (decoded like the FP4 ones, moe_fast_common.h e4m3_pair_bits), so no second kernel
// queues behind the routed experts, which hold every SM slot (bench/NOTES.md "Session 17 — MoE decode"). Host code
// without CUDA types. moe_shared_fused is the plan's choice (defined in moe_plan.cpp beside the other MoE choices).
#pragma once
#include <cstdint>

#include "ops/moe/moe_launch.h"  // MoeFastArgs, MoeExpertsDevice, MoeSharedDevice
#include "ops/moe/moe_plan.h"    // MoePath

namespace dsinfer::ops::cuda {

// From kMoeSharedFusedMinT to kMoeSharedFusedMaxT tokens MoePath::Fast runs the shared expert inside the decode
// kernels (ceil(T / 8) extra grid rows, each streaming the shared weights for 8 tokens), otherwise on the side stream
// through gemm_cuda. Measured on the H200 (bench/NOTES.md "Session 17 — MoE decode", moe_cuda per V4-Flash layer,
// fused vs side stream): T = 1 66.1 vs 64.9 us, 2 99.2 vs 112.4, 8 228.5 vs 294.1, 16 378.1 vs 539.4, 128 1,168 vs
// 1,225, 160 1,239 vs 1,255, 192 1,318 vs 1,323 (a tie), 256 1,495 vs 1,464.
inline constexpr int64_t kMoeSharedFusedMinT = 2, kMoeSharedFusedMaxT = 160;

// MoePath::Fast on the decode kernels (kFast), T in [kMoeSharedFusedMinT, kMoeSharedFusedMaxT], and a shared expert
// the kernels can read: FP8_BLOCK with 128 x 128 E8M0 scales, its inter equal to the routed experts' (the same grid
// columns), its dim theirs. Otherwise the shared expert runs through gemm_cuda (side stream or in line, MoePlan).
bool moe_shared_fused(MoePath path, MoeExpertKernels experts, int64_t T, const MoeExpertsDevice& ex,
                      const MoeSharedDevice& sh);

// The shared expert's part of one fast kernel launch: grid rows [0, ceil(rows / 8)) take its tokens 8 at a time, the
// routed experts follow. Gate/up: w1 / s1 = W1, w3 / s3 = W3 ([N, K] e4m3, [N / 128, K / 128] E8M0); B rows of token t
// at xb row row0 + t (or fp32 x row t with MoeFastArgs::xf); SwiGLU (clamp `limit`) to hout row row0 + t. Down: w1 /
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

namespace detail {
// moe_fast.cu: launch_moe_fast with the shared expert's grid rows in front ("moe_fast_kernel"); the gather of the
// permuted x rows (rows < *rows_dev of max_rows) followed by `shared_rows` rows of x in token order at rows max_rows..
// ("moe_gather_kernel", max_rows + shared_rows blocks).
void launch_moe_fast_shared(bool gate_up, const MoeFastArgs& a, const MoeFastShared& s, int64_t max_active,
                            void* stream);
void launch_moe_gather_shared(const float* x, const int32_t* perm_token, const int32_t* rows_dev, int64_t max_rows,
                              int64_t shared_rows, int64_t K, uint16_t* xb, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
