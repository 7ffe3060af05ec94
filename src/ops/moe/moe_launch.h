// Parameters and kernel launchers behind moe_cuda.h (no CUDA types, no Status; validated by moe_cuda.cpp). The
// grouped expert GEMMs go through the GEMM launchers (ops/gemm/gemm_launch.h).
#pragma once
#include <cstdint>

#include "ops/routed_sum.h"

#include "ops/gemm/gemm_launch.h"  // WeightFormat, DeviceWeight
#include "ops/moe/moe.h"           // ScoreFunc

namespace dsinfer::ops::cuda {

using ::dsinfer::ops::ScoreFunc;

struct RouterCudaParams {
  int64_t experts = 0, topk = 0;  // experts <= 1024, 0 < topk <= experts
  ScoreFunc score = ScoreFunc::SqrtSoftplus;
  bool renormalize = true;
  float norm_eps = 0.0f, route_scale = 1.0f;
  int64_t hash_vocab = 0;  // rows of hash_table; a token id outside [0, hash_vocab) gets ids -1 and weight 0
};

// One projection (w1, w3 or w2) of all routed experts of a layer: same format and shape for every expert; `data`
// and `scale` are DEVICE arrays [experts] of device pointers (each expert's tensor, 16-byte aligned), so experts may
// live in separate allocations or in one stacked buffer.
struct DeviceExpertWeights {
  WeightFormat fmt = WeightFormat::FP4_G32;
  int64_t rows = 0, cols = 0;
  bool scale_e8m0 = true;
  int64_t block_n = 128, block_k = 128;  // FP8_BLOCK only
  const void* const* data = nullptr;
  const void* const* scale = nullptr;   // null for F32 / BF16
};

struct MoeExpertsDevice {
  int64_t experts = 0, dim = 0, inter = 0;
  DeviceExpertWeights w1, w3;  // [inter, dim] gate / up
  DeviceExpertWeights w2;      // [dim, inter] down
};

struct MoeSharedDevice {
  DeviceWeight w1, w3;  // [I_s, dim] (I_s <= the workspace's inter)
  DeviceWeight w2;      // [dim, I_s]
};

// x [T, K] rounded to the fast kernels' gate/up B operand: xb [T, K] bf16 in pair layout (moe_x_bf16.cuh).
struct MoeXBf16 {
  const float* x = nullptr;
  int64_t T = 0, K = 0;
  uint16_t* xb = nullptr;
};

// Fast (decode) path of the routed experts (moe_fast.cu): FP4_G32 weights with E8M0 scales, bf16 activations.
struct MoeFastArgs {
  const int32_t* active = nullptr;   // [1 + experts]: number of touched experts, then their ids (increasing)
  const int32_t* offsets = nullptr;  // [experts + 1] (the permutation)
  const uint16_t* xb = nullptr;      // B operand rows, bf16 in pair layout (moe_fast_common.h): gate kernel x [T, K]
                                     //   (row perm[p] for permuted row p), down kernel h [rows, K] (row p)
  const int32_t* perm = nullptr;     // gate kernel: the token of permuted row p
  const void* const* w1 = nullptr;   // gate kernel: W1 [N, K]; down kernel: W2 [N, K] (per-expert pointers)
  const void* const* s1 = nullptr;
  const void* const* w3 = nullptr;   // gate kernel: W3 [N, K]; unused by the down kernel
  const void* const* s3 = nullptr;
  int64_t K = 0, N = 0;              // K % 128 == 0; N % 32 (gate) or % 64 (down) == 0
  float limit = 0.0f;                // SwiGLU clamp (gate kernel), 0 = none
  uint16_t* hout = nullptr;          // gate kernel: SwiGLU output, bf16 pair layout [rows, N]
  float* yout = nullptr;             // down kernel: fp32 [rows, N]
  // The experts with more than 8 rows (the permutation's `big` list: count, then ids), or null. Set: the
  // single-pass kernel leaves them to the paired kernel (16 rows a pass), whose big_grid grid rows walk the list.
  const int32_t* big = nullptr;
  int64_t big_grid = 0;
};

namespace detail {
inline constexpr int kRouteMaxThreads = 256;  // threads of a router block (one block a token; fewer for few experts)
inline constexpr int64_t kMoeMaxExperts = 8192;  // the count kernel keeps one int counter per expert in shared memory

// route.cu: the router top-k, one block per token (kernel "route_kernel").
void launch_route(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream);
// moe.cu: the permutation of n = T * topk assignments into per-expert row groups ("moe_count_kernel",
// "moe_scatter_kernel"), the clamped SwiGLU over the first *rows_dev (or `rows`) rows ("swiglu_kernel") and the
// weighted combine in k order plus the optional shared expert output ("combine_kernel").
// launch_moe_count also writes the touched-expert list (count, then ids) when `active` is not null, and the list of
// experts with more than 8 rows (MoeFastArgs::big; [1 + experts], count then increasing ids) when `big` is not null.
void launch_moe_count(const int32_t* idx, int64_t n, int64_t experts, int32_t* offsets, int32_t* pos_of,
                      int32_t* active, void* stream, int32_t* big = nullptr);
// The same permutation (and lists, when not null) in one single-block launch, for n <= kMoePrepMaxN
// ("moe_prep_kernel"); with xc.x set, T more blocks write the fast kernels' bf16 x rows (as launch_moe_x_bf16).
void launch_moe_prep(const int32_t* idx, int64_t n, int64_t topk, int64_t experts, int32_t* offsets,
                     int32_t* perm_token, int32_t* pos_of, int32_t* active, void* stream, const MoeXBf16& xc = {},
                     int32_t* big = nullptr);
void launch_moe_scatter(const int32_t* idx, int64_t n, int64_t topk, int64_t experts, const int32_t* offsets,
                        int32_t* perm_token, int32_t* pos_of, void* stream);
// h16 (or null): the result's bf16 rounding (RNE) too, [rows, inter] (the shared expert's down projection at prefill).
void launch_swiglu(float* h1, const float* h3, int64_t rows, const int32_t* rows_dev, int64_t inter, float limit,
                   void* stream, uint16_t* h16 = nullptr);
void launch_combine(const RoutedSum& f, int64_t T, int64_t dim, float* out, void* stream);
// moe.cu, DeepSeek-V4.1 official numerics (moe_official_cuda): the SwiGLU with the routing weight inside and a bf16
// output ("official_swiglu_kernel"), the routing weight of every permuted row ("row_weight_kernel"), the combine in
// increasing expert id ("official_combine_kernel").
void launch_official_swiglu(float* h1, const float* h3, const float* row_weight, int64_t rows,
                            const int32_t* rows_dev, int64_t inter, float limit, void* stream);
void launch_row_weight(const int32_t* pos_of, const float* weight, int64_t n, float* wrow, void* stream);
void launch_official_combine(const float* yp, const int32_t* pos_of, const int32_t* idx, int64_t T, int64_t topk,
                             int64_t dim, const float* shared, float* out, void* stream);
// moe_fast.cu: x's T token rows to the fast kernels' bf16 B operand in pair layout ("moe_x_bf16_kernel", T blocks);
// the gate/up + SwiGLU kernel (gate_up; reads a.xb through a.perm) or the down kernel ("moe_fast_kernel"),
// grid (N / rows per block, max_active); with a.big, then the paired kernel ("moe_fast_paired_kernel", grid
// (N / rows per block, a.big_grid)).
void launch_moe_x_bf16(const MoeXBf16& xc, void* stream);
void launch_moe_fast(bool gate_up, const MoeFastArgs& a, int64_t max_active, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
