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
// blocks whose tokens belong to two or more sequences, tokens seeing fewer keys than the block's last); the wgmma
// kernel (8 tokens a block, its own fp32 sum order) takes checks (1)-(3) on its own scores and their selection.
// Top-k alone (planted scores, m = 1 so a row at position p has p + 1 candidates): rows of equal scores, a few
// values with -0.0 / +0.0, values sharing their high bits, +-inf, one pass-0 bin holding the whole row, a crowded
// boundary bin, k = candidates, k = candidates + 1, k > candidates, rows longer than the shared-memory cache; the
// selection must equal the CPU rule exactly, in the full-scan form, in the candidate form (pass 0's boundary bin
// gathered) and in the sample form (the keys above a sampled threshold gathered) at several slot counts, including
// counts the crowded rows overflow and rows made to mislead the sample, up to 131,072 keys; with NaN the forms agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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

  auto check_against_reference = [&](const std::vector<float>& gs, const std::vector<int32_t>& go) {
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
  const double err = normalized_error(all_gpu, all_ref);
  std::printf("[indexer] normalised score error %.3e (fp8 %d)\n", err, int(fp8));
  EXPECT_LT(err, 1e-5);
  };
  // The wgmma kernel (fast mode's prefill plan; kIdxWgTokens tokens a block, its own fp32 sum order): its scores and
  // its selection take the same checks as the plan's below.
  std::vector<float> gs8;
  std::vector<int32_t> go8;
  if (fp8) {
    cudaMemset(scores.data(), 0xff, scores.size() * 4);
    cudaMemset(out.data(), 0x7f, out.size() * 4);
    ops::cuda::detail::launch_indexer_scores_tc(step.dev, st.device_view(), p, dq.data(), dw.data(), max_visible,
                                                scores.data(), nullptr, ops::cuda::detail::kIdxWgTokens);
    ops::cuda::detail::launch_indexer_select(step.dev, p, scores.data(), max_visible, out.data(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    gs8 = to_host(scores, scores.size());
    go8 = to_host(out, out.size());
  }
  for (int kernel = 0; kernel < (fp8 ? 2 : 1); ++kernel) {
    SCOPED_TRACE(kernel == 0 ? "plan" : "wgmma");
    check_against_reference(kernel == 0 ? gs : gs8, kernel == 0 ? go : go8);
  }
}

// Planted score rows for the top-k alone. Row r has n = pos + 1 candidates (m = 1); pattern r % kPatterns.
constexpr int kPatterns = 12;
// Whether key j of an n-key row is one of the sample form's 1,024 strided keys (i n / min(n, 1,024)).
bool sampled(int64_t j, int64_t n) {
  const int64_t ns = std::min<int64_t>(n, 1024), i = j * ns / n;
  return i * n / ns == j || (i + 1 < ns && (i + 1) * n / ns == j);
}
float planted(int64_t r, int64_t j, int64_t n, std::mt19937& g, bool with_nan) {
  static constexpr float kFew[5] = {0.0f, -0.0f, 1.0f, 2.0f, -1.0f};
  const float inf = std::numeric_limits<float>::infinity();
  if (with_nan && g() % 17 == 0) return g() % 2 ? std::nanf("") : -std::nanf("");
  const int pattern = int(r % kPatterns);
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
  if (pattern == 5) return j < n / 2 ? 0.5f : -0.5f;  // two halves
  if (pattern == 6) {  // +-inf among distinct values: +inf always taken, -inf only when k reaches it
    const uint32_t x = g() % 16;
    return x == 0 ? inf : x == 1 ? -inf : std::normal_distribution<float>(0.0f, 1.0f)(g);
  }
  if (pattern == 7) return std::uniform_real_distribution<float>(1.0f, 1.25f)(g);  // one pass-0 bin: all candidates
  // Rows that mislead the sample form's threshold: its keys above the rest (too few keys reach it), below the rest
  // (all reach it), or one value among gaussians (about half reach it; ties at the threshold).
  if (pattern == 9) return sampled(j, n) ? 8.0f + float(g() % 64) : std::normal_distribution<float>(0.0f, 1.0f)(g);
  if (pattern == 10) return sampled(j, n) ? -8.0f : std::normal_distribution<float>(0.0f, 1.0f)(g);
  if (pattern == 11) return sampled(j, n) ? 0.0f : std::normal_distribution<float>(0.0f, 1.0f)(g);
  // A gaussian row whose pass-0 boundary bin is crowded with copies of one value (ties across the k-th key).
  const float x = std::normal_distribution<float>(0.0f, 1.0f)(g);
  return g() % 4 == 0 ? 2.125f : x;
}

// A select form of launch_indexer_select: {-1, false} = the plan (nullptr), else {cand_slots, sample}.
using Form = ops::cuda::detail::IdxSelForm;
constexpr Form kPlan{-1, false, 0};

// The selection of every kernel form in `forms` on planted rows: equal to the CPU rule exactly and to each other
// (rows holding NaN: to each other only; the CPU rule does not order NaN).
void run_select(int64_t topk, const std::vector<int64_t>& ns, uint32_t seed,
                std::vector<Form> forms = {kPlan, {0, false}}, bool with_nan = false) {
  SCOPED_TRACE(testing::Message() << "topk " << topk);
  std::vector<SeqSpec> seqs;
  for (size_t i = 0; i < ns.size(); ++i) seqs.push_back({int32_t(i % 8), ns[i] - 1, 1});
  TestStep step(std::move(seqs), 4096);
  const int64_t T = step.T;
  int64_t max_visible = 0;
  for (int64_t n : ns) max_visible = std::max(max_visible, n);
  std::vector<float> sc(size_t(T * max_visible), std::nanf(""));
  std::mt19937 g(seed);
  std::vector<bool> has_nan(size_t(T), false);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < ns[size_t(t)]; ++j) {
      const float x = planted(t, j, ns[size_t(t)], g, with_nan);
      sc[size_t(t * max_visible + j)] = x;
      if (std::isnan(x)) has_nan[size_t(t)] = true;
    }
  auto dsc = to_device(sc);
  cuda::DeviceBuffer<int32_t> out;
  ASSERT_TRUE(out.alloc(size_t(T * topk)).is_ok());
  const ops::cuda::IndexerCudaParams p{64, 128, 1, topk};
  std::vector<std::vector<int32_t>> by_form;
  for (const Form& form : forms) {
    cudaMemset(out.data(), 0x7f, out.size() * 4);  // poison: 0x7f7f7f7f is no valid index and not -1
    ops::cuda::detail::launch_indexer_select(step.dev, p, dsc.data(), max_visible, out.data(), nullptr,
                                             form.cand_slots < 0 ? nullptr : &form);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    by_form.push_back(to_host(out, out.size()));
  }
  for (size_t f = 0; f < forms.size(); ++f) {
    const auto& go = by_form[f];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = ns[size_t(t)];
      SCOPED_TRACE(testing::Message() << "form " << forms[f].cand_slots << (forms[f].sample ? " sample over " : "")
                                      << (forms[f].sample ? forms[f].sample_min_keys : 0) << " row " << t << " pattern " << t % kPatterns
                                      << " candidates " << n << " NaN " << has_nan[size_t(t)]);
      const int32_t* o = go.data() + t * topk;
      if (f > 0) {
        for (int64_t i = 0; i < topk; ++i) ASSERT_EQ(o[i], by_form[0][size_t(t * topk + i)]) << "slot " << i;
      }
      if (has_nan[size_t(t)]) {  // still an ascending list of distinct visible indices
        for (int64_t i = 0; i < std::min(topk, n); ++i) {
          ASSERT_GE(o[i], 0) << "slot " << i;
          ASSERT_LT(o[i], n) << "slot " << i;
          if (i > 0) ASSERT_LT(o[i - 1], o[i]) << "slot " << i;
        }
        continue;
      }
      const std::vector<int32_t> want = topk_of(sc.data() + t * max_visible, n, topk);
      for (int64_t i = 0; i < topk; ++i)
        ASSERT_EQ(o[i], i < int64_t(want.size()) ? want[size_t(i)] : -1) << "slot " << i;
    }
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

TEST(GpuIndexer, TopkCandidateFormEqualsFullScan) {
  DSI_SKIP_WITHOUT_GPU();
  // Every pattern at sizes around K, the candidate slots and the shared-memory cache (16,384 keys; beyond it the
  // scans re-read the scores): the plan's form, the full scan and the candidate form with 1, 64, 600, 4,096 and
  // 8,192 slots (small ones send crowded rows to the full scan: both paths in one launch), and the sample form with
  // 64, 600, 2,048, 4,096 and 8,192 slots (rows whose count misses [K, slots], among them the patterns made to
  // mislead its threshold, go on in the candidate form) must give the same lists.
  std::vector<int64_t> ns;
  // 32,771: a score stride that is no multiple of 4, so rows start at every alignment (the sample form's float4 scan
  // has a head and a tail).
  for (int64_t n : {513, 600, 1100, 4097, 8192, 16384, 16385, 32768, 32771})
    for (int pattern = 0; pattern < kPatterns; ++pattern) ns.push_back(n);
  const std::vector<Form> forms = {{0, false},    kPlan,        {1, false},  {64, false},       {600, false},
                                   {4096, false}, {8192, false}, {64, true}, {600, true},       {2048, true},
                                   {4096, true},  {8192, true},  {4096, true, 8192}};
  run_select(512, ns, 910, forms);
  run_select(7, ns, 911, forms);
  run_select(1, {2, 3, 100, 5000, 17000, 40000, 2, 3, 100}, 912, forms);
  run_select(4096, {4097, 5000, 9000, 16385, 20000, 4097, 8000, 12000, 30000}, 913, forms);
  run_select(5000, {5001, 9000, 20000, 5001, 12000, 40000}, 914,
             {{0, false}, kPlan, {64, false}, {4096, false}, {8192, true}});
  // NaN scores (either sign) among every pattern: the forms agree (the CPU rule leaves NaN unordered).
  run_select(512, ns, 915, forms, true);
  // Rows of 65,536 and 131,072 keys (a 512K prompt's rows at ratio 4), every pattern, K 512 and 2,048; then with a
  // stride of 131,071 (rows at every alignment).
  std::vector<int64_t> longer;
  for (int64_t n : {65536, 131072})
    for (int pattern = 0; pattern < kPatterns; ++pattern) longer.push_back(n);
  const std::vector<Form> few = {{0, false}, kPlan, {4096, false}, {600, true}, {4096, true}, {8192, true}};
  run_select(512, longer, 916, few);
  run_select(2048, longer, 917, few);
  longer.push_back(131071);  // unaligned rows
  run_select(512, longer, 918, few);
}
