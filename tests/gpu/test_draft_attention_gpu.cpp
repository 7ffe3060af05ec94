// The drafter's window attention with its RoPE fused (DraftAttnArgs::q_norm_rope / out_rope) against the three
// launches it replaces: head_norm_rope on the raw query (unweighted norm + RoPE), the core, head_norm_rope's inverse
// RoPE of the output. The fused kernel repeats head_norm_rope's arithmetic, so the outputs must be equal bit for bit,
// with the key rows staged in shared memory (64 channels) and read from global memory (512 channels). The core's
// own parity with the CPU reference is DraftGpu's (test_draft_gpu.cpp), through the whole drafter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attn_test_util.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
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

TEST(DraftAttentionGpu, FusedRopeEqualsSeparateLaunchesStaged) {
  DSI_SKIP_WITHOUT_GPU();
  check_fused_rope({64, 32, 16, 14});
}

TEST(DraftAttentionGpu, FusedRopeEqualsSeparateLaunchesUnstaged) {
  DSI_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(ops::cuda::draft_attention_stages(100, 512));
  check_fused_rope({512, 64, 128, 100});
}

TEST(DraftAttentionGpu, FusedRopeRefusesShapesHeadNormRopeCannotTake) {
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
