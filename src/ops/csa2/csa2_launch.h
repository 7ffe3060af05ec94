// Parameters and kernel launchers behind csa2_cuda.h (no CUDA types, no Status; validated by csa2_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/state_view.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

// The QAT quantizers of ops/qat/qat.h: FP8 e4m3 with a UE8M0 scale (window KV), FP4 e2m1 with a UE8M0 scale
// (indexer q / k) or with an E4M3 scale (compressed KV).
enum class QatKind { Fp8Ue8m0, Fp4Ue8m0, Fp4E4m3 };

// A KV-source layer's emission of the compressed entries completed in this step (see csa2_emit).
struct Csa2EmitCudaParams {
  int64_t ratio = 2;                 // >= 1; token p completes entry p / ratio when (p + 1) % ratio == 0
  int64_t d = 0, di = 0;             // entry width (head_dim), indexer key width (index_head_dim)
  int64_t rope_dim = 0;              // trailing dims rotated at the group's first position
  const float* inv_freq = nullptr;   // [rope_dim / 2] device (compressed layers' frequencies)
  float eps = 1e-6f;
  const float* key_norm_w = nullptr;  // [di] device (the indexer's k_norm)
  bool qat = true;                   // FP4 QAT of keys (per 32, UE8M0) and entries (per 16, E4M3)
  bool round_bf16 = false;           // V4.1 official numerics: the normed key and both RoPE'd parts rounded to bf16
};

// Mode of an index source (csa2_index_select): plain top-k, candidate source (publishes the block mask, its own
// top-k unrestricted) or a later index source picking inside the candidate mask.
enum class Csa2SelectMode { Plain, Candidate, Masked };

struct Csa2IndexCudaParams {
  int64_t heads = 0, dim = 0;        // indexer heads, index_head_dim
  int64_t ratio = 1;                 // token at p sees entries j < (p + 1) / ratio
  int64_t topk = 0;                  // index_topk (<= kCsa2MaxTopk)
  int64_t stride = 0;                // row stride of scores / mask / block scratch (>= the largest visible count)
  Csa2SelectMode mode = Csa2SelectMode::Plain;
  int64_t cand_topk_blocks = 0, cand_block_size = 1;
  // V4.1 official numerics: bf16 scores (each head's dot product, ReLU and head weight rounded to bf16, the sum
  // over heads rounded to bf16; w then carries the dim^-1/2 scale, so the kernel does not apply it), and the
  // selections with torch.topk's CPU tie resolution (ops::torch_cpu_topk) instead of ties to the lower index.
  bool official = false;
  // The fast mode's scores (hf / hf-noqat outside exact mode): each head's dot product and the head sum in fp32
  // (~1e-6 relative) instead of fp64; not with `official`.
  bool fast = false;
};

inline constexpr int64_t kCsa2MaxTopk = 4096;
inline constexpr int64_t kCsa2MaxScoreSmem = 227 * 1024;  // Hopper opt-in limit per block

namespace detail {
void launch_csa2_qat(float* x, int64_t rows, int64_t dim, int64_t block, QatKind kind, void* stream);
void launch_csa2_pool(const StepDevice& st, const LayerStateView& view, int64_t ratio, int64_t d, const float* kv,
                      const float* gate, float* latent, void* stream);
void launch_csa2_frontier_write(const StepDevice& st, const LayerStateView& view, int64_t d, const float* kv,
                                const float* gate, void* stream);
void launch_csa2_emit(const StepDevice& st, const LayerStateView& view, const Csa2EmitCudaParams& p,
                      const float* latent, const float* key, void* stream);
// Dynamic shared memory (bytes) of the score kernel for these indexer shapes (at most kCsa2MaxScoreSmem).
int64_t csa2_index_scores_smem(int64_t heads, int64_t dim, bool fast);
void launch_csa2_index_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p,
                              const float* q, const float* w, float* scores, void* stream);
void launch_csa2_index_select(const StepDevice& st, const Csa2IndexCudaParams& p, float* scores, uint8_t* mask,
                              int32_t* mask_n, float* block_scratch, void* pair_scratch, int32_t* sel, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
