// Parameters and kernel launchers behind indexer_cuda.h (no CUDA types, no Status; validated by indexer_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/state_view.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

struct IndexerCudaParams {
  int64_t heads = 0;  // index_n_heads (<= 64)
  int64_t dim = 0;    // index_head_dim (multiple of 4, <= 256)
  int64_t m = 4;      // compress ratio of the layer
  int64_t topk = 0;   // index_topk
  bool fast = false;  // the runner's fast mode (KernelMode::kFast): prefill scores may take the wgmma kernel
};

namespace detail {
inline constexpr int kIdxKeysPerBlock = 64;
inline constexpr int kIdxMaxHeads = 64;
inline constexpr int kIdxTcDim = 128;               // the tensor-core scores: FP8 keys (index_head_dim 128)
inline constexpr int64_t kIdxSelCacheKeys = 16384;  // top-k: a row's keys kept in shared memory (64 KiB) up to this
// fp32 state (fp32 keys): CUDA-core fp32 dot products.
void launch_indexer_scores(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                           const float* q, const float* weights, int64_t max_visible, float* scores, void* stream);
// FP8 state (e4m3 keys, dim kIdxTcDim): bf16 mma.sync, q split into exact bf16 parts. tokens_per_block: 1 (one
// token a block) or 4 (four tokens share each key tile; the same bits), or kIdxWgTokens (the wgmma kernel: the
// same products, another fp32 sum order, so other last bits; fast mode's prefill plan when
// DSINFER_INDEXER_SCORES=wgmma); 0 = the plan, indexer_tc_tokens_per_block.
inline constexpr int kIdxWgTokens = 8;
inline constexpr int64_t kIdxWgMinVisible = 2048;  // the wgmma kernel only for steps seeing more keys (indexer.cu)
int indexer_tc_tokens_per_block(const StepDevice& step, const IndexerCudaParams& p, int64_t max_visible);
void launch_indexer_scores_tc(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                              const float* q, const float* weights, int64_t max_visible, float* scores, void* stream,
                              int tokens_per_block = 0);
// Top-k select. A form: cand_slots 0 = the full scan, n > 0 = the candidate form with n shared-memory slots (pass 0's
// boundary bin gathered; rows whose bin holds more scan in full); sample = first the sample form with those slots
// on rows of more than sample_min_keys keys (a threshold from 1,024 of the row's keys, every key at or above it
// gathered in one scan; rows whose count misses [K, slots] go on in the candidate form). Every form gives the same
// output. form = nullptr: the plan (indexer_select_form).
struct IdxSelForm {
  int cand_slots = 0;
  bool sample = false;
  int64_t sample_min_keys = 0;
};
inline constexpr int kIdxSelCandSlots = 4096;        // the plan's candidate slots (8 B each)
inline constexpr int kIdxSelCandMaxSlots = 8192;     // the most a launch takes
inline constexpr int64_t kIdxSelCandMinKeys = 1024;  // the plan's full scan up to this max_visible
inline constexpr int64_t kIdxSelSampleMinKeys = 4096;  // the plan's sample form on rows longer than this
IdxSelForm indexer_select_form(int64_t max_visible);
void launch_indexer_select(const StepDevice& step, const IndexerCudaParams& p, const float* scores, int64_t max_visible,
                           int32_t* out, void* stream, const IdxSelForm* form = nullptr);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
