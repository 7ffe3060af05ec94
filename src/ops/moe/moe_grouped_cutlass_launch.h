// Launchers of the CUTLASS grouped FP8 GEMM of the routed experts (moe_grouped_cutlass.cu, the only translation unit
// that includes CUTLASS / CuTe) and of the kernels around it (moe_grouped_cutlass_prep.cu). No CUDA types, no
// Status: validated by moe_cuda.cpp. Numerics (DeepSeek's block scaling, as DeepGEMM's grouped GEMMs): activations
// one e4m3 term per element with one fp32 scale per row and 128 k (s = amax / 448), FP8_BLOCK expert weights e4m3
// with one fp32 scale per 128 x 128 block (E8M0 bytes converted to fp32 first), wgmma sums of each 128-k block in
// the tensor cores' FP8 accumulator, promoted to fp32 with the product of the two scales, rounded to bf16 on output
// (half the bytes of fp32 for the GEMMs' stores and for the SwiGLU's and the combine's reads). CPU reference:
// expert_fp8_accumulate_ref (moe_fp8.h) with x_terms = h_terms = 1 and block 128; docs/kernels.md "MoE grouped FP8
// path (CUTLASS)".
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::ops::cuda {

// k per activation scale and per promoted block sum, rows and k per weight scale.
inline constexpr int kMoeCutlassBlock = 128;

// D_s = A W_s^T per expert over the permuted rows, for s < sets (gate/up: sets = 2 on the same A; down: 1).
struct MoeCutlassGemmArgs {
  int64_t experts = 0, N = 0, K = 0;    // N % 128 == 0, K % 128 == 0
  const int32_t* offsets = nullptr;     // [experts + 1]: expert e owns permuted rows [offsets[e], offsets[e+1])
  const uint8_t* a = nullptr;           // e4m3 [rows, K], row p = permuted row p
  const float* a_scale = nullptr;       // expert e's scales at a_scale + offsets[e] * K / 128: [K / 128][rows of e]
  int sets = 1;
  const void* const* w[2] = {};         // per-expert device pointers: e4m3 [N, K]
  const float* w_scale[2] = {};         // fp32 [experts][N / 128][K / 128] (moe_cutlass_scales), or null ...
  const void* const* w_scale_ptr[2] = {};  // ... per-expert fp32 [N / 128, K / 128] pointers
  void* d[2] = {};                      // bf16 [rows, N], row p = permuted row p
  // 1: 1 x 1 clusters; 2: 1 x 2 clusters (adjacent N tiles share the A tile by TMA multicast; N / 128 even). Same
  // results bitwise. Chosen by moe_cutlass_cluster_n (moe_plan.h).
  int cluster_n = 1;
};

namespace detail {
// Device bytes launch_moe_cutlass_gemm needs for up to `groups` (expert, set) groups: its argument arrays and
// CUTLASS's own workspace (per-SM tensor maps).
size_t moe_cutlass_workspace_bytes(int64_t groups);
// ws must be 256-byte aligned (CUTLASS keeps TMA descriptors in it).
// Writes the per-group arguments (problem shape from offsets, pointers, strides, scale layouts) into ws with one
// small kernel, then runs the grouped GEMM ("moe_cutlass_args_kernel", CUTLASS's GemmUniversal kernel). Null on
// success; else what CUTLASS refused (nothing was launched then, or the launch failed).
const char* launch_moe_cutlass_gemm(const MoeCutlassGemmArgs& a, void* ws, size_t ws_bytes, void* stream);

// Rows p < min(rows, offsets[experts]) of x fp32 (row perm[p], or row p when perm is null) -> e4m3 q [rows, K] and
// fp32 scales in the per-expert layout of MoeCutlassGemmArgs::a_scale ("moe_cutlass_quant_kernel"). K % 128 == 0.
void launch_moe_cutlass_quant(const float* x, const int32_t* perm, const int32_t* offsets, int64_t experts,
                              int64_t rows, int64_t K, uint8_t* q, float* s, void* stream);
// h = silu(min(g, L)) * clamp(u, -L, L) (L = limit, 0 = none) in fp32 from the bf16 g, u [rows, N], quantized like
// launch_moe_cutlass_quant ("moe_cutlass_swiglu_quant_kernel"). N % 128 == 0.
void launch_moe_cutlass_swiglu_quant(const void* g, const void* u, const int32_t* offsets, int64_t experts,
                                     int64_t rows, int64_t N, float limit, uint8_t* q, float* s, void* stream);
// out[t] = sum over k of weight[t, k] * y[pos_of[t, k]] (bf16 rows of the down GEMM, fp32 sums in k order, pos < 0
// skipped) + shared[t] when not null ("moe_cutlass_combine_kernel"). D % 8 == 0.
void launch_moe_cutlass_combine(const void* y, const int32_t* pos_of, const float* weight, int64_t T, int64_t topk,
                                int64_t D, const float* shared, float* out, void* stream);
// E8M0 scale bytes of each expert (per-expert pointers, `count` bytes each) -> fp32 out [experts][count]
// ("moe_cutlass_scales_kernel").
void launch_moe_cutlass_scales(const void* const* scale, int64_t experts, int64_t count, float* out, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
