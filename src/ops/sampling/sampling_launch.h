// Kernel launcher behind sampling_cuda.h (no CUDA types, no Status; validated by sampling_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/sampling/sampling.h"

namespace dsinfer::ops::cuda::detail {

// All pointers are device memory; shapes checked by sample_rows().
struct SampleArgs {
  const float* logits = nullptr;       // [*, logits_stride]
  int64_t logits_stride = 0;           // >= V
  int32_t V = 0;
  int32_t logits_rows = 0;             // rows of logits: a description naming another row is reported
  const SampleRowDesc* rows = nullptr;  // [num_rows]
  int32_t num_rows = 0;
  const SampleEntry* entries = nullptr;
  int32_t num_entries = 0;
  const int32_t* mask_words = nullptr;  // [*, words_per_row]; may be null when no row has mask_row >= 0
  int32_t num_mask_rows = 0;
  int32_t words_per_row = 0;
  float* work = nullptr;               // [num_rows, V] scratch: the processed row
  SampleRowOut* out = nullptr;         // [num_rows]
  // Blocks scanning each plain greedy row (sampling.cu plain_greedy) before the row kernel (1..64, at most
  // max(1, V / kGreedySlice)), their partial argmaxes parked in the row's work row; 0: no scan (the general path).
  int32_t split = 1;
};

// Fewest entries of a plain greedy row per scanning block (sample_rows chooses the split).
inline constexpr int32_t kGreedySlice = 4096;

void launch_sample_rows(const SampleArgs& a, void* stream);

}  // namespace dsinfer::ops::cuda::detail
