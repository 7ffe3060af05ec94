// The CPU reference of the FP8-state sparse attention (ops/sparse_attention/sparse_attention_fp8.h): its key-list
// semantics against an explicit gather. Two lists (window rows, compressed entries) with -1 picks, rows past a
// cache's end, lengths shorter than the list and a token without keys must equal sparse_attention_ref over exactly
// the valid rows, decoded, in list order, followed by the inverse RoPE; bf16 q must equal fp32 q holding the same
// values. (The kernel itself is checked against this reference in tests/gpu/test_sparse_attention_fp8_gpu.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/small_float.h"
#include "ops/kv_format/kv_format.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"
#include "ops/sparse_attention/sparse_attention_fp8.h"

using namespace dsinfer;
using namespace dsinfer::ops;

TEST(SparseAttentionFp8Ref, ListsMatchAnExplicitGather) {
  constexpr int64_t T = 3, H = 2, rows0 = 70, rows1 = 40, s0 = 8, s1 = 6;
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint8_t> c0(size_t(kv_cache_bytes(rows0))), c1(size_t(kv_cache_bytes(rows1)));
  std::vector<float> x(static_cast<size_t>(kKvDim));
  for (int64_t r = 0; r < rows0 + rows1; ++r) {
    for (auto& v : x) v = n(g);
    kv_encode_row_ref(x.data(), r < rows0 ? c0.data() : c1.data(), r < rows0 ? r : r - rows0);
  }
  const std::vector<int32_t> idx0 = {0, 65, -1, 3, 69, 70, 5, 6,  // token 0
                                     1, 2, 3, 4, 5, 6, 7, 8,       // token 1
                                     9, 9, 9, 9, 9, 9, 9, 9};      // token 2
  const std::vector<int32_t> len0 = {7, 2, 0};  // token 2: no window keys
  const std::vector<int32_t> idx1 = {39, -1, 100, 0, 1, 2, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> len1 = {4, 6, 0};  // token 2: no key at all
  std::vector<float> q(size_t(T * H * kKvDim)), sinks = {0.3f, -0.7f}, inv_freq;
  std::vector<uint16_t> qb(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    qb[i] = small_float::f32_to_bf16_bits(n(g));
    q[i] = small_float::from_bits(uint32_t(qb[i]) << 16);
  }
  for (int i = 0; i < 32; ++i) inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / 64.0)));
  const std::vector<int32_t> pos = {100, 4000, 7};
  cuda::SparseAttentionFp8Params p;
  p.T = T;
  p.heads = H;
  p.scale = 0.0442f;
  p.sinks = sinks.data();
  p.keys[0] = {c0.data(), rows0, idx0.data(), s0, len0.data(), ops::kModel1Pages};
  p.keys[1] = {c1.data(), rows1, idx1.data(), s1, len1.data(), ops::kModel1Pages};
  p.rope_dim = 64;
  p.pos = pos.data();
  p.inv_freq = inv_freq.data();
  std::vector<float> out(q.size()), out_b(q.size());
  sparse_attention_fp8_ref(p, q.data(), out.data());
  p.q_bf16 = true;
  sparse_attention_fp8_ref(p, qb.data(), out_b.data());
  EXPECT_EQ(0, std::memcmp(out.data(), out_b.data(), out.size() * 4));
  // By hand: the valid rows of each token, in order.
  const std::vector<std::vector<std::pair<int, int32_t>>> want = {
      {{0, 0}, {0, 65}, {0, 3}, {0, 69}, {0, 5}, {1, 39}, {1, 0}},  // -1, 70 (past 70 rows), 100 (past 40) dropped
      {{0, 1}, {0, 2}, {1, 5}, {1, 6}, {1, 7}, {1, 8}, {1, 9}, {1, 10}},
      {}};
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> rows(want[size_t(t)].size() * size_t(kKvDim));
    std::vector<const float*> keys;
    for (size_t k = 0; k < want[size_t(t)].size(); ++k) {
      const auto [src, r] = want[size_t(t)][k];
      kv_decode_row_ref(src == 0 ? c0.data() : c1.data(), r, rows.data() + k * size_t(kKvDim));
      keys.push_back(rows.data() + k * size_t(kKvDim));
    }
    std::vector<float> ref(size_t(H * kKvDim));
    sparse_attention_ref(SparseAttentionParams{H, kKvDim, p.scale, sinks.data()}, q.data() + t * H * kKvDim,
                         keys.data(), int64_t(keys.size()), ref.data());
    for (int64_t h = 0; h < H; ++h)
      rope_apply_ref(ref.data() + h * kKvDim, kKvDim, 64, inv_freq, pos[size_t(t)], true);
    for (int64_t i = 0; i < H * kKvDim; ++i)
      ASSERT_EQ(out[size_t(t * H * kKvDim + i)], ref[size_t(i)]) << "token " << t << " channel " << i;
  }
  for (int64_t i = 0; i < H * kKvDim; ++i) EXPECT_EQ(out[size_t(2 * H * kKvDim + i)], 0.0f);  // only the sink
}
