// Parameters and launchers of the sparse attention decode over the FP8 KV storage format (sparse_attention_fp8.h);
// no CUDA types, no Status (validated by sparse_attention_fp8_cuda.cpp). C++17: shared with the .cu file.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

// One list of keys per token in a main KV cache of the MODEL1 layout (ops/kv_format/kv_format.h).
struct Fp8KeySource {
  const uint8_t* cache = nullptr;  // the cache (16-byte aligned)
  int64_t rows = 0;                // its rows (indices >= rows: no key)
  const int32_t* idx = nullptr;    // [T, stride] cache rows of each token's keys; -1 = no key
  int64_t stride = 0;              // list capacity a token
  const int32_t* len = nullptr;    // [T] keys used of the token's list (<= stride); nullptr: all stride
};

struct SparseAttentionFp8Params {
  int64_t T = 0, heads = 0;      // head_dim is kKvDim (512)
  float scale = 1.0f;            // head_dim^-1/2
  const float* sinks = nullptr;  // [heads]
  // Token t's keys: keys[0]'s list, then keys[1]'s (the window ring, then the compressed entries; keys[1].idx
  // nullptr: none). K = V: one latent row a key, shared by all heads.
  Fp8KeySource keys[2];
  bool q_bf16 = false;           // q [T, heads, 512]: fp32, or bf16 when set
  // Inverse RoPE of the output's trailing rope_dim channels at pos[t] (0 = none).
  int64_t rope_dim = 0;
  const int32_t* pos = nullptr;     // [T]
  const float* inv_freq = nullptr;  // [rope_dim / 2]
  float attention_factor = 1.0f;
  int64_t num_splits = 1;  // key-range splits a (token, 64-head group); > 1 needs the workspace and the combine
};

namespace detail {
inline constexpr int kFp8Heads = 64;  // heads a block
inline constexpr int kFp8Keys = 32;   // keys a tile
void launch_sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                 void* stream);
void launch_sparse_attention_fp8_combine(const SparseAttentionFp8Params& p, const float* workspace, float* o,
                                         void* stream);
// Diagnostics for bench/attention_fp8_bench.cpp only: the kernel (fp32 q) with phases left out, to see where a tile's
// time goes; the output is wrong by design. probe: an OR of the bits below (the combinations the launcher
// instantiates: each bit alone, loads + dequant, QK + PV + softmax); false for any other.
inline constexpr int kProbeNoQk = 1, kProbeNoPv = 2, kProbeNoSoftmax = 4, kProbeNoDequant = 8, kProbeNoLoads = 16;
bool launch_sparse_attention_fp8_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                       int probe, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
