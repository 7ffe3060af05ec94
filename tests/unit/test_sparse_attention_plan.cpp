// CPU checks of the sparse-attention kernel choice (ops/sparse_attention/sparse_attention_plan.h) at the V4-Flash
// (64 heads x 512, window 128, CSA top 512, HCA ratio 128) and shipped-model (4 heads x 64, window 64, top 8)
// shapes: kernel and split count per mode, the tensor-core split heuristic (moved from tests/gpu), and the
// invariants the kernels rely on (splits within the grid limit; fixed splits cover the longest key list).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ops/sparse_attention/sparse_attention_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::ops::KernelMode;

namespace {
constexpr int64_t kSms = 132;
constexpr int64_t kFlashCsaKeys = 128 + 512;  // window + top-k: 20 tiles of 32
}  // namespace

TEST(SparseAttentionPlan, TensorCoreSplitHeuristic) {  // Flash shapes on 132 SMs
  EXPECT_EQ(sparse_attention_tc_splits(1, 64, 640, kSms), 20);   // one tile per split
  EXPECT_EQ(sparse_attention_tc_splits(64, 64, 640, kSms), 2);   // 128 blocks: one wave
  EXPECT_EQ(sparse_attention_tc_splits(256, 64, 640, kSms), 1);  // 256 blocks: two waves
  EXPECT_EQ(sparse_attention_tc_splits(1, 64, 160, kSms), 5);    // HCA at 4095
  EXPECT_EQ(sparse_attention_tc_splits(64, 128, 640, kSms), 1);  // 2 head groups per token
  EXPECT_EQ(sparse_attention_tc_splits(1, 64, 1, kSms), 1);
}

// Flash per mode: fast and batch-invariant take the tensor-core kernel (head_dim 512), exact and kDefault the fp32
// kernel; batch-invariant splits every token's keys in fixed 128-key chunks (640 keys: 5 splits at any batch).
TEST(SparseAttentionPlan, FlashModes) {
  const SparseAttentionPlan fast = plan_sparse_attention(KernelMode::kFast, 1, 64, 512, kFlashCsaKeys, kSms);
  EXPECT_TRUE(fast.tensor_cores);
  EXPECT_EQ(fast.split_keys, 0);
  EXPECT_EQ(fast.num_splits, 20);
  EXPECT_EQ(plan_sparse_attention(KernelMode::kFast, 64, 64, 512, kFlashCsaKeys, kSms).num_splits, 2);
  for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault}) {
    const SparseAttentionPlan p1 = plan_sparse_attention(m, 1, 64, 512, kFlashCsaKeys, kSms);
    EXPECT_FALSE(p1.tensor_cores);
    EXPECT_EQ(p1.split_keys, 0);
    EXPECT_EQ(p1.num_splits, 10);  // capped at one split per 64 keys
    EXPECT_EQ(plan_sparse_attention(m, 64, 64, 512, kFlashCsaKeys, kSms).num_splits, 2);
    EXPECT_EQ(plan_sparse_attention(m, 256, 64, 512, kFlashCsaKeys, kSms).num_splits, 1);
  }
  for (int64_t T : {1, 64, 4096}) {
    const SparseAttentionPlan inv = plan_sparse_attention(KernelMode::kBatchInvariant, T, 64, 512, kFlashCsaKeys, kSms);
    EXPECT_TRUE(inv.tensor_cores);
    EXPECT_EQ(inv.split_keys, kAttnInvariantSplitKeys);
    EXPECT_EQ(inv.num_splits, 5) << T;
  }
}

// The shipped model (head_dim 64): no tensor-core kernel in any mode; a sliding layer's 64 keys are one split.
TEST(SparseAttentionPlan, ShippedModelModes) {
  for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault, KernelMode::kFast}) {
    const SparseAttentionPlan p = plan_sparse_attention(m, 1, 4, 64, 64 + 8, kSms);
    EXPECT_FALSE(p.tensor_cores);
    EXPECT_EQ(p.split_keys, 0);
    EXPECT_EQ(p.num_splits, 1);
  }
  EXPECT_EQ(plan_sparse_attention(KernelMode::kFast, 1, 4, 64, 4096, kSms).num_splits, 64);  // 264 blocks wanted, cap
  const SparseAttentionPlan inv = plan_sparse_attention(KernelMode::kBatchInvariant, 1, 4, 64, 4096 / 16 + 64, kSms);
  EXPECT_FALSE(inv.tensor_cores);
  EXPECT_EQ(inv.num_splits, 3);  // 320 keys in 128-key chunks
}

// Every plan is launchable (1 <= splits <= 65535, tensor-core splits at most one per 32-key tile) and a fixed-size
// plan covers the longest key list with no empty trailing split.
TEST(SparseAttentionPlan, SplitsAreLegal) {
  for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault, KernelMode::kFast, KernelMode::kBatchInvariant})
    for (int64_t T : {1, 2, 7, 64, 256, 8192})
      for (int64_t keys : {0, 1, 31, 33, 160, 640, 1152, 65536 + 128})
        for (int64_t hd : {64, 512}) {
          const SparseAttentionPlan p = plan_sparse_attention(m, T, 64, hd, keys, kSms);
          ASSERT_GE(p.num_splits, 1);
          ASSERT_LE(p.num_splits, 65535);
          if (p.tensor_cores && p.split_keys == 0) {
            EXPECT_LE(p.num_splits, std::max<int64_t>(1, (keys + 31) / 32));
          }
          if (p.split_keys > 0) {
            EXPECT_GE(p.num_splits * p.split_keys, keys);
            EXPECT_LT((p.num_splits - 1) * p.split_keys, std::max<int64_t>(keys, 1));
          }
        }
}

// The FP8-state kernel (issue 31): Flash shapes on 132 SMs, window 128 + top 512 = 20 tiles; the H200 sweeps of
// forced counts found the same best counts (bench/NOTES.md, 2026-12-02).
TEST(SparseAttentionPlan, Fp8SplitHeuristic) {
  EXPECT_EQ(plan_sparse_attention_fp8(1, 64, 640, 132), 20);
  EXPECT_EQ(plan_sparse_attention_fp8(64, 64, 640, 132), 2);
  EXPECT_EQ(plan_sparse_attention_fp8(256, 64, 640, 132), 1);
  EXPECT_EQ(plan_sparse_attention_fp8(1, 64, 160, 132), 5);  // HCA: window + 32 entries
  // Session 19: the pair at one split (HCA batch 64: 30.0 us against the one block's 40.5 at 2 splits and 36.9 at 1).
  EXPECT_EQ(plan_sparse_attention_fp8(64, 64, 160, 132), 1);
  EXPECT_EQ(plan_sparse_attention_fp8(256, 64, 160, 132), 1);
  EXPECT_EQ(plan_sparse_attention_fp8(0, 64, 0, 0), 1);
  for (int64_t T : {1, 2, 7, 64, 100, 256, 4096}) {
    const int64_t s = plan_sparse_attention_fp8(T, 64, 640, 132);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, 20);
  }
}

// Which FP8-state kernel (session 17; the pair, session 19): a forced choice is kept; kAuto takes the warp-specialised
// kernel at every shape, as the two-block pair where the model finds it cheaper at the given split count: the
// measured winners of session 19's H200 bench (batch 1 CSA / HCA, HCA batch 64 at one split; one block at batch 64
// CSA and batch 256). The kernels give the same bits, so batch-invariant mode may take any.
TEST(SparseAttentionPlan, Fp8KernelChoice) {
  using K = Fp8AttentionKernel;
  for (int64_t T : {1, 64, 256, 2048}) {
    EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kLockstep, T, 64, 640, 1, 132), K::kLockstep);
    EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kWarpSpecialised, T, 64, 160, 1, 132), K::kWarpSpecialised);
    EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kWarpSpecialisedPair, T, 64, 160, 1, 132), K::kWarpSpecialisedPair);
  }
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 1, 64, 640, 20, 132), K::kWarpSpecialisedPair);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 1, 64, 160, 5, 132), K::kWarpSpecialisedPair);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 64, 64, 160, 1, 132), K::kWarpSpecialisedPair);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 64, 64, 640, 2, 132), K::kWarpSpecialised);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 256, 64, 640, 1, 132), K::kWarpSpecialised);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 256, 64, 160, 1, 132), K::kWarpSpecialised);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 2048, 64, 640, 1, 132), K::kWarpSpecialised);
  EXPECT_EQ(plan_sparse_attention_fp8_kernel(K::kAuto, 0, 64, 0, 0, 0), K::kWarpSpecialised);
}

// Session 21: the prefill op (bf16 staging) from kFp8PrefillMinTokens tokens, above every decode step (256 tokens;
// sparse_attention_plan.h); DSINFER_SPARSE_PREFILL's values force either route, anything else is refused by name.
TEST(SparseAttentionPlan, Fp8PrefillOpChoice) {
  using R = SparsePrefillRoute;
  for (int64_t T : {1, 64, 256, 1024, 2048, 4096, 8192}) {
    EXPECT_EQ(plan_sparse_attention_fp8_prefill(T), kFp8PrefillMinTokens > 0 && T >= kFp8PrefillMinTokens) << T;
    EXPECT_EQ(plan_sparse_attention_fp8_prefill(T, R::kAuto), plan_sparse_attention_fp8_prefill(T)) << T;
    EXPECT_TRUE(plan_sparse_attention_fp8_prefill(T, R::kOn)) << T;
    EXPECT_FALSE(plan_sparse_attention_fp8_prefill(T, R::kOff)) << T;
  }
  EXPECT_GT(kFp8PrefillMinTokens, 256);
  EXPECT_FALSE(plan_sparse_attention_fp8_prefill(256));
  EXPECT_TRUE(plan_sparse_attention_fp8_prefill(4096));  // the measured default: on at prefill
  EXPECT_FALSE(plan_sparse_attention_fp8_prefill(0, R::kOn));
  for (const char* v : {static_cast<const char*>(nullptr), "", "auto"}) {
    auto r = sparse_prefill_route_from(v);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, R::kAuto);
  }
  ASSERT_TRUE(sparse_prefill_route_from("on").is_ok());
  EXPECT_EQ(*sparse_prefill_route_from("on"), R::kOn);
  ASSERT_TRUE(sparse_prefill_route_from("off").is_ok());
  EXPECT_EQ(*sparse_prefill_route_from("off"), R::kOff);
  for (const char* v : {"1", "ON", "yes", "of"}) {
    auto r = sparse_prefill_route_from(v);
    ASSERT_FALSE(r.is_ok()) << v;
    EXPECT_NE(r.status().message().find("DSINFER_SPARSE_PREFILL"), std::string::npos) << v;
  }
}

// Session 26: the split-block prefill kernel is the default (DSINFER_SPARSE_PREFILL_KERNEL=main refuses it), in the
// fast mode at one split only; exact and batch-invariant keep main's kernel whatever the variable says. Session 27:
// `split-s26` is the same kernel with session 26's fp32 GEMM outputs around it (the A/B of wq_b's and wo_a's bf16
// outputs).
TEST(SparseAttentionPlan, SparsePrefillSplitKernelChoice) {
  using K = SparsePrefillKernel;
  for (const char* v : {static_cast<const char*>(nullptr), "", "split"}) {
    auto r = sparse_prefill_kernel_from(v);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, K::kSplit);
  }
  ASSERT_TRUE(sparse_prefill_kernel_from("main").is_ok());
  EXPECT_EQ(*sparse_prefill_kernel_from("main"), K::kMain);
  ASSERT_TRUE(sparse_prefill_kernel_from("split-s26").is_ok());
  EXPECT_EQ(*sparse_prefill_kernel_from("split-s26"), K::kSplitS26);
  for (const char* v : {"1", "on", "SPLIT", "bf16", "split-q16"}) {
    auto r = sparse_prefill_kernel_from(v);
    ASSERT_FALSE(r.is_ok()) << v;
    EXPECT_NE(r.status().message().find("DSINFER_SPARSE_PREFILL_KERNEL"), std::string::npos) << v;
  }
  EXPECT_TRUE(plan_sparse_prefill_split(K::kSplit, KernelMode::kFast, 1));
  EXPECT_TRUE(plan_sparse_prefill_split(K::kSplitS26, KernelMode::kFast, 1));
  EXPECT_FALSE(plan_sparse_prefill_split(K::kMain, KernelMode::kFast, 1));
  EXPECT_FALSE(plan_sparse_prefill_split(K::kSplit, KernelMode::kFast, 2));
  for (KernelMode m : {KernelMode::kExact, KernelMode::kBatchInvariant, KernelMode::kDefault})
    EXPECT_FALSE(plan_sparse_prefill_split(K::kSplit, m, 1));
}

// Session 28: the split kernel's variants, named by DSINFER_SPARSE_PREFILL_SPLIT_VARIANT for the A/B; the 16-byte
// stores with the key reuse when unset (session 29's H200 A/B, session 40); a value it cannot take is -1
// (plan_sparse_prefill_split_variant names it and keeps the default).
TEST(SparseAttentionPlan, SparsePrefillSplitVariant) {
  namespace d = detail;
  const int reuse = d::kSplitVarStore16 | d::kSplitVarReuse;
  EXPECT_EQ(sparse_prefill_split_variant_from(nullptr), reuse);
  EXPECT_EQ(sparse_prefill_split_variant_from(""), reuse);
  EXPECT_EQ(sparse_prefill_split_variant_from("reuse"), reuse);
  EXPECT_EQ(sparse_prefill_split_variant_from("0"), 0);
  EXPECT_EQ(sparse_prefill_split_variant_from("l2"), d::kSplitVarL2Hints);
  EXPECT_EQ(sparse_prefill_split_variant_from("store16"), d::kSplitVarStore16);
  EXPECT_EQ(sparse_prefill_split_variant_from("early"), d::kSplitVarEarlyItem);
  EXPECT_EQ(sparse_prefill_split_variant_from("all"), d::kSplitVarAll);
  EXPECT_EQ(d::kSplitVarAll, d::kSplitVarL2Hints | d::kSplitVarStore16 | d::kSplitVarEarlyItem);
  for (const char* v : {"1", "L2", "store", "all "}) EXPECT_EQ(sparse_prefill_split_variant_from(v), -1) << v;
  // the variant bits lie above every probe bit (the op tells a probe from a variant by them)
  for (const int probe : {d::kSplitProbeNoMath, d::kSplitProbeNoSoftmax, d::kSplitProbeNoGather,
                          d::kSplitProbeNoStore, d::kSplitProbeNoQ})
    EXPECT_LT(probe, d::kSplitVarL2Hints);
  // the reuse is a bit of its own, apart from the variants' and kSplitQNorm
  EXPECT_EQ(d::kSplitVarReuse & (d::kSplitVarAll | d::kSplitQNorm | d::kSplitProbeBare), 0);
}

// Session 40: the split kernel's run (consecutive tokens a block takes with the key reuse): the longest of 8, 4, 2
// that leaves the busiest block at most 1/8 more items than runs of one token do.
TEST(SparseAttentionPlan, SparsePrefillSplitRun) {
  EXPECT_EQ(sparse_prefill_split_run(4096, 1, 132), 8);  // 32 items a block either way
  EXPECT_EQ(sparse_prefill_split_run(2048, 1, 132), 8);  // 16
  EXPECT_EQ(sparse_prefill_split_run(1000, 1, 132), 8);  // 8 (125 blocks) against 8
  EXPECT_EQ(sparse_prefill_split_run(600, 1, 132), 1);   // 8, 8, 6 against 5: none within 1/8
  EXPECT_EQ(sparse_prefill_split_run(8192, 2, 132), 8);  // 2 head groups: 128 items against 125
  EXPECT_EQ(sparse_prefill_split_run(1100, 1, 132), 2);  // 8, 4, 2 give 16, 12, 10 against 9
  EXPECT_EQ(sparse_prefill_split_run(1, 1, 132), 1);
  EXPECT_EQ(sparse_prefill_split_run(0, 1, 132), 1);
  EXPECT_EQ(sparse_prefill_split_run(4096, 1, 0), 1);
}

// Session 24 (s24-sparsep2): the runner's per-layer, per-step decision of the split path. Taken only when every input
// agrees (the kernel asked for in the fast mode at one split, FP8 state, the prefill op's step, all heads on this
// rank, wo_a on the batched bf16 call); any one of them missing keeps main's path.
TEST(SparseAttentionPlan, SparsePrefillSplitStepChoice) {
  using K = SparsePrefillKernel;
  SparsePrefillSplitStep s;
  EXPECT_FALSE(plan_sparse_prefill_split_step(s));  // the defaults: main's path
  s.kernel = K::kSplit;
  s.mode = KernelMode::kFast;
  s.num_splits = 1;
  s.fp8_state = s.prefill_op = s.all_heads = s.wo_a_bf16 = true;
  EXPECT_TRUE(plan_sparse_prefill_split_step(s));
  auto without = [&](auto change) {
    SparsePrefillSplitStep t = s;
    change(t);
    return plan_sparse_prefill_split_step(t);
  };
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.kernel = K::kMain; }));
  for (KernelMode m : {KernelMode::kExact, KernelMode::kBatchInvariant, KernelMode::kDefault})
    EXPECT_FALSE(without([m](SparsePrefillSplitStep& t) { t.mode = m; }));
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.num_splits = 2; }));
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.fp8_state = false; }));
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.prefill_op = false; }));
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.all_heads = false; }));
  EXPECT_FALSE(without([](SparsePrefillSplitStep& t) { t.wo_a_bf16 = false; }));
  // The step's prefill-op input as the runner forms it: decode-sized steps never take the prefill op (so never the
  // split kernel) unless DSINFER_SPARSE_PREFILL=on forces the op; 4,096-token prefill steps do.
  EXPECT_FALSE(plan_sparse_attention_fp8_prefill(1));
  EXPECT_FALSE(plan_sparse_attention_fp8_prefill(256));
  EXPECT_TRUE(plan_sparse_attention_fp8_prefill(4096));
}
