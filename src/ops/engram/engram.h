// Engram conditional memory of DeepSeek-V4.1 (research/dsv41-architecture.md §2.2). Every position is hashed
// once per forward as the 2..N-grams of compressed token ids ending there (each n-gram size split over `heads`
// prime-sized buckets), the rows are looked up in a per-layer table, projected by `wkv` to one key per hc stream
// plus one shared value, and a per-stream sigmoid gate writes the value into the streams before the block.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::ops {

// Bucket layout and hash multipliers of all engram layers (transformers EngramLayout / NgramHashState).
struct EngramHashLayout {
  int64_t max_ngram = 0, heads = 0;
  int64_t pad_id = 0;                           // compressed id filling n-gram slots without history
  std::vector<std::vector<int64_t>> primes;      // [layer][(n-2) * heads + h] bucket sizes
  std::vector<std::vector<int64_t>> offsets;     // [layer][col] exclusive prefix sums (per layer, from 0)
  std::vector<std::vector<int64_t>> multipliers; // [layer][look-back s], odd
  int64_t cols() const { return (max_ngram - 1) * heads; }
};

// Primes drawn in order above vocab_size - 1 (never reused across layers), offsets, and multipliers
// 2 * numpy.random.default_rng(10007 * layer).integers(0, (INT64_MAX // compressed_vocab) // 2, max_ngram) + 1.
EngramHashLayout make_engram_hash_layout(const std::vector<int64_t>& layer_ids, int64_t max_ngram, int64_t heads,
                                         int64_t vocab_size, int64_t compressed_vocab, int64_t pad_id);

// numpy.random.default_rng(seed).integers(0, high, size=count, dtype=int64) (SeedSequence -> PCG64 -> Lemire).
std::vector<int64_t> numpy_rng_integers(uint64_t seed, int64_t high, int64_t count);

// Hash ids [L.cols()] of engram layer `layer` for one position: tok[s] is the compressed id s positions back
// (s = 0 the current token) or -1 where there is none or it is an image token; the look-back stops at the
// first such slot, which is filled with pad_id from there on.
void engram_hash_ref(const EngramHashLayout& L, int64_t layer, const int64_t* tok, int64_t* out);

struct EngramGateParams {
  int64_t n = 4, dim = 0;
  float eps = 1e-20f;
  const float* weight = nullptr;  // [n, dim] = q_weight * k_weight
};
// One token: x [n, dim] streams (in/out), key [n, dim], value [dim]; gate_k = sigmoid(signed_sqrt(dot_k)) with
// dot_k = sum_d x_k w_k key_k * rsqrt(ms(x_k)+eps) * rsqrt(ms(key_k)+eps) / sqrt(dim), |dot| floored at 1e-6;
// x_k += gate_k * value. `live` false (image tokens) leaves x unchanged.
void engram_gate_ref(const EngramGateParams& p, float* x, const float* key, const float* value, bool live = true);

}  // namespace dsinfer::ops
