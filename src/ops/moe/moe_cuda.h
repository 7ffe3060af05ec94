// Mixture-of-experts on the GPU (architecture notes §8): router top-k over precomputed logits, and the expert layer
// (tokens permuted into per-expert groups, grouped GEMMs with weights dequantized in-kernel, clamped SwiGLU,
// weighted combine in k order plus the shared expert). Plain C++ header (no CUDA types); fp32 activations.
// Same semantics as the CPU references in ops/moe/moe.h (route_ref, expert_accumulate_ref); layouts and
// determinism rules in docs/kernels.md "GEMM and MoE".
#pragma once
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe.h"

namespace dsinfer::ops::cuda {

using ::dsinfer::ops::ScoreFunc;

struct RouterCudaParams {
  int64_t experts = 0, topk = 0;  // experts <= 1024, 0 < topk <= experts
  ScoreFunc score = ScoreFunc::SqrtSoftplus;
  bool renormalize = true;
  float norm_eps = 0.0f, route_scale = 1.0f;
  int64_t hash_vocab = 0;  // rows of hash_table; a token id outside [0, hash_vocab) gets ids -1 and weight 0
};

// logits fp32 [T, E] (x . gate^T, e.g. from gemm_cuda with an F32 gate); bias [E] or null; hash_table int32
// [hash_vocab, topk] or null (then tokens int32 [T] select rows). Out: idx int32 [T, topk], weight fp32 [T, topk].
// Selection ties break toward the lower expert id (as route_ref). One warp per token.
Status route_cuda(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream);

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

// Device scratch of moe_cuda, grown by reserve() (never inside moe_cuda, so a captured forward allocates nothing).
class MoeWorkspace {
 public:
  MoeWorkspace();
  ~MoeWorkspace();
  MoeWorkspace(const MoeWorkspace&) = delete;
  MoeWorkspace& operator=(const MoeWorkspace&) = delete;
  // Capacity for up to T tokens with topk experts each, hidden dim, expert (and shared) width inter, experts.
  Status reserve(int64_t T, int64_t topk, int64_t dim, int64_t inter, int64_t experts);

  // Permutation of the last moe_cuda call (device pointers; layout in docs/kernels.md):
  const int32_t* offsets() const;    // [experts + 1]: expert e owns permuted rows [offsets[e], offsets[e+1])
  const int32_t* perm_token() const; // [T*topk]: token of permuted row p (rows < offsets[experts])
  const int32_t* pos_of() const;     // [T*topk]: permuted row of assignment t*topk+k, -1 for an invalid expert id

  struct Impl;
  std::unique_ptr<Impl> impl;
};

// out[T, D] = sum_k weight[t,k] * expert_{idx[t,k]}(x[t]) + (shared ? shared(x[t]) : 0), summed in k order, then the
// shared expert added. expert(x) = w2 . (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)); limit 0 = no clamp;
// shared_limit likewise for the shared expert. x and out are contiguous [T, D] and must not overlap. An expert id
// outside [0, experts) contributes nothing. Deterministic: no float atomics; a token's result depends only on its
// own row and on which GEMM path runs (chosen from T: fp32 streaming when T*topk <= 8*experts, else tensor core).
Status moe_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                const MoeExpertsDevice& experts, const MoeSharedDevice* shared, float limit, float shared_limit,
                float* out, MoeWorkspace& ws, void* stream);

}  // namespace dsinfer::ops::cuda
