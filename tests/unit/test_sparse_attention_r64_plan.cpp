// CPU checks of the kRoles64 choice (ops/sparse_attention/sparse_attention_plan.h, session 24): the opt-in's parse,
// the decode plan per mode (kRoles64 only in fast mode with the opt-in; main's kernels and counts otherwise, exact and
// batch-invariant included), and its split counts at the V4-Flash shapes (window 128 + CSA top 512 = 640 keys, HCA
// at position 4095 = 160 keys) on 132 SMs.
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/sparse_attention/sparse_attention_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::ops::KernelMode;

namespace {
constexpr int64_t kSms = 132, kCsa = 640, kHca = 160;
}  // namespace

TEST(SparseAttentionR64Plan, OptInParse) {
  EXPECT_FALSE(sparse_decode64_from(nullptr).value());
  EXPECT_FALSE(sparse_decode64_from("").value());
  EXPECT_FALSE(sparse_decode64_from("off").value());
  EXPECT_TRUE(sparse_decode64_from("on").value());
  EXPECT_FALSE(sparse_decode64_from("1").is_ok());
  EXPECT_FALSE(sparse_decode64_from("ON").is_ok());
}

TEST(SparseAttentionR64Plan, SplitCounts) {
  EXPECT_EQ(plan_sparse_attention_fp8_r64(1, 64, kCsa, kSms), 10);   // one 64-key tile a split
  EXPECT_EQ(plan_sparse_attention_fp8_r64(64, 64, kCsa, kSms), 2);   // 128 blocks: one wave
  EXPECT_EQ(plan_sparse_attention_fp8_r64(256, 64, kCsa, kSms), 1);  // two waves
  EXPECT_EQ(plan_sparse_attention_fp8_r64(1, 64, kHca, kSms), 1);  // 3 splits cost the same: the fewer
  EXPECT_EQ(plan_sparse_attention_fp8_r64(64, 64, kHca, kSms), 1);  // 2 splits: one tile less, the combine more
  EXPECT_EQ(plan_sparse_attention_fp8_r64(256, 64, kHca, kSms), 1);
  EXPECT_EQ(plan_sparse_attention_fp8_r64(1, 64, 128, kSms), 1);  // sliding: the window alone
  EXPECT_EQ(plan_sparse_attention_fp8_r64(1, 64, 1, kSms), 1);
  for (int64_t T : {1, 7, 64, 200, 256, 1000})
    for (int64_t keys : {1, 63, 64, 65, 160, 640, 5000}) {
      const int64_t s = plan_sparse_attention_fp8_r64(T, 64, keys, kSms);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, 64);
      EXPECT_LE(s, (keys + 63) / 64 > 1 ? (keys + 63) / 64 : 1);  // at least one tile a split
    }
}

TEST(SparseAttentionR64Plan, OnlyFastModeWithTheOptIn) {
  for (int64_t T : {1, 64, 256})
    for (int64_t keys : {kCsa, kHca}) {
      for (KernelMode mode : {KernelMode::kExact, KernelMode::kBatchInvariant, KernelMode::kFast, KernelMode::kDefault})
        for (bool on : {false, true}) {
          const SparseAttentionFp8Plan p = plan_sparse_attention_fp8_decode(mode, T, 64, keys, kSms, on);
          if (on && mode == KernelMode::kFast) {
            EXPECT_EQ(p.kernel, Fp8AttentionKernel::kRoles64);
            EXPECT_EQ(p.num_splits, plan_sparse_attention_fp8_r64(T, 64, keys, kSms));
          } else {  // main's choice, untouched
            EXPECT_EQ(p.kernel, Fp8AttentionKernel::kAuto);
            EXPECT_EQ(p.num_splits, plan_sparse_attention_fp8(T, 64, keys, kSms));
          }
        }
    }
}
