// The ragged step as the CUDA kernels see it: plain device pointers (no CUDA types), built by the model runner
// from a BatchPlan. Tokens are grouped by sequence: sequence s owns tokens [cu_seqlens[s], cu_seqlens[s+1]) at
// positions start_pos[s], start_pos[s] + 1, ... (consecutive, in token order).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

struct StepDevice {
  int64_t T = 0;                          // tokens in the step
  int64_t num_seqs = 0;                   // sequences in the step
  const int32_t* tokens = nullptr;        // [T] token ids
  const int64_t* pos = nullptr;           // [T] absolute positions
  const int32_t* seq_of_token = nullptr;  // [T] sequence index in [0, num_seqs)
  const int32_t* cu_seqlens = nullptr;    // [num_seqs + 1] token offsets
  const int64_t* start_pos = nullptr;     // [num_seqs] position of each sequence's first token of the step
  const int32_t* slot = nullptr;          // [num_seqs] state-cache slot
  const int32_t* block_tables = nullptr;  // [num_seqs, table_stride] block ids (each covers the sequence's end)
  int64_t table_stride = 0;
};

}  // namespace dsinfer::ops
