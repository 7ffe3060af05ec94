// The drafter's kernels against the launches each fused form replaces, bit for bit (each repeats their arithmetic):
// (1) the window attention with its RoPE fused (DraftAttnArgs::q_norm_rope / out_rope) against head_norm_rope on the
// raw query (unweighted norm + RoPE), the core, head_norm_rope's inverse RoPE of the output, with the key rows staged
// in shared memory (64 channels) and read from global memory (512 channels); (2) the fused MoE routing its tokens
// itself (DraftMoeArgs::gate) against gemm_cuda's router logits + route_cuda + the fused MoE on those routes. The
// kernels' parity with the CPU reference is DraftGpu's (test_draft_gpu.cpp), through the whole drafter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "attn_test_util.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/rope/rope_cuda.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {

struct Case {
  int64_t dim, rope_dim, window, max_keys;
};

void check_fused_rope(const Case& c) {
  const int64_t T = 5, heads = 4, slots = 2, dim = c.dim, rd = c.rope_dim;
  const float eps = 1e-6f, af = 1.25f;
  const auto q = random_vec(size_t(T * heads * dim), 11, 3.0f);
  const auto kv = random_vec(size_t(T * dim), 12);
  const auto ring = random_vec(size_t(slots * c.window * dim), 13);
  const auto sinks = random_vec(size_t(heads), 14);
  std::vector<float> inv(size_t(rd / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(rd)));
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::vector<ops::cuda::DraftKeys> keys(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    pos[size_t(t)] = 1000 + t;
    auto& k = keys[size_t(t)];
    k.slot = int32_t(t % slots);
    k.ring_hi = pos[size_t(t)] - t;  // the ring's rows before this call's first position
    k.ring_lo = k.ring_hi - (c.max_keys - T);
    k.new_lo = 0;
    k.new_hi = int32_t(t + 1);
  }
  auto dq = to_device(q), dkv = to_device(kv), dring = to_device(ring), dsinks = to_device(sinks), dinv = to_device(inv);
  auto dpos = to_device(pos);
  auto dkeys = to_device(keys);
  cuda::DeviceBuffer<float> dq_sep, dout_sep, dout_fused;
  ASSERT_TRUE(dout_sep.alloc(q.size()).is_ok());
  ASSERT_TRUE(dout_fused.alloc(q.size()).is_ok());
  dq_sep = to_device(q);

  ops::cuda::DraftAttnArgs a;
  a.kv = dkv.data();
  a.ring = dring.data();
  a.slot_stride = c.window * dim;
  a.window = c.window;
  a.keys = dkeys.data();
  a.sinks = dsinks.data();
  a.scale = float(1.0 / std::sqrt(double(dim)));
  a.T = T;
  a.heads = heads;
  a.dim = dim;
  a.max_keys = c.max_keys;

  // The three launches.
  using ops::cuda::HeadNorm;
  ops::cuda::HeadNormRopeParams qp{T, heads, dim, HeadNorm::Unweighted, nullptr, eps, rd, dinv.data(), af, false};
  ASSERT_TRUE(ops::cuda::head_norm_rope(qp, dq_sep.data(), dpos.data(), nullptr).is_ok());
  a.q = dq_sep.data();
  a.out = dout_sep.data();
  ASSERT_TRUE(ops::cuda::draft_attention_cuda(a, nullptr).is_ok());
  ops::cuda::HeadNormRopeParams op{T, heads, dim, HeadNorm::None, nullptr, eps, rd, dinv.data(), af, true};
  ASSERT_TRUE(ops::cuda::head_norm_rope(op, dout_sep.data(), dpos.data(), nullptr).is_ok());

  // The fused launch on the raw query.
  a.q = dq.data();
  a.out = dout_fused.data();
  a.pos = dpos.data();
  a.inv_freq = dinv.data();
  a.rope_dim = rd;
  a.attention_factor = af;
  a.q_eps = eps;
  a.q_norm_rope = true;
  a.out_rope = true;
  ASSERT_TRUE(ops::cuda::draft_attention_cuda(a, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const auto sep = to_host(dout_sep, q.size()), fused = to_host(dout_fused, q.size());
  size_t differ = 0;
  for (size_t i = 0; i < sep.size(); ++i) differ += std::memcmp(&sep[i], &fused[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "dim " << dim << ": " << differ << " of " << sep.size() << " outputs differ";
  EXPECT_EQ(to_host(dq, q.size()), q) << "the fused kernel leaves the raw query as it was";
  bool rotated = false;  // the inverse RoPE did something: the output's rope channels differ from the unrotated core
  a.out_rope = false;
  ASSERT_TRUE(ops::cuda::draft_attention_cuda(a, nullptr).is_ok());
  const auto plain = to_host(dout_fused, q.size());
  for (size_t i = 0; i < sep.size(); ++i) rotated |= plain[i] != sep[i];
  EXPECT_TRUE(rotated);
}

}  // namespace

TEST(DraftKernelsGpu, AttentionFusedRopeEqualsSeparateLaunchesStaged) {
  DSI_SKIP_WITHOUT_GPU();
  check_fused_rope({64, 32, 16, 14});
}

TEST(DraftKernelsGpu, AttentionFusedRopeEqualsSeparateLaunchesUnstaged) {
  DSI_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(ops::cuda::draft_attention_stages(100, 512));
  check_fused_rope({512, 64, 128, 100});
}

TEST(DraftKernelsGpu, AttentionFusedRopeRefusesShapesHeadNormRopeCannotTake) {
  DSI_SKIP_WITHOUT_GPU();
  cuda::DeviceBuffer<float> buf;
  ASSERT_TRUE(buf.alloc(4096).is_ok());
  cuda::DeviceBuffer<int64_t> pos;
  ASSERT_TRUE(pos.alloc(8).is_ok());
  ops::cuda::DraftKeys k;
  auto dk = to_device(std::vector<ops::cuda::DraftKeys>{k});
  ops::cuda::DraftAttnArgs a;
  a.q = a.kv = a.ring = a.sinks = a.inv_freq = buf.data();
  a.out = buf.data() + 2048;
  a.keys = dk.data();
  a.pos = pos.data();
  a.window = 4;
  a.T = 1;
  a.heads = 1;
  a.max_keys = 4;
  a.q_norm_rope = true;
  a.dim = 66;  // not a multiple of 4
  a.rope_dim = 32;
  Status st = ops::cuda::draft_attention_cuda(a, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("fused RoPE"), std::string::npos) << st.message();
  a.dim = 64;
  a.rope_dim = 31;  // odd
  EXPECT_FALSE(ops::cuda::draft_attention_cuda(a, nullptr).is_ok());
  a.rope_dim = 32;
  a.pos = nullptr;
  EXPECT_FALSE(ops::cuda::draft_attention_cuda(a, nullptr).is_ok());
}

namespace {

// The routed fused MoE (DraftMoeArgs::gate) against gemm_cuda + route_cuda + the fused MoE with those routes: idx,
// weight and the output bit for bit, at T tokens (2 experts of 8, a shared expert, sqrt-softplus or sigmoid scores).
void check_moe_routes(int64_t T, ops::ScoreFunc score) {
  const int64_t E = 8, k = 2, dim = 256, inter = 128, shared = 128;
  const auto x = random_vec(size_t(T * dim), 21);
  const auto gate = random_vec(size_t(E * dim), 22, 0.2f);
  const auto bias = random_vec(size_t(E), 23, 0.05f);
  std::vector<cuda::DeviceBuffer<float>> w1(E), w3(E), w2(E);
  std::vector<const void*> p1(E), p3(E), p2(E);
  for (int64_t e = 0; e < E; ++e) {
    w1[size_t(e)] = to_device(random_vec(size_t(inter * dim), uint32_t(100 + e), 0.1f));
    w3[size_t(e)] = to_device(random_vec(size_t(inter * dim), uint32_t(200 + e), 0.1f));
    w2[size_t(e)] = to_device(random_vec(size_t(dim * inter), uint32_t(300 + e), 0.1f));
    p1[size_t(e)] = w1[size_t(e)].data();
    p3[size_t(e)] = w3[size_t(e)].data();
    p2[size_t(e)] = w2[size_t(e)].data();
  }
  auto d1 = to_device(p1), d3 = to_device(p3), d2 = to_device(p2);
  auto sw1 = to_device(random_vec(size_t(shared * dim), 31, 0.1f));
  auto sw3 = to_device(random_vec(size_t(shared * dim), 32, 0.1f));
  auto sw2 = to_device(random_vec(size_t(dim * shared), 33, 0.1f));
  auto dx = to_device(x), dbias = to_device(bias);
  auto gw = dsinfer::test::unwrap(
      ops::cuda::upload_weight(ops::cuda::WeightFormat::F32, E, dim, gate.data(), nullptr));
  cuda::DeviceBuffer<float> logits, w_sep, w_fused, h, out_sep, out_fused;
  cuda::DeviceBuffer<int32_t> i_sep, i_fused;
  ASSERT_TRUE(logits.alloc(size_t(T * E)).is_ok());
  ASSERT_TRUE(w_sep.alloc(size_t(T * k)).is_ok());
  ASSERT_TRUE(w_fused.alloc(size_t(T * k)).is_ok());
  ASSERT_TRUE(i_sep.alloc(size_t(T * k)).is_ok());
  ASSERT_TRUE(i_fused.alloc(size_t(T * k)).is_ok());
  ASSERT_TRUE(h.alloc(size_t(T * (k + 1) * inter)).is_ok());
  ASSERT_TRUE(out_sep.alloc(size_t(T * dim)).is_ok());
  ASSERT_TRUE(out_fused.alloc(size_t(T * dim)).is_ok());
  ops::cuda::RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = score;
  rp.renormalize = true;
  rp.norm_eps = 1e-20f;
  rp.route_scale = 1.5f;
  ops::cuda::DraftMoeArgs a;
  a.x = dx.data();
  a.T = T;
  a.dim = dim;
  a.topk = k;
  a.experts = E;
  a.inter = inter;
  a.shared_inter = shared;
  a.w1 = d1.data();
  a.w3 = d3.data();
  a.w2 = d2.data();
  a.sw1 = sw1.data();
  a.sw3 = sw3.data();
  a.sw2 = sw2.data();
  a.limit = a.shared_limit = 7.0f;
  a.h = h.data();
  a.h_ld = inter;
  // The separate launches.
  ASSERT_TRUE(ops::cuda::gemm_cuda(dx.data(), T, dim, gw.w, logits.data(), E, false, nullptr).is_ok());
  ASSERT_TRUE(ops::cuda::route_cuda(logits.data(), T, dbias.data(), nullptr, nullptr, rp, i_sep.data(), w_sep.data(),
                                    nullptr)
                  .is_ok());
  a.idx = i_sep.data();
  a.weight = w_sep.data();
  a.out = out_sep.data();
  ASSERT_TRUE(ops::cuda::draft_moe_cuda(a, nullptr).is_ok());
  // The routed form.
  cudaMemset(i_fused.data(), 0xff, size_t(T * k) * 4);
  cudaMemset(w_fused.data(), 0xff, size_t(T * k) * 4);
  a.idx = i_fused.data();
  a.weight = w_fused.data();
  a.out = out_fused.data();
  a.gate = static_cast<const float*>(gw.w.data);
  a.gate_bias = dbias.data();
  a.router = rp;
  ASSERT_TRUE(ops::cuda::draft_moe_cuda(a, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(i_fused, size_t(T * k)), to_host(i_sep, size_t(T * k)));
  const auto ws = to_host(w_sep, size_t(T * k)), wf = to_host(w_fused, size_t(T * k));
  const auto os = to_host(out_sep, size_t(T * dim)), of = to_host(out_fused, size_t(T * dim));
  EXPECT_EQ(std::memcmp(ws.data(), wf.data(), ws.size() * 4), 0) << "routing weights";
  EXPECT_EQ(std::memcmp(os.data(), of.data(), os.size() * 4), 0) << "outputs";
  std::vector<int> used(size_t(E), 0);  // the routes are real: k experts a token, several over the tokens
  for (int32_t e : to_host(i_sep, size_t(T * k))) used[size_t(e)] = 1;
  EXPECT_GE(std::accumulate(used.begin(), used.end(), 0), std::min<int64_t>(T * k, 3)) << "T " << T;
}

}  // namespace

TEST(DraftKernelsGpu, MoeRoutingItselfEqualsRouterGemmAndRoute) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 5, 8}) {
    check_moe_routes(T, ops::ScoreFunc::SqrtSoftplus);
    check_moe_routes(T, ops::ScoreFunc::Sigmoid);
  }
}

TEST(DraftKernelsGpu, MoeRoutingRefusesWhatTheKernelCannotRoute) {
  ops::cuda::RouterCudaParams rp;
  rp.experts = 8;
  rp.topk = 2;
  EXPECT_TRUE(ops::cuda::draft_moe_routes(5, 8, 2, rp));
  EXPECT_FALSE(ops::cuda::draft_moe_routes(9, 8, 2, rp));  // a warp a token: at most 8
  rp.score = ops::ScoreFunc::Softmax;
  EXPECT_FALSE(ops::cuda::draft_moe_routes(5, 8, 2, rp));
  rp.score = ops::ScoreFunc::SqrtSoftplus;
  rp.hash_vocab = 100;
  EXPECT_FALSE(ops::cuda::draft_moe_routes(5, 8, 2, rp));
  rp.hash_vocab = 0;
  rp.experts = rp.topk = 0;
  EXPECT_FALSE(ops::cuda::draft_moe_routes(5, 64, 2, rp));  // more experts than lanes
}
