// GPU parity: rmsnorm, fused head norm + RoPE (q / kv / indexer q / inverse), FP8 and Hadamard+FP4 simulations
// against the CPU reference ops. Thresholds: the kernels reproduce the reference's double sums and its separately
// rounded fp32 products, so norm/RoPE agree to ~1e-7 (cos/sin may differ by an ulp): 2e-6. The simulations get
// bit-identical inputs and use an exact rounding routine: they must match exactly.
#include <gtest/gtest.h>

#include "attn_test_util.h"
#include "ops/quant_sim/quant_sim.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {
io::RopeParams yarn_rope() {
  io::RopeParams r;
  r.theta = 160000.0;
  r.yarn = true;
  r.factor = 16.0;
  r.original_max_position_embeddings = 65536;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  return r;
}
}  // namespace

TEST(GpuRmsnorm, MatchesReferenceWeightedAndUnweighted) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t rows = 7, dim = 4096;
  auto x = random_vec(size_t(rows * dim), 1, 3.0f), w = random_vec(size_t(dim), 2);
  for (bool weighted : {true, false}) {
    std::vector<float> ref(x.size());
    ops::rmsnorm_ref(x.data(), rows, dim, weighted ? w.data() : nullptr, 1e-6f, ref.data());
    auto dx = to_device(x), dw = to_device(w);
    cuda::DeviceBuffer<float> dy;
    ASSERT_TRUE(dy.alloc(x.size()).is_ok());
    cudaMemset(dy.data(), 0xff, x.size() * 4);  // NaN poison
    ASSERT_TRUE(ops::cuda::rmsnorm(dx.data(), rows, dim, weighted ? dw.data() : nullptr, 1e-6f, dy.data(), nullptr).is_ok());
    EXPECT_LT(normalized_error(to_host(dy, x.size()), ref), 2e-6) << "weighted " << weighted;
    // in place
    ASSERT_TRUE(ops::cuda::rmsnorm(dx.data(), rows, dim, weighted ? dw.data() : nullptr, 1e-6f, dx.data(), nullptr).is_ok());
    EXPECT_LT(normalized_error(to_host(dx, x.size()), ref), 2e-6) << "in place, weighted " << weighted;
  }
  EXPECT_FALSE(ops::cuda::rmsnorm(nullptr, 1, 0, nullptr, 1e-6f, nullptr, nullptr).is_ok());
}

TEST(GpuHeadNormRope, QueryKvIndexerAndInverse) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<float> inv = ops::rope_inv_freq(yarn_rope(), 64);
  const std::vector<int64_t> pos = {0, 1, 127, 4000, 65535};
  const int64_t rows = int64_t(pos.size());
  struct Case {
    int64_t heads, dim;
    ops::cuda::HeadNorm norm;
    bool inverse;
  };
  for (const Case& c : {Case{64, 512, ops::cuda::HeadNorm::Unweighted, false}, Case{1, 512, ops::cuda::HeadNorm::Weighted, false},
                        Case{64, 128, ops::cuda::HeadNorm::None, false}, Case{64, 512, ops::cuda::HeadNorm::None, true},
                        Case{3, 68, ops::cuda::HeadNorm::Weighted, false}}) {
    auto x = random_vec(size_t(rows * c.heads * c.dim), 3, 2.0f), w = random_vec(size_t(c.dim), 4);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < c.heads; ++h) {
        float* v = ref.data() + (r * c.heads + h) * c.dim;
        if (c.norm != ops::cuda::HeadNorm::None)
          ops::rmsnorm_ref(v, 1, c.dim, c.norm == ops::cuda::HeadNorm::Weighted ? w.data() : nullptr, 1e-6f, v);
        ops::rope_apply_ref(v, c.dim, 64, inv, pos[size_t(r)], c.inverse, 1.0f);
      }
    auto dx = to_device(x), dw = to_device(w), dinv = to_device(inv);
    auto dpos = to_device(pos);
    ops::cuda::HeadNormRopeParams p;
    p.rows = rows;
    p.heads = c.heads;
    p.dim = c.dim;
    p.norm = c.norm;
    p.norm_w = dw.data();
    p.rope_dim = 64;
    p.inv_freq = dinv.data();
    p.inverse = c.inverse;
    ASSERT_TRUE(ops::cuda::head_norm_rope(p, dx.data(), dpos.data(), nullptr).is_ok());
    auto got = to_host(dx, x.size());
    EXPECT_LT(normalized_error(got, ref), 2e-6) << "heads " << c.heads << " dim " << c.dim;
    // the RoPE part alone (the smallest slice) must agree too
    std::vector<float> gr, rr;
    for (int64_t v = 0; v < rows * c.heads; ++v)
      for (int64_t i = c.dim - 64; i < c.dim; ++i) gr.push_back(got[size_t(v * c.dim + i)]), rr.push_back(ref[size_t(v * c.dim + i)]);
    EXPECT_LT(normalized_error(gr, rr), 2e-6);
  }
  ops::cuda::HeadNormRopeParams bad;
  bad.rows = 1;
  bad.dim = 6;
  EXPECT_FALSE(ops::cuda::head_norm_rope(bad, nullptr, nullptr, nullptr).is_ok());
}

TEST(GpuQuantSim, Fp8BlockSimIsBitExact) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t rows = 64, stride = 512, n = 448;
  auto x = random_vec(size_t(rows * stride), 5);
  std::mt19937 g(6);
  for (int64_t r = 0; r < rows; ++r)  // magnitudes from 2^-30 to 2^20 so scales, subnormals and the amax floor all occur
    for (int64_t i = 0; i < stride; ++i) x[size_t(r * stride + i)] *= std::ldexp(1.0f, int(r % 51) - 30 + int(g() % 3));
  std::vector<float> ref = x;
  for (int64_t r = 0; r < rows; ++r) ops::fp8_block_sim_ref(ref.data() + r * stride, n, 64);
  auto dx = to_device(x);
  ASSERT_TRUE(ops::cuda::fp8_block_sim(dx.data(), rows, stride, n, 64, nullptr).is_ok());
  auto got = to_host(dx, x.size());
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += !same(got[i], ref[i]);
  EXPECT_EQ(bad, 0);
  EXPECT_NE(ref, x);  // the simulation changed something (the test is not vacuous)
}

TEST(GpuQuantSim, HadamardFp4IsBitExact) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t dim : {int64_t(128), int64_t(64)}) {
    const int64_t rows = 300;
    auto x = random_vec(size_t(rows * dim), 7, 4.0f);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < rows; ++r) {
      ops::hadamard_ref(ref.data() + r * dim, dim);
      ops::fp4_block_sim_ref(ref.data() + r * dim, dim, 32);
    }
    auto dx = to_device(x);
    ASSERT_TRUE(ops::cuda::hadamard_fp4_sim(dx.data(), rows, dim, 32, nullptr).is_ok());
    auto got = to_host(dx, x.size());
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) bad += !same(got[i], ref[i]);
    EXPECT_EQ(bad, 0) << "dim " << dim;
  }
  EXPECT_FALSE(ops::cuda::hadamard_fp4_sim(nullptr, 1, 96, 32, nullptr).is_ok());
}
