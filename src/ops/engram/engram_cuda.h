// CUDA Engram of DeepSeek-V4.1 (semantics of ops/engram/engram.h and DeepseekV41Cpu::engram_hashes / engram):
// the n-gram hash ids of every token for every Engram layer (history of compressed ids kept in the slot, as the
// CPU reference keeps it), the table-row lookup, and the per-stream gate that writes the value into the streams.
// The wkv projection between lookup and gate is a plain GEMM. All pointers are device pointers.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/engram/engram_launch.h"

namespace dsinfer::ops::cuda {

// hashes [T, layers, cols] (engram_hash_ref per token and layer): the look-back slot s of a token at p is this
// step's token p - s (mapped through token_map) when p - s is at or after its sequence's start_pos, else the
// history row (p - s) % ngram_rows written by earlier steps, -1 before position 0. One thread per token.
Status engram_hash(const StepDevice& st, const EngramHashCudaParams& p, int64_t* hashes, void* stream);
// After engram_hash: the history rows of the last ngram_rows tokens of each sequence's chunk.
Status engram_history_write(const StepDevice& st, const EngramHashCudaParams& p, void* stream);

// out [T, cols * hd]: rows table[hashes[t, layer, c]] (dequantized to fp32) side by side; an id outside the table
// writes NaN (a missed validation shows up loudly) unless the table wraps. One block per (token, column).
Status engram_gather(const int64_t* hashes, int64_t T, int64_t layers, int64_t layer, int64_t cols,
                     const EngramTableDevice& table, float* out, void* stream);

// X [T, n, dim] in place: x_k += sigmoid(signed_sqrt(dot_k)) * value with kv [T, (n + 1) * dim] (n keys, then the
// value) and weight [n * dim] (engram_gate_ref, double reductions). One block per (token, stream).
Status engram_gate(float* X, int64_t T, int64_t n, int64_t dim, const float* kv, const float* weight, float eps,
                   void* stream);

}  // namespace dsinfer::ops::cuda
