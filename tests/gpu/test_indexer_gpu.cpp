// GPU parity of the Lightning Indexer (scores + top-k) against indexer_topk_ref on ragged steps: tokens with
// nothing visible, fewer visible entries than topk (all selected, -1 padding), Flash sizes (64 heads x 128,
// topk 512) around position 4000 and one token with ~16K visible entries. A third of the keys are exact copies
// of a few rows, so large groups of equal scores straddle the top-k boundary and the tie rule is exercised.
// Checks: (1) GPU scores vs reference scores, normalised error < 1e-5 (fp32 dot products vs double);
// (2) the GPU selection is exactly the top-k of the GPU's own scores under the tie rule (score desc, index asc),
// sorted ascending, -1 padded; (3) it equals the reference selection except where the reference scores of the
// differing indices are within 1e-5 (relative to the row's score range) of the reference k-th score.
// FP8 state (the tensor-core scores): the same checks with keys stored as e4m3 codes + power-of-two scales (the
// reference reads the decoded keys), q either random fp32 (three bf16 splits) or bf16-exact (one split); and the
// scores of the one-token-a-block kernel and of the four-tokens-a-block kernel must be bit-identical (ragged steps:
// blocks whose tokens belong to two or more sequences, tokens seeing fewer keys than the block's last).
// Top-k alone (planted scores, m = 1 so a row at position p has p + 1 candidates): rows of equal scores, a few
// values with -0.0 / +0.0, values sharing their high bits, k = candidates, k = candidates + 1, k > candidates,
// rows longer than the shared-memory cache; the selection must equal the CPU rule exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "attn_test_util.h"
#include "core/dtypes.h"
#include "model/state_pool.h"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/kv_format/kv_format.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {

std::vector<int32_t> topk_of(const float* s, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t kk = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int32_t a, int32_t b) {
    return s[a] != s[b] ? s[a] > s[b] : a < b;
  });
  idx.resize(size_t(kk));
  std::sort(idx.begin(), idx.end());
  return idx;
}

enum class QMode { Fp32, Bf16Exact };

// Host pools of one CSA layer in the fp32 or the FP8 state format, and their device copies.
struct IdxState {
  cache::StateLayout L;
  std::vector<float> slots, blocks;
  cuda::DeviceBuffer<float> dslots, dblocks;
  IdxState(const io::ModelConfig& cfg, int32_t num_blocks, int64_t block_size, bool fp8, uint32_t seed) {
    cache::StateCacheConfig cc;
    cc.block_size = block_size;
    cc.kv_elem_bytes = fp8 ? cache::kFp8StateElem : 4;
    L = dsinfer::test::unwrap(cache::compute_state_layout(cfg, cc));
    slots.assign(size_t(8) * size_t((L.slot_bytes + 3) / 4), 0.0f);
    blocks = random_vec(size_t(num_blocks) * size_t((L.block_bytes + 3) / 4), seed);
  }
  ops::LayerStateView host_view() { return model::layer_view(model::StatePool{&L, slots.data(), blocks.data()}, 0); }
  ops::LayerStateView device_view() {
    return model::layer_view(model::StatePool{&L, dslots.data(), dblocks.data()}, 0);
  }
};

// Writes key j of a sequence (fp32 row or FP8 encoding) and reads it back as the kernels see it.
void put_key(const ops::LayerStateView& v, const int32_t* table, int64_t j, const float* x, int64_t dim) {
  if (v.fp8)
    ops::idx_encode_row_ref(x, reinterpret_cast<uint8_t*>(v.blocks), v.entry_index(table, j), v.index_key_pages());
  else
    std::copy_n(x, dim, v.index_key(table, j));
}
void get_key(const ops::LayerStateView& v, const int32_t* table, int64_t j, float* out, int64_t dim) {
  if (v.fp8)
    ops::idx_decode_row_ref(reinterpret_cast<const uint8_t*>(v.blocks), v.entry_index(table, j), out,
                            v.index_key_pages());
  else
    std::copy_n(v.index_key(table, j), dim, out);
}

void run_case(int64_t heads, int64_t dim, int64_t topk, int64_t block_size, std::vector<SeqSpec> seqs, uint32_t seed,
              bool fp8 = false, QMode qmode = QMode::Fp32) {
  SCOPED_TRACE(testing::Message() << "heads " << heads << " dim " << dim << " topk " << topk << " fp8 " << fp8);
  const int64_t m = 4;
  // The FP8 format needs V4's head_dim 512 / rope 64 (only the indexer keys are used here).
  const io::ModelConfig cfg = attn_config(fp8 ? 512 : 64, fp8 ? 64 : 16, 8, dim, {io::AttnType::CSA}, {m});
  TestStep step(std::move(seqs), block_size);
  IdxState st(cfg, step.num_blocks(), block_size, fp8, seed);
  const ops::LayerStateView hv = st.host_view();
  ASSERT_EQ(hv.fp8, fp8);
  // Keys: random rows, a third of them copies of 7 base rows (exact score ties).
  const int64_t max_entries = step.nb * block_size / m;
  std::vector<float> row;
  for (size_t s = 0; s < step.seqs.size(); ++s) {
    std::vector<std::vector<float>> base;
    for (int64_t j = 0; j < max_entries; ++j) {
      if (j % 3 == 1 && j % 7 < int64_t(base.size())) {
        row = base[size_t(j % 7)];
      } else {
        row = random_vec(size_t(dim), seed + 7919u * uint32_t(s) + uint32_t(j));
        if (base.size() < 7) base.push_back(row);
      }
      put_key(hv, step.table(s), j, row.data(), dim);
    }
  }
  st.dslots = to_device(st.slots);
  st.dblocks = to_device(st.blocks);
  const int64_t T = step.T;
  auto q = random_vec(size_t(T * heads * dim), seed + 1);
  if (qmode == QMode::Bf16Exact)
    for (auto& x : q) x = round_bf16(x);
  const auto w = random_vec(size_t(T * heads), seed + 2);
  int64_t max_visible = 0;
  for (int64_t p : step.pos) max_visible = std::max(max_visible, (p + 1) / m);

  auto dq = to_device(q), dw = to_device(w);
  cuda::DeviceBuffer<float> scores;
  cuda::DeviceBuffer<int32_t> out;
  ASSERT_TRUE(scores.alloc(size_t(std::max<int64_t>(1, ops::cuda::indexer_scores_floats(T, max_visible)))).is_ok());
  ASSERT_TRUE(out.alloc(size_t(T * topk)).is_ok());
  cudaMemset(scores.data(), 0xff, scores.size() * 4);
  cudaMemset(out.data(), 0x7f, out.size() * 4);  // poison: 0x7f7f7f7f is no valid index and not -1
  const ops::cuda::IndexerCudaParams p{heads, dim, m, topk};
  const Status s = ops::cuda::indexer_topk(step.dev, st.device_view(), p, dq.data(), dw.data(), max_visible,
                                           scores.data(), out.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto gs = to_host(scores, scores.size());
  const auto go = to_host(out, out.size());
  if (fp8) {  // (4) the tensor-core scores with one token a block and with four sharing each key tile: the same bits
    std::vector<float> by[2];
    for (int k = 0; k < 2; ++k) {
      cudaMemset(scores.data(), 0xff, scores.size() * 4);
      ops::cuda::detail::launch_indexer_scores_tc(step.dev, st.device_view(), p, dq.data(), dw.data(), max_visible,
                                                  scores.data(), nullptr, k == 0 ? 1 : 4);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      by[k] = to_host(scores, scores.size());
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < (step.pos[size_t(t)] + 1) / m; ++j) {
        const size_t i = size_t(t * max_visible + j);
        ASSERT_EQ(std::memcmp(&by[0][i], &by[1][i], 4), 0)
            << "token " << t << " key " << j << ": " << by[0][i] << " vs " << by[1][i];
        ASSERT_EQ(std::memcmp(&by[0][i], &gs[i], 4), 0) << "token " << t << " key " << j;
      }
  }

  std::vector<float> all_ref, all_gpu, keys;
  for (int64_t t = 0; t < T; ++t) {
    const size_t si = step.seq_index(t);
    const int64_t pos = step.pos[size_t(t)], n = (pos + 1) / m;
    SCOPED_TRACE(testing::Message() << "token " << t << " pos " << pos << " visible " << n);
    keys.resize(size_t(n * dim));
    for (int64_t j = 0; j < n; ++j) get_key(hv, step.table(si), j, keys.data() + j * dim, dim);
    std::vector<float> ref_scores;
    const std::vector<int32_t> ref =
        ops::indexer_topk_ref({q.data() + t * heads * dim, w.data() + t * heads, heads, dim}, keys.data(), n, topk,
                              &ref_scores);
    const float* g = gs.data() + t * max_visible;
    for (int64_t j = 0; j < n; ++j) {
      all_ref.push_back(ref_scores[size_t(j)]);
      all_gpu.push_back(g[j]);
    }
    const int32_t* o = go.data() + t * topk;
    // (2) exact against the GPU's own scores
    const std::vector<int32_t> own = topk_of(g, n, topk);
    for (int64_t i = 0; i < topk; ++i)
      ASSERT_EQ(o[i], i < int64_t(own.size()) ? own[size_t(i)] : -1) << "slot " << i;
    // (3) against the reference: differences only at near-ties with the k-th score
    if (n > topk) {
      std::vector<float> sorted = ref_scores;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float kth = sorted[size_t(topk - 1)], range = sorted.front() - sorted.back();
      std::vector<int32_t> diff;
      std::set_symmetric_difference(ref.begin(), ref.end(), own.begin(), own.end(), std::back_inserter(diff));
      for (int32_t j : diff) EXPECT_LE(std::fabs(ref_scores[size_t(j)] - kth), 1e-5f * range) << "index " << j;
    } else {
      EXPECT_EQ(own, ref);
    }
  }
  EXPECT_LT(normalized_error(all_gpu, all_ref), 1e-5);
}

// Planted score rows for the top-k alone. Row r has n = pos + 1 candidates (m = 1); pattern r % 6.
float planted(int64_t r, int64_t j, int64_t n, std::mt19937& g) {
  static constexpr float kFew[5] = {0.0f, -0.0f, 1.0f, 2.0f, -1.0f};
  const int pattern = int(r % 6);
  if (pattern == 0) return 1.0f;                 // all equal
  if (pattern == 1) return kFew[g() % 5];        // few values, signed zeros
  if (pattern == 2) {                            // distinct only in the low 12 bits (the later passes decide)
    const uint32_t b = 0x3f800000u + (g() % 4096u);
    float f = 0.0f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (pattern == 3) return std::uniform_real_distribution<float>(-3.0f, 3.0f)(g);  // distinct
  if (pattern == 4) return float(int64_t(g() % 3));  // 3 values: the k-th inside a tie group
  return j < n / 2 ? 0.5f : -0.5f;                   // two halves
}

void run_select(int64_t topk, const std::vector<int64_t>& ns, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "topk " << topk);
  std::vector<SeqSpec> seqs;
  for (size_t i = 0; i < ns.size(); ++i) seqs.push_back({int32_t(i % 8), ns[i] - 1, 1});
  TestStep step(std::move(seqs), 4096);
  const int64_t T = step.T;
  int64_t max_visible = 0;
  for (int64_t n : ns) max_visible = std::max(max_visible, n);
  std::vector<float> sc(size_t(T * max_visible), std::nanf(""));
  std::mt19937 g(seed);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < ns[size_t(t)]; ++j) sc[size_t(t * max_visible + j)] = planted(t, j, ns[size_t(t)], g);
  auto dsc = to_device(sc);
  cuda::DeviceBuffer<int32_t> out;
  ASSERT_TRUE(out.alloc(size_t(T * topk)).is_ok());
  cudaMemset(out.data(), 0x7f, out.size() * 4);
  const ops::cuda::IndexerCudaParams p{64, 128, 1, topk};
  ops::cuda::detail::launch_indexer_select(step.dev, p, dsc.data(), max_visible, out.data(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto go = to_host(out, out.size());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = ns[size_t(t)];
    SCOPED_TRACE(testing::Message() << "row " << t << " pattern " << t % 6 << " candidates " << n);
    const std::vector<int32_t> want = topk_of(sc.data() + t * max_visible, n, topk);
    const int32_t* o = go.data() + t * topk;
    for (int64_t i = 0; i < topk; ++i)
      ASSERT_EQ(o[i], i < int64_t(want.size()) ? want[size_t(i)] : -1) << "slot " << i;
  }
}

}  // namespace

TEST(GpuIndexer, SmallRaggedStep) {
  DSI_SKIP_WITHOUT_GPU();
  // pos 0..2: nothing visible; short prompts: fewer than topk; a longer chunk crossing many windows.
  run_case(2, 64, 3, 16, {{0, 0, 9}, {1, 40, 1}, {2, 17, 30}}, 300);
}

TEST(GpuIndexer, FlashSizes) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(64, 128, 512, 128, {{0, 3990, 12}, {1, 4093, 1}, {2, 500, 3}, {3, 2047, 2}}, 400);
}

TEST(GpuIndexer, SixteenThousandVisible) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(64, 128, 512, 128, {{0, 65530, 2}}, 500);
}

TEST(GpuIndexer, Fp8KeysTensorCoreScoresFp32Queries) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(64, 128, 512, 128, {{0, 3990, 12}, {1, 4093, 1}, {2, 500, 3}, {3, 2047, 2}, {4, 9, 40}}, 600, true,
           QMode::Fp32);
  // 600 tokens x up to 650 keys: enough blocks for 4 key tiles a block (the prefill launch), the second block partial.
  run_case(64, 128, 512, 128, {{0, 2000, 600}}, 650, true, QMode::Fp32);
}

TEST(GpuIndexer, Fp8KeysTensorCoreScoresBf16ExactQueries) {
  DSI_SKIP_WITHOUT_GPU();
  run_case(64, 128, 512, 128, {{0, 3990, 12}, {1, 2051, 2}, {2, 100, 30}}, 700, true, QMode::Bf16Exact);
  run_case(20, 128, 64, 128, {{0, 1000, 9}, {1, 60000, 1}}, 800, true, QMode::Bf16Exact);  // 20 heads: padding rows
  run_case(64, 128, 512, 128, {{0, 2000, 600}}, 850, true, QMode::Bf16Exact);  // 4 key tiles a block
  // Sequences of 1-7 tokens: four-token blocks holding several runs; a prefill from 0 (causal masks per token).
  run_case(64, 128, 512, 128, {{0, 0, 301}, {1, 77, 5}, {2, 3, 1}, {3, 1500, 7}, {4, 800, 2}, {5, 5000, 3}}, 870, true,
           QMode::Bf16Exact);
}

TEST(GpuIndexer, TopkPlantedTiesExact) {
  DSI_SKIP_WITHOUT_GPU();
  // k = candidates, k + 1, k - 1, small and large rows; 16,384 = the shared-memory cache exactly, beyond it global.
  const std::vector<int64_t> ns = {1, 511, 512, 513, 1000, 1024, 3000, 4096, 8191, 16384, 16385, 20000,
                                   5, 700, 2048, 9000, 12345, 600};
  run_select(512, ns, 900);
  run_select(7, ns, 901);
  run_select(1, {1, 2, 3, 100, 5000, 17000}, 902);
}
