// GPU parity of the DeepSeek-V4.1 CSA2 kernels (ops/csa2/csa2_cuda.h) against the CPU reference ops.
// Thresholds: the QAT quantizers are the same fp32 operations on both sides: bit-identical. Pooling is double on
// both sides (exp may differ by an ulp in double, invisible after the fp32 cast): 1e-6 relative. The emission
// without QAT (RMSNorm in double, RoPE with double sincos) is within 1e-6; with QAT an ulp in the norm can flip
// one FP4 rounding, so >= 99.5 % of the elements identical and a normalised error < 1e-2. Indexer scores are
// double dot products in another summation order: 1e-6 relative; the selections are compared exactly against the
// CPU selection run on the GPU's own scores (so that only the selection logic is under test).
#include <gtest/gtest.h>

#include "ops/csa2/csa2.h"
#include "ops/csa2/csa2_cuda.h"
#include "core/dtypes.h"
#include "model/deepseek_v41_numerics.h"
#include "ops/gemm/gemm_official_cuda.h"
#include "ops/qat/qat.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "weight_gen.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "v41_test_util.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;
using ops::cuda::QatKind;

namespace {

constexpr int64_t kBlock = 16;  // tokens per block in these tests

std::vector<float> inv_freq(int64_t rd) {
  io::RopeParams rp;
  rp.theta = 160000.0;
  return ops::rope_inv_freq(rp, rd);
}

}  // namespace

TEST(GpuV41Ops, QatMatchesReference) {
  DSI_SKIP_WITHOUT_GPU();
  struct Case { int64_t dim, block; QatKind kind; };
  for (const Case c : {Case{512, 32, QatKind::Fp8Ue8m0}, Case{128, 32, QatKind::Fp4Ue8m0}, Case{512, 16, QatKind::Fp4E4m3},
                       Case{48, 32, QatKind::Fp8Ue8m0}}) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << " block " << c.block << " kind " << int(c.kind));
    const int64_t rows = 37;
    std::vector<float> x = random_vec(size_t(rows * c.dim), 11, 3.0f);
    for (int64_t i = 0; i < rows * c.dim; i += 7) x[size_t(i)] *= 1e-6f;  // tiny blocks hit the amax floors
    for (int64_t i = 0; i < c.dim; ++i) x[size_t(i)] = 0.0f;              // an all-zero row
    auto dx = to_device(x);
    ASSERT_TRUE(ops::cuda::csa2_qat(dx.data(), rows, c.dim, c.block, c.kind, nullptr).is_ok());
    const auto got = to_host(dx, x.size());
    for (int64_t r = 0; r < rows; ++r) {
      float* v = x.data() + r * c.dim;
      if (c.kind == QatKind::Fp8Ue8m0) ops::fp8_qat_ref(v, c.dim, c.block);
      else ops::fp4_qat_ref(v, c.dim, c.block, c.kind == QatKind::Fp4E4m3);
    }
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) bad += !same(got[i], x[i]);
    EXPECT_EQ(bad, 0);
  }
}

// Official numerics on the GPU: the official GEMM (ops/gemm/gemm_official_cuda.h) bit for bit the CPU's
// model::v41::Num::linear in its three modes (FP8 / FP4 weights quantized per 1x32 with block partials added in K order,
// a K that is not a multiple of 32 included; BF16; F32), with x read through a row stride and the grouped form of
// wo_a; and bf16 rounding of a column range (round_bf16_cuda) bit for bit round_bf16.
TEST(GpuV41Ops, OfficialGemmAndBf16RoundingMatchReference) {
  DSI_SKIP_WITHOUT_GPU();
  using ops::cuda::OfficialGemm;
  using ops::cuda::WeightFormat;
  model::v41::Num num;
  num.official = true;
  struct Case { WeightFormat fmt; int64_t N, K, groups; model::v41::Gemm g; };
  for (const Case c : {Case{WeightFormat::FP8_BLOCK, 48, 160, 1, model::v41::Gemm::FP8},
                       Case{WeightFormat::FP4_G32, 40, 256, 1, model::v41::Gemm::FP4},
                       Case{WeightFormat::F32, 24, 100, 1, model::v41::Gemm::FP8},
                       Case{WeightFormat::BF16, 32, 96, 1, model::v41::Gemm::BF16},
                       Case{WeightFormat::F32, 16, 64, 1, model::v41::Gemm::F32},
                       Case{WeightFormat::F32, 2 * 24, 64, 2, model::v41::Gemm::BF16}}) {
    SCOPED_TRACE(testing::Message() << "format " << int(c.fmt) << " N " << c.N << " K " << c.K << " groups " << c.groups);
    const int64_t M = 13, ldx = c.groups * c.K + 8, n = c.N / c.groups;
    const test::HostWeight hw = test::make_host_weight(c.fmt, c.N, c.K, 21, true, 32, 32);
    const auto dw = test::upload(hw);
    std::vector<float> x = random_vec(size_t(M * ldx), 9, 3.0f);
    for (int64_t i = 0; i < M * ldx; i += 7) x[size_t(i)] *= 1e-6f;  // tiny values: the act_quant amax floor
    auto dx = to_device(x);
    DeviceBuffer<float> dy;
    ASSERT_TRUE(dy.alloc(size_t(M * c.N), "y").is_ok());
    const OfficialGemm mode = c.g == model::v41::Gemm::F32    ? OfficialGemm::kF32
                              : c.g == model::v41::Gemm::BF16 ? OfficialGemm::kBf16
                                                              : OfficialGemm::kQuantized;
    ASSERT_TRUE(ops::cuda::gemm_official_cuda(dx.data(), M, ldx, dw.w, dy.data(), c.N, mode, nullptr, c.groups).is_ok());
    const auto got = to_host(dy, size_t(M * c.N));
    int64_t bad = 0;
    for (int64_t g = 0; g < c.groups; ++g) {
      model::Mat w;
      w.rows = n;
      w.cols = c.K;
      w.data.assign(hw.deq.begin() + g * n * c.K, hw.deq.begin() + (g + 1) * n * c.K);
      std::vector<float> xin(size_t(M * c.K)), want(size_t(M * n));
      for (int64_t t = 0; t < M; ++t) std::copy_n(x.data() + t * ldx + g * c.K, c.K, xin.data() + t * c.K);
      num.linear(c.g, xin.data(), M, c.K, w, want.data());
      for (int64_t t = 0; t < M; ++t)
        for (int64_t o = 0; o < n; ++o) bad += !same(got[size_t(t * c.N + g * n + o)], want[size_t(t * n + o)]);
    }
    EXPECT_EQ(bad, 0);
  }
  const int64_t rows = 29, ld = 200;
  std::vector<float> x = random_vec(size_t(rows * ld), 5, 40.0f);
  auto dx = to_device(x);
  ASSERT_TRUE(ops::cuda::round_bf16_cuda(dx.data(), rows, ld, 32, 150, nullptr).is_ok());
  const auto r = to_host(dx, x.size());
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * ld; ++i) bad += !same(r[size_t(i)], i % ld >= 32 && i % ld < 150 ? round_bf16(x[size_t(i)]) : x[size_t(i)]);
  EXPECT_EQ(bad, 0);
}

// Two ragged steps: groups completed across the step boundary read the frontier rows the first step wrote.
TEST(GpuV41Ops, PoolAcrossSteps) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t r : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "ratio " << r);
    const int64_t d = 64;
    V41State st(r, d, 32, kBlock, 4, 8, 5);
    st.upload();
    const std::vector<std::vector<SeqSpec>> steps = {{{0, 0, 7}, {1, 0, 3}, {2, 0, 1}}, {{0, 7, 1}, {1, 3, 9}, {2, 1, 1}}};
    for (size_t k = 0; k < steps.size(); ++k) {
      TestStep step(steps[k], kBlock);
      const int64_t T = step.T;
      const auto kv = random_vec(size_t(T * d), 20 + uint32_t(k)), gate = random_vec(size_t(T * d), 30 + uint32_t(k), 3.0f);
      std::vector<float> want(size_t(T * d), 0.0f);
      const ops::Csa2CompressorParams cp{r, d, st.frontier_rows};
      for (int64_t t = 0; t < T; ++t)
        ops::csa2_compress_step_ref(cp, st.host().frontier(step.slot[step.seq_index(t)]), kv.data() + t * d, gate.data() + t * d,
                                    step.pos[size_t(t)], want.data() + t * d);
      auto dkv = to_device(kv), dgate = to_device(gate);
      DeviceBuffer<float> dlat;
      ASSERT_TRUE(dlat.alloc(size_t(T * d)).is_ok());
      ASSERT_TRUE(ops::cuda::csa2_pool(step.dev, st.device(), r, d, dkv.data(), dgate.data(), dlat.data(), nullptr).is_ok());
      ASSERT_TRUE(ops::cuda::csa2_frontier_write(step.dev, st.device(), d, dkv.data(), dgate.data(), nullptr).is_ok());
      EXPECT_LE(max_rel(to_host(dlat, want.size()), want), 1e-6) << "step " << k;
      int64_t bad = 0;  // the frontier rows of the last frontier_rows positions of every chunk
      const auto gs = to_host(st.dslots, st.slots.size());
      for (size_t s = 0; s < step.seqs.size(); ++s) {
        const SeqSpec& q = step.seqs[s];
        for (int64_t p = std::max<int64_t>(q.start, q.start + q.len - st.frontier_rows); p < q.start + q.len; ++p) {
          const size_t o = size_t(q.slot * st.frontier_rows * 2 * d + (p % st.frontier_rows) * 2 * d);
          for (int64_t i = 0; i < 2 * d; ++i) bad += !same(gs[o + size_t(i)], st.slots[o + size_t(i)]);
        }
      }
      EXPECT_EQ(bad, 0) << "step " << k;
    }
  }
}

TEST(GpuV41Ops, EmitMatchesReference) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t r : {1, 2})
    for (bool qat : {false, true}) {
      SCOPED_TRACE(testing::Message() << "ratio " << r << " qat " << qat);
      const int64_t d = 512, di = 128, rd = 64;
      TestStep step({{0, 0, 21}, {1, 40, 1}, {2, 7, 4}}, kBlock);
      V41State st(r, d, di, kBlock, 3, step.num_blocks(), 40);
      std::fill(st.blocks.begin(), st.blocks.end(), NAN);
      st.upload();
      const int64_t T = step.T;
      const auto lat = random_vec(size_t(T * d), 41), key = random_vec(size_t(T * di), 42, 4.0f);
      const auto norm_w = random_vec(size_t(di), 43), inv = inv_freq(rd);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = step.pos[size_t(t)];
        if ((p + 1) % r) continue;
        const int64_t j = p / r;
        std::vector<float> k(key.begin() + t * di, key.begin() + (t + 1) * di), e(lat.begin() + t * d, lat.begin() + (t + 1) * d);
        ops::rmsnorm_ref(k.data(), 1, di, norm_w.data(), 1e-6f, k.data());
        ops::rope_apply_ref(k.data(), di, rd, inv, j * r, false);
        ops::rope_apply_ref(e.data(), d, rd, inv, j * r, false);
        if (qat) {
          ops::fp4_qat_ref(k.data(), di, 32, false);
          ops::fp4_qat_ref(e.data(), d, 16, true);
        }
        const int32_t* table = step.table(step.seq_index(t));
        std::copy(k.begin(), k.end(), st.host().index_key(table, j));
        std::copy(e.begin(), e.end(), st.host().entry(table, j));
      }
      auto dlat = to_device(lat), dkey = to_device(key), dnorm = to_device(norm_w), dinv = to_device(inv);
      ops::cuda::Csa2EmitCudaParams p;
      p.ratio = r;
      p.d = d;
      p.di = di;
      p.rope_dim = rd;
      p.inv_freq = dinv.data();
      p.key_norm_w = dnorm.data();
      p.qat = qat;
      ASSERT_TRUE(ops::cuda::csa2_emit(step.dev, st.device(), p, dlat.data(), dkey.data(), nullptr).is_ok());
      const auto got = to_host(st.dblocks, st.blocks.size());
      int64_t differ = 0, written = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::isnan(got[i]), std::isnan(st.blocks[i])) << "element " << i << " written by one side only";
        written += !std::isnan(got[i]);
        differ += !same(got[i], st.blocks[i]);
      }
      EXPECT_GT(written, 0);
      if (!qat) EXPECT_LE(max_rel(got, st.blocks), 1e-6);
      else EXPECT_LE(double(differ), 0.005 * double(written));
      std::vector<float> a, b;
      for (size_t i = 0; i < got.size(); ++i)
        if (!std::isnan(got[i])) a.push_back(got[i]), b.push_back(st.blocks[i]);
      EXPECT_LT(normalized_error(a, b), qat ? 1e-2 : 1e-6);
    }
}

TEST(GpuV41Ops, IndexScoresAndTwoLevelSelection) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t r : {1, 2}) {
    SCOPED_TRACE(testing::Message() << "ratio " << r);
    const int64_t heads = 8, di = 64, topk = 8;
    TestStep step({{0, 0, 30}, {1, 90, 1}, {2, 33, 5}, {3, 0, 1}}, kBlock);
    V41State st(r, 64, di, kBlock, 4, step.num_blocks(), 60);
    st.upload();
    const int64_t T = step.T, stride = 96 / r;
    ops::cuda::Csa2IndexCudaParams xp;
    xp.heads = heads;
    xp.dim = di;
    xp.ratio = r;
    xp.topk = topk;
    xp.stride = stride;
    xp.cand_topk_blocks = 3;
    xp.cand_block_size = 4;
    DeviceBuffer<float> dscores, dblk;
    DeviceBuffer<uint8_t> dmask;
    DeviceBuffer<int32_t> dmask_n, dsel;
    ASSERT_TRUE(dscores.alloc(size_t(T * stride)).is_ok() && dblk.alloc(size_t(T * stride)).is_ok());
    ASSERT_TRUE(dmask.alloc(size_t(T * stride)).is_ok() && dmask_n.alloc(size_t(T)).is_ok() && dsel.alloc(size_t(T * topk)).is_ok());
    std::vector<std::vector<uint8_t>> cand(static_cast<size_t>(T));
    for (auto mode : {ops::cuda::Csa2SelectMode::Plain, ops::cuda::Csa2SelectMode::Candidate, ops::cuda::Csa2SelectMode::Masked}) {
      SCOPED_TRACE(testing::Message() << "mode " << int(mode));
      xp.mode = mode;
      const auto q = random_vec(size_t(T * heads * di), 70 + uint32_t(mode)), w = random_vec(size_t(T * heads), 80 + uint32_t(mode));
      auto dq = to_device(q), dw = to_device(w);
      ASSERT_TRUE(ops::cuda::csa2_index_scores(step.dev, st.device(), xp, dq.data(), dw.data(), dscores.data(), nullptr).is_ok());
      const auto gscores = to_host(dscores, size_t(T * stride));
      ASSERT_TRUE(ops::cuda::csa2_index_select(step.dev, xp, dscores.data(), dmask.data(), dmask_n.data(), dblk.data(),
                                               dsel.data(), nullptr).is_ok());
      const auto gsel = to_host(dsel, size_t(T * topk));
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = (step.pos[size_t(t)] + 1) / r;
        std::vector<float> keys(size_t(n * di));
        for (int64_t j = 0; j < n; ++j) std::copy_n(st.host().index_key(step.table(step.seq_index(t)), j), di, keys.data() + j * di);
        const auto want = ops::csa2_index_scores_ref(q.data() + t * heads * di, w.data() + t * heads, heads, di, keys.data(), n);
        const std::vector<float> got(gscores.begin() + t * stride, gscores.begin() + t * stride + n);
        EXPECT_LE(max_rel(got, want), 1e-6) << "token " << t;
        const uint8_t* mask = nullptr;
        if (mode == ops::cuda::Csa2SelectMode::Candidate) cand[size_t(t)] = ops::csa2_candidate_blocks_ref(got, 3, 4);
        if (mode == ops::cuda::Csa2SelectMode::Masked && !cand[size_t(t)].empty()) mask = cand[size_t(t)].data();
        std::vector<int32_t> sel = ops::csa2_topk_ref(got, topk, mask);
        sel.resize(size_t(topk), -1);
        const std::vector<int32_t> gs(gsel.begin() + t * topk, gsel.begin() + (t + 1) * topk);
        EXPECT_EQ(gs, sel) << "token " << t << " (position " << step.pos[size_t(t)] << ")";
      }
    }
  }
}
