// GPU parity of the KV format encoders (ops/kv_format/kv_format_cuda.h): the bytes the kernels write equal the CPU
// reference's (kv_encode_row_ref / idx_encode_row_ref) everywhere in the cache, bit for bit (both round through the
// same host/device codec functions, and the encoders own no other arithmetic than the amax reduction). Rows span tile
// magnitudes from 2^-20 to 2^20, tiles under the 1e-4 floor, zero tiles, exact 448 * 2^k maxima and non-finite
// values; destinations are scattered over several blocks, with -1 and out-of-range rows skipped (their bytes keep
// the cache's 0xAA poison on both sides); a row stride wider than the row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/kv_format/kv_format.h"
#include "ops/kv_format/kv_format_cuda.h"
#include "ops/quant_sim/quant_sim.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"
#include "ops/state_view.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;

namespace {
std::vector<float> rows_with_edges(int64_t n, int64_t ld, int64_t tile, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(size_t(n * ld), 12345.0f);  // the gap past each row must not be read
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c0 = 0; c0 < ld - (ld % tile); c0 += tile) {
      const int kind = int(g() % 8);
      const float mag = kind == 0 ? 1e-6f : std::ldexp(1.0f, int(g() % 41) - 20);
      for (int64_t i = 0; i < tile; ++i) x[size_t(r * ld + c0 + i)] = kind == 1 ? 0.0f : u(g) * mag;
      if (kind == 2) x[size_t(r * ld + c0 + 3)] = 448.0f * std::ldexp(1.0f, int(g() % 9) - 4);
      if (kind == 3 && r % 7 == 0) x[size_t(r * ld + c0 + 1)] = (r % 2) ? NAN : -INFINITY;
    }
  return x;
}

// Destinations: a shuffled subset of the cache rows (n <= cache_rows), every 11th row -1 and every 13th past the end.
std::vector<int32_t> destinations(int64_t n, int64_t cache_rows, uint32_t seed) {
  EXPECT_LE(n, cache_rows);
  std::vector<int32_t> all(static_cast<size_t>(cache_rows));
  for (int64_t i = 0; i < cache_rows; ++i) all[size_t(i)] = int32_t(i);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  std::vector<int32_t> d(all.begin(), all.begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 11 == 5) d[size_t(i)] = -1;
    if (i % 13 == 7) d[size_t(i)] = int32_t(cache_rows + i);
  }
  return d;
}
}  // namespace

TEST(GpuKvFormat, MainKvEncodeMatchesTheReferenceBytes) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t n = 300, ld = ops::kKvDim + 16, cache_rows = 5 * ops::kKvBlockRows + 17;
  const std::vector<float> x = rows_with_edges(n, ld, ops::kKvTile, 1);
  const std::vector<int32_t> dst = destinations(n, cache_rows, 2);
  std::vector<uint8_t> ref(size_t(ops::kv_cache_bytes(cache_rows)), 0xAA);
  for (int64_t i = 0; i < n; ++i)
    if (dst[size_t(i)] >= 0 && dst[size_t(i)] < cache_rows)
      ops::kv_encode_row_ref(x.data() + i * ld, ref.data(), dst[size_t(i)]);
  auto dx = to_device(x);
  auto dd = to_device(dst);
  auto dc = to_device(std::vector<uint8_t>(ref.size(), 0xAA));
  ASSERT_TRUE(ops::cuda::kv_encode(dx.data(), n, ld, dd.data(), dc.data(), cache_rows, nullptr).is_ok());
  const std::vector<uint8_t> got = to_host(dc, ref.size());
  for (size_t b = 0; b < ref.size(); ++b) ASSERT_EQ(int(got[b]), int(ref[b])) << "byte " << b;
}

TEST(GpuKvFormat, IndexerKeyEncodeMatchesTheReferenceBytes) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t n = 300, ld = ops::kIdxDim, cache_rows = 6 * ops::kKvBlockRows;
  std::vector<float> x = rows_with_edges(n, ld, 32, 3);
  for (int64_t r = 0; r < n; r += 2) {  // half the rows as the official simulation leaves them
    ops::hadamard_ref(x.data() + r * ld, ld);
    ops::fp4_block_sim_ref(x.data() + r * ld, ld, 32);
  }
  const std::vector<int32_t> dst = destinations(n, cache_rows, 4);
  std::vector<uint8_t> ref(size_t(ops::idx_cache_bytes(cache_rows)), 0xAA);
  for (int64_t i = 0; i < n; ++i)
    if (dst[size_t(i)] >= 0 && dst[size_t(i)] < cache_rows)
      ops::idx_encode_row_ref(x.data() + i * ld, ref.data(), dst[size_t(i)]);
  auto dx = to_device(x);
  auto dd = to_device(dst);
  auto dc = to_device(std::vector<uint8_t>(ref.size(), 0xAA));
  ASSERT_TRUE(ops::cuda::idx_encode(dx.data(), n, ld, dd.data(), dc.data(), cache_rows, nullptr).is_ok());
  const std::vector<uint8_t> got = to_host(dc, ref.size());
  for (size_t b = 0; b < ref.size(); ++b) ASSERT_EQ(int(got[b]), int(ref[b])) << "byte " << b;
}

TEST(GpuKvFormat, RejectsBadArguments) {
  DSI_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(ops::cuda::kv_encode(nullptr, 4, ops::kKvDim, nullptr, nullptr, 64, nullptr).is_ok());  // null rows
  float* fake = reinterpret_cast<float*>(16);
  EXPECT_FALSE(ops::cuda::kv_encode(fake, 4, 100, reinterpret_cast<int32_t*>(16), reinterpret_cast<uint8_t*>(16), 64,
                                    nullptr).is_ok());  // row stride below 512
  EXPECT_TRUE(ops::cuda::idx_encode(nullptr, 0, ops::kIdxDim, nullptr, nullptr, 0, nullptr).is_ok());  // nothing to do
}

// Paged caches (the runners' FP8 state: a ring page of 131 rows per slot, padded and offset) and the identity
// destinations (dst_rows nullptr: row i): the bytes equal the reference's at the same pages.
TEST(GpuKvFormat, PagedEncodeMatchesTheReferenceBytes) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t n = 300, ld = ops::kKvDim, cache_rows = 3 * 131;
  const ops::KvPages g{131, 131 * 584 + 24, 768}, gi{131, 131 * 132 + 4, 256};
  const std::vector<float> x = rows_with_edges(n, ld, ops::kKvTile, 5);
  const std::vector<int32_t> dst = destinations(n, cache_rows, 6);
  const size_t bytes = size_t(g.offset + 3 * g.page_stride);
  std::vector<uint8_t> ref(bytes, 0xAA), ref_id(bytes, 0xAA);
  for (int64_t i = 0; i < n; ++i) {
    if (dst[size_t(i)] >= 0 && dst[size_t(i)] < cache_rows)
      ops::kv_encode_row_ref(x.data() + i * ld, ref.data(), dst[size_t(i)], g);
    ops::kv_encode_row_ref(x.data() + i * ld, ref_id.data(), i, g);
  }
  auto dx = to_device(x);
  auto dd = to_device(dst);
  auto dc = to_device(std::vector<uint8_t>(bytes, 0xAA));
  ASSERT_TRUE(ops::cuda::kv_encode(dx.data(), n, ld, dd.data(), dc.data(), cache_rows, nullptr, g).is_ok());
  std::vector<uint8_t> got = to_host(dc, bytes);
  for (size_t b = 0; b < bytes; ++b) ASSERT_EQ(int(got[b]), int(ref[b])) << "byte " << b;
  auto di = to_device(std::vector<uint8_t>(bytes, 0xAA));
  ASSERT_TRUE(ops::cuda::kv_encode(dx.data(), n, ld, nullptr, di.data(), cache_rows, nullptr, g).is_ok());
  got = to_host(di, bytes);
  for (size_t b = 0; b < bytes; ++b) ASSERT_EQ(int(got[b]), int(ref_id[b])) << "identity byte " << b;
  // Indexer keys in pages of 131 rows (the 4 bytes between pages keep the poison).
  std::vector<float> k = rows_with_edges(n, ops::kIdxDim, 32, 7);
  const size_t ib = size_t(gi.offset + 3 * gi.page_stride);
  std::vector<uint8_t> iref(ib, 0xAA);
  for (int64_t i = 0; i < n; ++i)
    if (dst[size_t(i)] >= 0 && dst[size_t(i)] < cache_rows)
      ops::idx_encode_row_ref(k.data() + i * ops::kIdxDim, iref.data(), dst[size_t(i)], gi);
  auto dk = to_device(k);
  auto dic = to_device(std::vector<uint8_t>(ib, 0xAA));
  ASSERT_TRUE(
      ops::cuda::idx_encode(dk.data(), n, ops::kIdxDim, dd.data(), dic.data(), cache_rows, nullptr, gi).is_ok());
  got = to_host(dic, ib);
  for (size_t b = 0; b < ib; ++b) ASSERT_EQ(int(got[b]), int(iref[b])) << "indexer byte " << b;
  const ops::KvPages odd{131, 131 * 584 + 4, 0};  // stride not a multiple of 16
  EXPECT_FALSE(ops::cuda::kv_encode(dx.data(), n, ld, dd.data(), dc.data(), cache_rows, nullptr, odd).is_ok());
}

// kv_encode_ring (the FP8 state's ring write in one launch): a ragged step of a decode token, a 300-token chunk over
// a ring of 131 rows (only each row's last writer lands) and a short chunk, into paged slots. The bytes equal (1) the
// reference encoder at the rows the rule gives on the host and (2) the two launches it replaced, fp8_ring_rows then
// kv_encode, bit for bit; rows past the cache are skipped.
TEST(GpuKvFormat, RingEncodeEqualsRingRowsThenEncode) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t ring = 131, ld = ops::kKvDim + 8;
  const ops::KvPages g{ring, ring * 584 + 24, 768};
  struct Seq {
    int32_t slot;
    int64_t start, len;
  };
  for (const int64_t cache_rows : {3 * ring, 2 * ring}) {  // the second leaves slot 2 outside the cache
    const std::vector<Seq> seqs = {{2, 10, 1}, {0, 0, 300}, {1, 500, 7}};
    std::vector<int64_t> pos, start;
    std::vector<int32_t> seq_of, cu = {0}, slot;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int64_t k = 0; k < seqs[s].len; ++k) {
        pos.push_back(seqs[s].start + k);
        seq_of.push_back(int32_t(s));
      }
      cu.push_back(int32_t(pos.size()));
      start.push_back(seqs[s].start);
      slot.push_back(seqs[s].slot);
    }
    const int64_t T = int64_t(pos.size());
    const std::vector<float> x = rows_with_edges(T, ld, ops::kKvTile, 11);
    const size_t bytes = size_t(g.offset + 3 * g.page_stride);
    std::vector<uint8_t> ref(bytes, 0xAA);
    for (int64_t t = 0; t < T; ++t) {
      const Seq& q = seqs[size_t(seq_of[size_t(t)])];
      if (pos[size_t(t)] < q.start + q.len - ring) continue;  // a later token of the chunk owns the row
      const int64_t row = q.slot * ring + pos[size_t(t)] % ring;
      if (row < cache_rows) ops::kv_encode_row_ref(x.data() + t * ld, ref.data(), row, g);
    }
    auto dpos = to_device(pos);
    auto dstart = to_device(start);
    auto dseq = to_device(seq_of);
    auto dcu = to_device(cu);
    auto dslot = to_device(slot);
    ops::StepDevice st;
    st.T = T;
    st.num_seqs = int64_t(seqs.size());
    st.pos = dpos.data();
    st.seq_of_token = dseq.data();
    st.cu_seqlens = dcu.data();
    st.start_pos = dstart.data();
    st.slot = dslot.data();
    auto dx = to_device(x);
    auto fused = to_device(std::vector<uint8_t>(bytes, 0xAA));
    auto apart = to_device(std::vector<uint8_t>(bytes, 0xAA));
    DeviceBuffer<int32_t> rows;
    ASSERT_TRUE(rows.alloc(size_t(T)).is_ok());
    const ops::cuda::KvRingStep rs{T, st.pos, st.seq_of_token, st.cu_seqlens, st.start_pos, st.slot};
    ASSERT_TRUE(ops::cuda::kv_encode_ring(dx.data(), ld, rs, ring, fused.data(), cache_rows, nullptr, g).is_ok());
    ops::LayerStateView v;
    v.ring_rows = ring;
    v.fp8 = true;
    ASSERT_TRUE(ops::cuda::fp8_ring_rows(st, v, rows.data(), nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::kv_encode(dx.data(), T, ld, rows.data(), apart.data(), cache_rows, nullptr, g).is_ok());
    const std::vector<uint8_t> a = to_host(fused, bytes), b = to_host(apart, bytes);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(int(a[i]), int(ref[i])) << "byte " << i << " cache_rows " << cache_rows;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(int(a[i]), int(b[i])) << "byte " << i << " (two launches)";
    EXPECT_FALSE(ops::cuda::kv_encode_ring(dx.data(), ld, rs, 0, fused.data(), cache_rows, nullptr, g).is_ok());
    EXPECT_FALSE(ops::cuda::kv_encode_ring(dx.data(), 100, rs, ring, fused.data(), cache_rows, nullptr, g).is_ok());
    ops::cuda::KvRingStep bad = rs;
    bad.slot = nullptr;
    EXPECT_FALSE(ops::cuda::kv_encode_ring(dx.data(), ld, bad, ring, fused.data(), cache_rows, nullptr, g).is_ok());
  }
}
