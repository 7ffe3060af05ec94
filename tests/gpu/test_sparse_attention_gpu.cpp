// GPU parity of sparse attention (+ inverse RoPE) and the ring write against the CPU forward's token-by-token
// walk (ring write, key list = window then compressed entries, sparse_attention_ref, rope_apply_ref inverse) on
// ragged steps: decode tokens, chunks starting at 0 and mid-sequence, chunks longer than the ring; sliding, CSA
// (indexer lists with -1 padding) and HCA layers; with and without key splits; small and Flash sizes (64 heads x
// 512, window 128, topk 512, positions ~4000). The ring starts with random rows (earlier steps' keys), the
// output is NaN-poisoned. fp32 kernel threshold 1e-5: fp32 dot products, online softmax and accumulation against
// a double two-pass reference (observed differences are ~1e-6). The ring after ring_write must equal the
// reference ring exactly (copies).
//
// Tensor-core kernel (head_dim 512 only): threshold kTcTol = 1e-2 on ||o - ref|| / ||ref||, from bf16 rounding
// (unit roundoff u = 2^-9, a uniform relative error of std u/sqrt(3) ~ 1.1e-3 per rounding). q (amp 4) and k
// rounded: each product q_i k_i has relative error std ~ 1.6e-3, so a score s = scale * sum q_i k_i (rms ~ 1.3
// here) is off by ~ scale * sqrt(512) * rms(q_i k_i) * 1.6e-3 ~ 2e-3 absolute, i.e. each weight p_j is off by
// ~2e-3 relative; p rounded to bf16 adds 1.1e-3, V = k rounded 1.1e-3. o = sum w_j v_j / sum w_j with random-sign
// v: weight errors and V errors average like o itself, so ||do|| / ||o|| ~ sqrt(2.4^2 + 1.1^2) e-3 ~ 3e-3 for
// every key count (one key: only the p-vs-sink balance and V's rounding). 1e-2 is ~3x that; a wrong fragment,
// mask or split gives errors of order 1. The same bound holds against the fp32 kernel; two runs must agree bitwise.
#include <gtest/gtest.h>

#include "attn_test_util.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {

struct Dims {
  int64_t H, hd, rd, W, hca_ratio, topk, block_size;
  float sink_amp = 2.0f;  // sink logits uniform in +-[0.05, 1) * sink_amp
};

constexpr double kTcTol = 1e-2;  // see the header comment

// The kernel under test on the uploaded state: fp32 (tc = false) or tensor-core. NaN-poisoned output.
std::vector<float> run_gpu(const TestStep& step, const ops::LayerStateView& dv, ops::cuda::SparseAttentionCudaParams p,
                           const float* dq, const float* dkv, size_t n, bool tc) {
  cuda::DeviceBuffer<float> o, ws;
  EXPECT_TRUE(o.alloc(n).is_ok());
  cudaMemset(o.data(), 0xff, n * 4);
  const int64_t wsn = ops::cuda::sparse_attention_workspace_floats(step.T, p.heads, p.head_dim, p.num_splits);
  if (wsn > 0) {
    EXPECT_TRUE(ws.alloc(size_t(wsn)).is_ok());
    cudaMemset(ws.data(), 0xff, size_t(wsn) * 4);
  }
  p.tensor_cores = tc;
  const Status s = ops::cuda::sparse_attention(step.dev, dv, p, dq, dkv, o.data(), ws.data(), nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return to_host(o, n);
}

// Whole-step and per-token error (so one wrong token cannot hide among many right ones).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const TestStep& step, int64_t per_token,
                  double tol, const char* what) {
  EXPECT_LT(normalized_error(got, ref), tol) << what;
  for (int64_t t = 0; t < step.T; ++t) {
    std::vector<float> a(got.begin() + t * per_token, got.begin() + (t + 1) * per_token);
    std::vector<float> b(ref.begin() + t * per_token, ref.begin() + (t + 1) * per_token);
    EXPECT_LT(normalized_error(a, b), tol) << what << " token " << t << " pos " << step.pos[size_t(t)];
  }
}

// tc = false: the fp32 kernel against the reference. tc = true: the tensor-core kernel against the reference and
// the fp32 kernel, and twice (bitwise).
void run_case(const Dims& dm, const std::vector<SeqSpec>& seqs, int64_t layer, int64_t splits, uint32_t seed,
              bool tc = false) {
  SCOPED_TRACE(testing::Message() << "hd " << dm.hd << " H " << dm.H << " layer " << layer << " splits " << splits
                                  << " tc " << tc << " seqs " << seqs.size());
  const io::ModelConfig cfg = attn_config(dm.hd, dm.rd, dm.W, 64, {io::AttnType::Sliding, io::AttnType::CSA, io::AttnType::HCA},
                                          {0, 4, dm.hca_ratio});
  TestStep step(seqs, dm.block_size);
  int32_t num_slots = 1;
  for (const auto& q : seqs) num_slots = std::max(num_slots, q.slot + 1);
  TestState st(cfg, num_slots, step.num_blocks(), dm.block_size, seed);
  st.upload();
  const int64_t T = step.T, H = dm.H, hd = dm.hd, m = layer == 0 ? 0 : (layer == 1 ? 4 : dm.hca_ratio);
  const bool csa = layer == 1;
  const auto q = random_vec(size_t(T * H * hd), seed + 1, 4.0f), kv = random_vec(size_t(T * hd), seed + 2);
  const auto sinks = random_vec(size_t(H), seed + 3, dm.sink_amp);
  io::RopeParams rp;
  rp.theta = 160000.0;
  const std::vector<float> inv = ops::rope_inv_freq(rp, dm.rd);
  // CSA: a random sorted selection of min(topk, visible) entries per token, -1 padded.
  std::vector<int32_t> sel(size_t(csa ? T * dm.topk : 1), -1);
  std::mt19937 g(seed + 4);
  if (csa)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = (step.pos[size_t(t)] + 1) / m;
      std::vector<int32_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), g);
      all.resize(size_t(std::min(n, dm.topk)));
      std::sort(all.begin(), all.end());
      std::copy(all.begin(), all.end(), sel.begin() + t * dm.topk);
    }

  // CPU walk
  const ops::LayerStateView hv = st.host_view(layer);
  std::vector<float> ref(size_t(T * H * hd));
  const ops::SparseAttentionParams ap{H, hd, float(1.0 / std::sqrt(double(hd))), sinks.data()};
  std::vector<const float*> keys;
  for (int64_t t = 0; t < T; ++t) {
    const size_t s = step.seq_index(t);
    const int64_t p = step.pos[size_t(t)];
    std::copy_n(kv.data() + t * hd, hd, hv.ring_row(step.slot[s], p));
    keys.clear();
    for (int64_t qp = std::max<int64_t>(0, p - dm.W + 1); qp <= p; ++qp) keys.push_back(hv.ring_row(step.slot[s], qp));
    if (layer == 2)
      for (int64_t j = 0; j < (p + 1) / m; ++j) keys.push_back(hv.entry(step.table(s), j));
    if (csa)
      for (int64_t i = 0; i < dm.topk; ++i)
        if (sel[size_t(t * dm.topk + i)] >= 0) keys.push_back(hv.entry(step.table(s), sel[size_t(t * dm.topk + i)]));
    float* ot = ref.data() + t * H * hd;
    ops::sparse_attention_ref(ap, q.data() + t * H * hd, keys.data(), int64_t(keys.size()), ot);
    for (int64_t h = 0; h < H; ++h) ops::rope_apply_ref(ot + h * hd, hd, dm.rd, inv, p, true, 1.0f);
  }

  // GPU
  auto dq = to_device(q), dkv = to_device(kv), dsinks = to_device(sinks), dinv = to_device(inv);
  auto dsel = to_device(sel);
  ops::cuda::SparseAttentionCudaParams p;
  p.heads = H;
  p.head_dim = hd;
  p.scale = float(1.0 / std::sqrt(double(hd)));
  p.sinks = dsinks.data();
  p.window = dm.W;
  p.m = m;
  p.topk_idx = csa ? dsel.data() : nullptr;
  p.topk = csa ? dm.topk : 0;
  p.rope_dim = dm.rd;
  p.inv_freq = dinv.data();
  p.num_splits = splits;
  const ops::LayerStateView dv = st.device_view(layer);
  const auto got = run_gpu(step, dv, p, dq.data(), dkv.data(), ref.size(), false);
  if (!tc) {
    expect_close(got, ref, step, H * hd, 1e-5, "fp32 kernel vs reference");
  } else {
    const auto got_tc = run_gpu(step, dv, p, dq.data(), dkv.data(), ref.size(), true);
    expect_close(got_tc, ref, step, H * hd, kTcTol, "tensor-core kernel vs reference");
    expect_close(got_tc, got, step, H * hd, kTcTol, "tensor-core kernel vs fp32 kernel");
    const auto again = run_gpu(step, dv, p, dq.data(), dkv.data(), ref.size(), true);
    int64_t diff = 0;
    for (size_t i = 0; i < got_tc.size(); ++i) diff += !same(got_tc[i], again[i]);
    EXPECT_EQ(diff, 0) << "tensor-core kernel, second run differs";
  }
  Status s = ops::cuda::ring_write(step.dev, dv, dkv.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto gslots = to_host(st.dslots, st.slots.size());
  int64_t bad = 0;
  for (size_t i = 0; i < gslots.size(); ++i) bad += !same(gslots[i], st.slots[i]);
  EXPECT_EQ(bad, 0) << "ring rows after ring_write";
}

// Decode batches of n sequences (one token each), slot i, positions spread over 0 .. ~step * n: the first ones
// before the window fills, the rest after.
std::vector<SeqSpec> decode_batch(int32_t n, int64_t first, int64_t step) {
  std::vector<SeqSpec> v;
  for (int32_t i = 0; i < n; ++i) v.push_back({i, first + i * step, 1});
  return v;
}

// A chunk from 0 longer than the ring, a decode token, a mid-sequence chunk longer than the ring, a short chunk.
const std::vector<SeqSpec> kSmallSeqs = {{0, 0, 13}, {1, 30, 1}, {2, 9, 20}, {3, 100, 3}};
const Dims kSmall{4, 64, 16, 8, 8, 5, 16};
const std::vector<SeqSpec> kFlashSeqs = {{0, 3999, 1}, {1, 4090, 5}, {2, 60, 140}};
const Dims kFlash{64, 512, 64, 128, 128, 512, 128};
// The tensor-core kernel's cases use ratio 4 / 128 as Flash; a smaller top-k (and window) where a case wants many
// -1 pads or a partly filled window.

}  // namespace

TEST(GpuSparseAttention, SmallAllLayerTypes) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 3}) run_case(kSmall, kSmallSeqs, layer, splits, 600 + uint32_t(layer * 10 + splits));
}

TEST(GpuSparseAttention, SmallOddHeadDim) {
  DSI_SKIP_WITHOUT_GPU();  // head_dim 136: 34 float4 chunks, lanes 0..1 own a second chunk; 20 heads (2 per warp, last block partial)
  const Dims d{20, 136, 16, 8, 8, 5, 16};
  for (int64_t layer : {1, 2}) run_case(d, kSmallSeqs, layer, 2, 650 + uint32_t(layer));
}

TEST(GpuSparseAttention, FlashSizes) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 4}) run_case(kFlash, kFlashSeqs, layer, splits, 700 + uint32_t(layer * 10 + splits));
}

TEST(GpuSparseAttentionTc, FlashSizesRaggedSteps) {
  DSI_SKIP_WITHOUT_GPU();  // decode at ~4000, a short chunk, a 140-token chunk across the window fill
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 4}) run_case(kFlash, kFlashSeqs, layer, splits, 800 + uint32_t(layer * 10 + splits), true);
}

TEST(GpuSparseAttentionTc, DecodeBatch1) {
  DSI_SKIP_WITHOUT_GPU();  // after the window fills (full 512 top-k) and before it (pos 40: 10 entries + 502 pads)
  for (int64_t pos : {4095, 40})
    for (int64_t layer : {0, 1, 2})
      for (int64_t splits : {1, 10}) run_case(kFlash, {{0, pos, 1}}, layer, splits, 820 + uint32_t(layer + splits), true);
}

TEST(GpuSparseAttentionTc, DecodeBatch3) {
  DSI_SKIP_WITHOUT_GPU();  // positions 5, 130, 2000; top-k 300 (pads for the first two, a real selection for the last)
  const Dims d{64, 512, 64, 128, 128, 300, 128};
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 3}) run_case(d, {{0, 5, 1}, {1, 130, 1}, {2, 2000, 1}}, layer, splits, 840 + uint32_t(layer), true);
}

TEST(GpuSparseAttentionTc, DecodeBatch64) {
  DSI_SKIP_WITHOUT_GPU();  // positions 0, 19, .., 1197: 7 before the window fills; CSA lists from 0 to 299 entries
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 2}) run_case(kFlash, decode_batch(64, 0, 19), layer, splits, 860 + uint32_t(layer), true);
}

TEST(GpuSparseAttentionTc, HeadGroupsAndPartialTiles) {
  DSI_SKIP_WITHOUT_GPU();  // 80 heads: a full and a partial (16 of 64) head group; window 40, keys not a multiple of 32
  const Dims d{80, 512, 64, 40, 8, 7, 16};
  for (int64_t layer : {0, 1, 2})
    for (int64_t splits : {1, 3}) run_case(d, kSmallSeqs, layer, splits, 880 + uint32_t(layer), true);
}

// Split-KV path of the fast mode (tensor-core kernel, combine with one thread per split): decode batches 1, 2, 7
// from one split to one per tile and beyond (empty splits: max -inf, sum 0), the heuristic's own count, short key
// lists (position 0: one key; 41: a partial window, no entries), sinks strong enough to hold ~half the mass.
TEST(GpuSparseAttentionTc, SplitPathDecodeBatches) {
  DSI_SKIP_WITHOUT_GPU();
  Dims strong = kFlash;
  strong.sink_amp = 8.0f;
  const std::vector<std::vector<SeqSpec>> batches = {
      {{0, 4095, 1}}, {{0, 0, 1}}, {{0, 41, 1}}, {{0, 3000, 1}, {1, 700, 1}}, decode_batch(7, 5, 600)};
  uint32_t seed = 900;
  for (const auto& seqs : batches)
    for (int64_t layer : {1, 2}) {
      const int64_t T = int64_t(seqs.size()), keys = 128 + (layer == 1 ? 512 : 4096 / 128);
      const int64_t heur = ops::cuda::sparse_attention_tc_splits(T, 64, keys, 132);
      for (int64_t splits : {int64_t(1), int64_t(2), int64_t(7), heur, int64_t(20), int64_t(33)})
        run_case(splits == 7 ? strong : kFlash, seqs, layer, splits, ++seed, true);
    }
}

// Key lists longer than one 256-row resolve chunk (the kernel resolves row pointers 256 at a time, 8 tiles ahead):
// CSA top-1024 at 8191 (1152 keys: 36 tiles, 5 chunks) and HCA ratio 16 at 8000 (628 keys), split so that a split
// starts mid-chunk; 130 splits take the original combine (over kFastCombineSplits).
TEST(GpuSparseAttentionTc, SplitPathLongKeyLists) {
  DSI_SKIP_WITHOUT_GPU();
  const Dims d{64, 512, 64, 128, 16, 1024, 128};
  uint32_t seed = 950;
  for (int64_t splits : {1, 3, 5, 130}) {
    run_case(d, {{0, 8191, 1}, {1, 6000, 1}}, 1, splits, ++seed, true);
    run_case(d, {{0, 8000, 1}}, 2, splits, ++seed, true);
  }
}

TEST(GpuSparseAttentionTc, RejectsOtherHeadDims) {
  DSI_SKIP_WITHOUT_GPU();
  const io::ModelConfig cfg = attn_config(64, 16, 8, 64, {io::AttnType::Sliding}, {0});
  TestState st(cfg, 1, 1, 16, 1);
  st.upload();
  ops::cuda::SparseAttentionCudaParams p;
  p.heads = 4;
  p.head_dim = 64;
  p.window = 8;
  float sink = 0;
  p.sinks = &sink;
  p.tensor_cores = true;
  ops::StepDevice step;
  const Status s = ops::cuda::sparse_attention(step, st.device_view(0), p, nullptr, nullptr, nullptr, nullptr, nullptr);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("tensor-core"), std::string::npos) << s.message();
}

TEST(GpuSparseAttention, RejectsRingSmallerThanWindow) {
  DSI_SKIP_WITHOUT_GPU();
  const io::ModelConfig cfg = attn_config(64, 16, 8, 64, {io::AttnType::Sliding}, {0});
  TestState st(cfg, 1, 1, 16, 1);
  st.upload();
  ops::cuda::SparseAttentionCudaParams p;
  p.heads = 4;
  p.head_dim = 64;
  p.window = 16;  // ring has 8 rows
  float sink = 0;
  p.sinks = &sink;
  ops::StepDevice step;
  const Status s = ops::cuda::sparse_attention(step, st.device_view(0), p, nullptr, nullptr, nullptr, nullptr, nullptr);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ring_rows"), std::string::npos) << s.message();
}
