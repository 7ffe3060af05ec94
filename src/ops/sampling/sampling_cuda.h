// CUDA sampling: every logits row sampled on the device (one block per row) from its packed description
// (ops/sampling/sampling.h, built on the host by sampling/row_pack.h), so only the sampled ids and the requested
// logprobs cross to the host. Per row, in the CPU sampler's order: NaN -> -inf and the structured-output bitmask
// (xgrammar layout, as ops/token_mask) -> logit_bias -> min_tokens bans -> repetition / frequency / presence
// penalties -> greedy argmax | temperature -> min_p -> top_k -> top_p -> inverse-CDF draw with the host's Philox
// uniform; then the chosen token's logprob (raw or processed) and top_logprobs (value desc, id asc).
// CPU reference: sampling::Sampler (src/sampling/sampler.cpp); docs/kernels.md has the algorithm and numerics.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/sampling/sampling.h"

namespace dsinfer::ops::cuda {

struct SampleRowsArgs {
  const float* logits = nullptr;        // device [*, logits_stride] fp32, read only
  int64_t logits_stride = 0;
  int64_t V = 0;
  int64_t logits_rows = 0;              // rows of logits (descriptions naming another row get kSampleBadInput)
  const SampleRowDesc* rows = nullptr;  // device [num_rows]
  int64_t num_rows = 0;
  const SampleEntry* entries = nullptr; // device, indexed by the rows' lists
  int64_t num_entries = 0;
  const int32_t* mask_words = nullptr;  // device [num_mask_rows, words_per_row] or null
  int64_t num_mask_rows = 0;
  int32_t words_per_row = 0;
  float* work = nullptr;                // device scratch [num_rows, V] (sample_rows_work_floats)
  SampleRowOut* out = nullptr;          // device [num_rows]
};

inline int64_t sample_rows_work_floats(int64_t num_rows, int64_t V) { return num_rows * V; }

// Blocks that scan each plain greedy row ahead of the row kernel (detail::SampleArgs::split) for num_rows rows of V
// logits on the current device.
int32_t greedy_split(int64_t num_rows, int64_t V);

// Checks the shapes (the row descriptions themselves live on the device and were checked by the packer; the
// kernel still clamps every index it reads) and launches. Asynchronous on `stream`.
Status sample_rows(const SampleRowsArgs& a, void* stream);

}  // namespace dsinfer::ops::cuda
