// CUDA CSA2 (DeepSeek-V4.1 compressed sparse attention; semantics of ops/csa2/csa2.h and the attention of
// model/deepseek_v41_attention.cpp under transformers numerics): the QAT quantizers of the stored state, the
// KV-source compressor (softmax pooling of ratio-r groups across steps through the slot's frontier), the emission
// of compressed entries + indexer keys into the token blocks, and the two-level indexer selection. Exactness
// first: one thread block per token (or row), double accumulation where the reference uses it. All pointers are
// device pointers.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/csa2/csa2_launch.h"

namespace dsinfer::ops::cuda {

// In place on rows of x [rows, dim]: the QAT quantizer `kind` in blocks of `block` channels (fp8_qat_ref /
// fp4_qat_ref bit for bit). dim % block != 0 leaves x unchanged, as the reference does. One block per row.
Status csa2_qat(float* x, int64_t rows, int64_t dim, int64_t block, QatKind kind, void* stream);

// kv, gate: [T, d] this step's pooling projections of a ratio > 1 KV source. latent [T, d]: for a token at p
// with (p + 1) % ratio == 0, sum over its group's ratio tokens of softmax(gate)[c] * kv[c] per channel (double,
// as csa2_compress_step_ref; members before the step's start come from the frontier rows written by earlier
// steps); every other row zero. Then csa2_frontier_write stores the rows a later step may need (the last
// frontier_rows tokens of each sequence's chunk: [kv | gate], row = position % frontier_rows).
Status csa2_pool(const StepDevice& st, const LayerStateView& view, int64_t ratio, int64_t d, const float* kv,
                 const float* gate, float* latent, void* stream);
Status csa2_frontier_write(const StepDevice& st, const LayerStateView& view, int64_t d, const float* kv,
                           const float* gate, void* stream);

// For each token completing entry j = p / ratio: key [T, di] (idx_wk . comp_norm(latent)) -> rmsnorm(key_norm_w)
// -> RoPE at j * ratio -> FP4 QAT (32, UE8M0) -> view.index_key(table, j); latent [T, d] (comp_norm'd) -> RoPE at
// j * ratio -> FP4 QAT (16, E4M3) -> view.entry(table, j). Rows of other tokens are not read.
Status csa2_emit(const StepDevice& st, const LayerStateView& view, const Csa2EmitCudaParams& p, const float* latent,
                 const float* key, void* stream);

// scores [T, p.stride]: for token t the csa2_index_scores_ref scores over the KV source's keys j < (pos + 1) /
// ratio (src.index_key), q [T, heads, dim] (RoPE'd, quantized), w [T, heads] (weights_proj * heads^-1/2).
// p.official: the official bf16 scores (model/deepseek_v41_attention.cpp), w then bf16(weights_proj * heads^-1/2
// * dim^-1/2). p.fast (not with official): the same scores summed in fp32 (~1e-6 relative; the runner's fast mode).
Status csa2_index_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p, const float* q,
                         const float* w, float* scores, void* stream);

// sel [T, topk]: the csa2_topk_ref indices (ascending, -1 padded) from scores (overwritten). Candidate mode also
// writes mask [T, stride] (csa2_candidate_blocks_ref) and mask_n [T] (its length); Masked mode reads them (a
// token whose mask_n is 0 picks unrestricted, as the reference does with an empty mask). block_scratch [T, stride].
// p.official: csa2_candidate_blocks_torch / csa2_topk_torch instead (torch.topk's CPU ties, one thread per token);
// pair_scratch then holds [T, stride] (value, index) pairs (8 bytes each).
Status csa2_index_select(const StepDevice& st, const Csa2IndexCudaParams& p, float* scores, uint8_t* mask,
                         int32_t* mask_n, float* block_scratch, int32_t* sel, void* stream,
                         void* pair_scratch = nullptr);

}  // namespace dsinfer::ops::cuda
