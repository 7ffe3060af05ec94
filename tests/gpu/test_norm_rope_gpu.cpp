// GPU parity: rmsnorm, fused head norm + RoPE (q / kv / indexer q / inverse), FP8 and Hadamard+FP4 simulations
// against the CPU reference ops. Thresholds: the kernels reproduce the reference's double sums and its separately
// rounded fp32 products, so norm/RoPE agree to ~1e-7 (cos/sin may differ by an ulp): 2e-6. The simulations get
// bit-identical inputs and use an exact rounding routine: they must match exactly.
#include <gtest/gtest.h>

#include <utility>

#include "attn_test_util.h"
#include "core/small_float.h"
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
// The runner's q_kv_norm_rope on the split path: the query (unweighted norm, RoPE over the last 64 dims) and the
// window kv (weighted norm, RoPE, the FP8 simulation of its NoPE dims).
std::pair<ops::cuda::HeadNormRopeParams, ops::cuda::HeadNormRopeParams> split_path_params(int64_t rows, int64_t heads,
                                                                                          int64_t dim, const float* inv,
                                                                                          const float* w) {
  ops::cuda::HeadNormRopeParams qp{rows, heads, dim, ops::cuda::HeadNorm::Unweighted, nullptr, 1e-6f, 64, inv, 1.0f, false};
  ops::cuda::HeadNormRopeParams kp{rows, 1, dim, ops::cuda::HeadNorm::Weighted, w, 1e-6f, 64, inv, 1.0f, false};
  kp.fp8_dims = dim - 64;
  return {qp, kp};
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

// Session 24 (s24-sparsep2): the bf16-output mode (HeadNormRopeParams::out_bf16; the query of the split-block sparse
// prefill kernel) writes exactly bf16(the in-place fp32 result) - the same arithmetic, one rounding at the store -
// and leaves x as it was; in head_norm_rope and in the pair launch (the query bf16, the window kv fp32 in place, the
// kv's FP8 simulation fused, as the runner's q_kv_norm_rope calls it). Bit-exact: no tolerance.
TEST(GpuHeadNormRope, Bf16OutputIsTheRoundedFp32Result) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<float> inv = ops::rope_inv_freq(yarn_rope(), 64);
  const std::vector<int64_t> pos = {0, 1, 127, 4000, 65535, 9};
  const int64_t rows = int64_t(pos.size()), heads = 64, dim = 512, n = rows * heads * dim;
  auto x = random_vec(size_t(n), 11, 3.0f), kv = random_vec(size_t(rows * dim), 12, 2.0f), w = random_vec(size_t(dim), 13);
  auto dinv = to_device(inv), dw = to_device(w);
  auto dpos = to_device(pos);
  const auto [qp, kp] = split_path_params(rows, heads, dim, dinv.data(), dw.data());
  // The fp32 results in place (the default path).
  auto dq = to_device(x), dkv = to_device(kv);
  ASSERT_TRUE(ops::cuda::head_norm_rope_pair(qp, dq.data(), kp, dkv.data(), dpos.data(), nullptr).is_ok());
  const std::vector<float> q32 = to_host(dq, size_t(n)), kv32 = to_host(dkv, kv.size());
  for (bool pair : {false, true}) {
    SCOPED_TRACE(pair ? "pair" : "single");
    auto dx = to_device(x), dkv2 = to_device(kv);
    cuda::DeviceBuffer<uint16_t> out;
    ASSERT_TRUE(out.alloc(size_t(n)).is_ok());
    cudaMemset(out.data(), 0xff, size_t(n) * 2);  // NaN poison
    ops::cuda::HeadNormRopeParams b = qp;
    b.out_bf16 = out.data();
    if (pair) ASSERT_TRUE(ops::cuda::head_norm_rope_pair(b, dx.data(), kp, dkv2.data(), dpos.data(), nullptr).is_ok());
    else ASSERT_TRUE(ops::cuda::head_norm_rope(b, dx.data(), dpos.data(), nullptr).is_ok());
    const std::vector<uint16_t> got = to_host(out, size_t(n));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[size_t(i)] != small_float::f32_to_bf16_bits(q32[size_t(i)]);
    EXPECT_EQ(wrong, 0) << "bf16 q values that are not bf16(the fp32 result) of " << n;
    EXPECT_EQ(to_host(dx, size_t(n)), x) << "x must only be read";
    if (pair) EXPECT_EQ(to_host(dkv2, kv.size()), kv32) << "the kv half keeps its in-place fp32 result";
  }
  // Refusals: a misaligned output, an output over its own input, an output over the pair's other tensor.
  cuda::DeviceBuffer<uint16_t> out;
  ASSERT_TRUE(out.alloc(size_t(n) + 8).is_ok());
  auto rx = to_device(x), rkv = to_device(kv);
  ops::cuda::HeadNormRopeParams b = qp;
  b.out_bf16 = out.data() + 1;
  EXPECT_FALSE(ops::cuda::head_norm_rope(b, rx.data(), dpos.data(), nullptr).is_ok());
  b.out_bf16 = reinterpret_cast<uint16_t*>(rx.data());
  EXPECT_FALSE(ops::cuda::head_norm_rope(b, rx.data(), dpos.data(), nullptr).is_ok());
  b.out_bf16 = reinterpret_cast<uint16_t*>(rkv.data());
  EXPECT_FALSE(ops::cuda::head_norm_rope_pair(b, rx.data(), kp, rkv.data(), dpos.data(), nullptr).is_ok());
}

// Session 27: the bf16-input mode (HeadNormRopeParams::in_bf16; the query wq_b's matmul wrote as bf16) reads the
// vectors from out_bf16 and writes the result back there in place. Its result must be, bit for bit, bf16(the fp32
// path's result on the widened bf16 values) - the fp32 path being the one QueryKvIndexerAndInverse holds to the CPU
// reference - in head_norm_rope and in the pair launch (the kv fp32 in place beside it); and within the bf16
// rounding (2^-9 relative: bound 4e-3 normalised) of the CPU reference itself. x is not touched (null is allowed).
TEST(GpuHeadNormRope, Bf16InputInPlaceIsTheFp32PathOnTheWidenedInput) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<float> inv = ops::rope_inv_freq(yarn_rope(), 64);
  const std::vector<int64_t> pos = {0, 1, 127, 4000, 65535, 9, 3};
  const int64_t rows = int64_t(pos.size()), heads = 64, dim = 512, n = rows * heads * dim;
  const auto x = random_vec(size_t(n), 21, 3.0f), kv = random_vec(size_t(rows * dim), 22, 2.0f),
             w = random_vec(size_t(dim), 23);
  std::vector<uint16_t> x16(static_cast<size_t>(n));
  std::vector<float> xw(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x16[size_t(i)] = small_float::f32_to_bf16_bits(x[size_t(i)]);
    xw[size_t(i)] = small_float::from_bits(small_float::bf16_f32_bits(x16[size_t(i)]));
  }
  auto dinv = to_device(inv), dw = to_device(w);
  auto dpos = to_device(pos);
  const auto [qp, kp] = split_path_params(rows, heads, dim, dinv.data(), dw.data());
  auto dq = to_device(xw), dkv = to_device(kv);
  ASSERT_TRUE(ops::cuda::head_norm_rope_pair(qp, dq.data(), kp, dkv.data(), dpos.data(), nullptr).is_ok());
  const std::vector<float> q32 = to_host(dq, size_t(n)), kv32 = to_host(dkv, kv.size());
  std::vector<float> ref = xw;
  for (int64_t v = 0; v < rows * heads; ++v) {
    ops::rmsnorm_ref(ref.data() + v * dim, 1, dim, nullptr, 1e-6f, ref.data() + v * dim);
    ops::rope_apply_ref(ref.data() + v * dim, dim, 64, inv, pos[size_t(v / heads)], false, 1.0f);
  }
  for (bool pair : {false, true}) {
    SCOPED_TRACE(pair ? "pair" : "single");
    cuda::DeviceBuffer<uint16_t> io;
    ASSERT_TRUE(io.upload(x16.data(), x16.size()).is_ok());
    auto dkv2 = to_device(kv);
    ops::cuda::HeadNormRopeParams b = qp;
    b.out_bf16 = io.data();
    b.in_bf16 = true;
    if (pair) ASSERT_TRUE(ops::cuda::head_norm_rope_pair(b, nullptr, kp, dkv2.data(), dpos.data(), nullptr).is_ok());
    else ASSERT_TRUE(ops::cuda::head_norm_rope(b, nullptr, dpos.data(), nullptr).is_ok());
    const std::vector<uint16_t> got = to_host(io, size_t(n));
    int64_t wrong = 0;
    std::vector<float> gotf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      wrong += got[size_t(i)] != small_float::f32_to_bf16_bits(q32[size_t(i)]);
      gotf[size_t(i)] = small_float::from_bits(small_float::bf16_f32_bits(got[size_t(i)]));
    }
    EXPECT_EQ(wrong, 0) << "bf16 q values that are not bf16(the fp32 path's result) of " << n;
    EXPECT_LT(normalized_error(gotf, ref), 4e-3);
    if (pair) EXPECT_EQ(to_host(dkv2, kv.size()), kv32) << "the kv half keeps its in-place fp32 result";
  }
  ops::cuda::HeadNormRopeParams b = qp;
  b.in_bf16 = true;  // without out_bf16: nothing to read
  EXPECT_FALSE(ops::cuda::head_norm_rope(b, nullptr, dpos.data(), nullptr).is_ok());
}

// Session 27: where a block's 8 warps are heads of one row (heads % 8 == 0), the row's RoPE angles are computed once
// into shared memory for the block (head_norm_rope_pair_kernel's table form) instead of once a vector. The same
// function of the same inputs, so the same bits: the table form (rows of 64 heads) against the warp-a-vector form
// (heads = 1, each row repeated 64 times with its position), bit for bit, forward and inverse, fp32 in place and the
// bf16 output.
TEST(GpuHeadNormRope, AngleTableEqualsPerVectorAngles) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<float> inv = ops::rope_inv_freq(yarn_rope(), 64);
  const std::vector<int64_t> pos = {0, 1, 127, 4000, 65535, 9, 3, 70000};
  const int64_t rows = int64_t(pos.size()), heads = 64, dim = 512, n = rows * heads * dim;
  std::vector<int64_t> each;
  for (int64_t r = 0; r < rows; ++r) each.insert(each.end(), size_t(heads), pos[size_t(r)]);
  const auto x = random_vec(size_t(n), 31, 3.0f);
  auto dinv = to_device(inv);
  auto dpos = to_device(pos), deach = to_device(each);
  for (bool inverse : {false, true}) {
    SCOPED_TRACE(inverse ? "inverse" : "forward");
    ops::cuda::HeadNormRopeParams t{rows,        heads, dim, ops::cuda::HeadNorm::Unweighted, nullptr, 1e-6f, 64,
                                    dinv.data(), 1.0f,  inverse};
    t.angle_table = 1;  // the table form (64 heads a row)
    ops::cuda::HeadNormRopeParams v = t;
    v.rows = rows * heads;
    v.heads = 1;  // each vector its own angles (one head a row: no table)
    v.angle_table = 0;
    auto a = to_device(x), b = to_device(x);
    cuda::DeviceBuffer<uint16_t> a16, b16;
    ASSERT_TRUE(a16.alloc(size_t(n)).is_ok());
    ASSERT_TRUE(b16.alloc(size_t(n)).is_ok());
    ASSERT_TRUE(ops::cuda::head_norm_rope(t, a.data(), dpos.data(), nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::head_norm_rope(v, b.data(), deach.data(), nullptr).is_ok());
    EXPECT_EQ(to_host(a, size_t(n)), to_host(b, size_t(n))) << "fp32 in place";
    t.out_bf16 = a16.data();
    v.out_bf16 = b16.data();
    auto c = to_device(x), d = to_device(x);
    ASSERT_TRUE(ops::cuda::head_norm_rope(t, c.data(), dpos.data(), nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::head_norm_rope(v, d.data(), deach.data(), nullptr).is_ok());
    EXPECT_EQ(to_host(a16, size_t(n)), to_host(b16, size_t(n))) << "bf16 output";
    // pos_ready (session 36): the angles computed before the PDL wait, into the block's table or (one head a row) a
    // warp's own: the same bits as the per-vector form. As the V4 forward runs it: a pair of the query (table rows)
    // and one kv vector a row on the same positions; then one head a row alone.
    ops::cuda::HeadNormRopeParams tr = t, vr = v, kv = v, kv_late = v;
    tr.out_bf16 = vr.out_bf16 = kv.out_bf16 = kv_late.out_bf16 = nullptr;
    tr.pos_ready = vr.pos_ready = kv.pos_ready = true;
    kv.rows = kv_late.rows = rows;  // one vector a row: the first rows of x
    auto e = to_device(x), f = to_device(x), g = to_device(x), h = to_device(x);
    ASSERT_TRUE(ops::cuda::head_norm_rope_pair(tr, e.data(), kv, g.data(), dpos.data(), nullptr).is_ok());
    ASSERT_TRUE(ops::cuda::head_norm_rope(kv_late, h.data(), dpos.data(), nullptr).is_ok());
    EXPECT_EQ(to_host(e, size_t(n)), to_host(b, size_t(n))) << "pos_ready, table rows";
    EXPECT_EQ(to_host(g, size_t(rows * dim)), to_host(h, size_t(rows * dim))) << "pos_ready, the pair's kv half";
    ASSERT_TRUE(ops::cuda::head_norm_rope(vr, f.data(), deach.data(), nullptr).is_ok());
    EXPECT_EQ(to_host(f, size_t(n)), to_host(b, size_t(n))) << "pos_ready, a warp's own table";
  }
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
