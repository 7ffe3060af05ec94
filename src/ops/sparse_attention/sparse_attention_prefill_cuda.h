// CUDA sparse attention PREFILL over the FP8 state (session 19, issue 30): the op of sparse_attention_fp8_cuda.h
// (same parameters, semantics and bits) for steps with many tokens. The key rows the call's lists name are first
// dequantised once into a bf16 staging buffer (one row per named cache row, whatever number of tokens reads it),
// then a persistent warp-specialised wgmma kernel (one block an SM walking the items) gathers the staged bf16 rows by
// cp.async (no conversion in its loop); a named
// row past the staging's capacity is dequantised by the kernel from the cache. The output is bitwise the FP8
// kernels' (sparse_attention_fp8_launch.h): the same bf16 key tiles, tiles, products and order. Which op a step runs
// is plan_sparse_attention_fp8_prefill's choice (sparse_attention_plan.h).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"

namespace dsinfer::ops::cuda {

// Staged rows of a call of T tokens whose key lists have `rows` cache rows and `strides` entries a token (0: no
// list): at most sum_i min(rows_i, T strides_i) distinct rows are named; capped at 2 T + 16,384 (past the cap rows
// are still right, dequantised in the attention kernel: the cap bounds memory, not correctness).
int64_t sparse_attention_prefill_capacity(int64_t T, const int64_t (&rows)[SparseAttentionFp8Params::kLists],
                                          const int64_t (&strides)[SparseAttentionFp8Params::kLists]);
// Bytes of staging for such a call (capacity rows of 1 KB, the maps of the lists' cache rows, a counter).
int64_t sparse_attention_prefill_staging_bytes(int64_t T, const int64_t (&rows)[SparseAttentionFp8Params::kLists],
                                               const int64_t (&strides)[SparseAttentionFp8Params::kLists]);
// The same from a call's parameters (a list with idx nullptr counts as absent).
int64_t sparse_attention_prefill_staging_bytes(const SparseAttentionFp8Params& p);

// q: [T, heads, 512] (fp32 or bf16, p.q_bf16); o: [T, heads, 512] fp32; workspace: the split partials as
// sparse_attention_fp8 (sparse_attention_fp8_workspace_floats; num_splits > 1 only); staging: 16-byte aligned,
// staging_bytes >= sparse_attention_prefill_staging_bytes(p). Device pointers. p.kernel is ignored.
Status sparse_attention_prefill(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                void* staging, int64_t staging_bytes, void* stream);

// The same op with bf16 q in and bf16 o out, on the split-block kernel (sparse_attention_prefill_split.cu, session 24;
// plan_sparse_prefill_split in sparse_attention_plan.h says when): q bf16 [T, heads, 512] (p.q_bf16 must be set;
// 16-byte aligned), o bf16 [T, heads, 512] (16-byte aligned: kSplitVarStore16's stores); p.num_splits must be 1 (no
// workspace). p.q_norm (session 29): q is the raw query, normalised and rotated by the kernel with head_norm_rope's
// bits (variant 0 or kSplitVarStore16 only). Not the bits of sparse_attention_prefill: the same arithmetic up to the
// order of its fp32 sums, the running max over 128 keys and one bf16 rounding of the output (the GPU test's bound).
Status sparse_attention_prefill_split(const SparseAttentionFp8Params& p, const void* q, uint16_t* o, void* staging,
                                      int64_t staging_bytes, void* stream);
// For bench/attention_fp8_bench.cpp and the GPU tests: the split op with flags = a variant of its kernel
// (detail::kSplitVar*: the op's bits; detail::kSplitQNorm alone: variant 0, with p.q_norm only), or a diagnostic
// probe with a phase left out (detail::kSplitProbe*, sparse_attention_prefill_launch.h; not with p.q_norm; the output
// wrong by design).
Status sparse_attention_prefill_split_probe(const SparseAttentionFp8Params& p, const void* q, uint16_t* o,
                                            void* staging, int64_t staging_bytes, int flags, void* stream);

// Diagnostics for bench/attention_fp8_bench.cpp only: the op with its attention kernel's phases left out
// (detail::kPrefillProbe*, sparse_attention_prefill_launch.h; fp32 q); the output is wrong by design.
Status sparse_attention_prefill_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                      void* staging, int64_t staging_bytes, int probe, void* stream);

}  // namespace dsinfer::ops::cuda
