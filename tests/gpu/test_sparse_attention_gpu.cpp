// GPU parity of sparse attention (+ inverse RoPE) and the ring write against the CPU forward's token-by-token
// walk (ring write, key list = window then compressed entries, sparse_attention_ref, rope_apply_ref inverse) on
// ragged steps: decode tokens, chunks starting at 0 and mid-sequence, chunks longer than the ring; sliding, CSA
// (indexer lists with -1 padding) and HCA layers; with and without key splits; small and Flash sizes (64 heads x
// 512, window 128, topk 512, positions ~4000). The ring starts with random rows (earlier steps' keys), the
// output is NaN-poisoned. Threshold 1e-5: fp32 dot products, online softmax and accumulation against a double
// two-pass reference (observed differences are ~1e-6). The ring after ring_write must equal the reference ring
// exactly (copies).
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
};

void run_case(const Dims& dm, const std::vector<SeqSpec>& seqs, int64_t layer, int64_t splits, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "hd " << dm.hd << " layer " << layer << " splits " << splits);
  const io::ModelConfig cfg = attn_config(dm.hd, dm.rd, dm.W, 64, {io::AttnType::Sliding, io::AttnType::CSA, io::AttnType::HCA},
                                          {0, 4, dm.hca_ratio});
  TestStep step(seqs, dm.block_size);
  TestState st(cfg, 8, step.num_blocks(), dm.block_size, seed);
  st.upload();
  const int64_t T = step.T, H = dm.H, hd = dm.hd, m = layer == 0 ? 0 : (layer == 1 ? 4 : dm.hca_ratio);
  const bool csa = layer == 1;
  const auto q = random_vec(size_t(T * H * hd), seed + 1, 4.0f), kv = random_vec(size_t(T * hd), seed + 2);
  const auto sinks = random_vec(size_t(H), seed + 3, 2.0f);
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
  cuda::DeviceBuffer<float> o, ws;
  ASSERT_TRUE(o.alloc(ref.size()).is_ok());
  cudaMemset(o.data(), 0xff, ref.size() * 4);
  const int64_t wsn = ops::cuda::sparse_attention_workspace_floats(T, H, hd, splits);
  if (wsn > 0) {
    ASSERT_TRUE(ws.alloc(size_t(wsn)).is_ok());
    cudaMemset(ws.data(), 0xff, size_t(wsn) * 4);
  }
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
  Status s = ops::cuda::sparse_attention(step.dev, dv, p, dq.data(), dkv.data(), o.data(), ws.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = ops::cuda::ring_write(step.dev, dv, dkv.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto got = to_host(o, ref.size());
  EXPECT_LT(normalized_error(got, ref), 1e-5);
  // per token as well, so one wrong token cannot hide among many right ones
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> a(got.begin() + t * H * hd, got.begin() + (t + 1) * H * hd);
    std::vector<float> b(ref.begin() + t * H * hd, ref.begin() + (t + 1) * H * hd);
    EXPECT_LT(normalized_error(a, b), 1e-5) << "token " << t << " pos " << step.pos[size_t(t)];
  }
  const auto gslots = to_host(st.dslots, st.slots.size());
  int64_t bad = 0;
  for (size_t i = 0; i < gslots.size(); ++i) bad += !same(gslots[i], st.slots[i]);
  EXPECT_EQ(bad, 0) << "ring rows after ring_write";
}

// A chunk from 0 longer than the ring, a decode token, a mid-sequence chunk longer than the ring, a short chunk.
const std::vector<SeqSpec> kSmallSeqs = {{0, 0, 13}, {1, 30, 1}, {2, 9, 20}, {3, 100, 3}};
const Dims kSmall{4, 64, 16, 8, 8, 5, 16};
const std::vector<SeqSpec> kFlashSeqs = {{0, 3999, 1}, {1, 4090, 5}, {2, 60, 140}};
const Dims kFlash{64, 512, 64, 128, 128, 512, 128};

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
