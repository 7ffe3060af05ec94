// CPU checks of the MoE kernel choice (ops/moe/moe_plan.h) at the V4-Flash (256 experts, top 6, inter 2048) and
// shipped-model (8 experts, top 2, inter 128) shapes: the routed-expert kernels per path and T, the one-launch
// permutation's limit (and the bf16 x rows it writes), the runners' path and chunking, and the invariants exact mode
// relies on (every chunk keeps the expert and shared-expert GEMMs on the fp32 skinny kernel). The GPU side is
// tests/gpu/test_moe*.
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/moe/moe_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::ops::KernelMode;

namespace {

constexpr int64_t kFlashE = 256, kFlashK = 6, kSmallE = 8, kSmallK = 2;

MoeExpertsDevice experts(WeightFormat f, int64_t E, int64_t dim, int64_t inter) {
  static const void* const fake[1] = {nullptr};  // device pointer arrays: only their presence matters here
  MoeExpertsDevice ex;
  ex.experts = E;
  ex.dim = dim;
  ex.inter = inter;
  for (DeviceExpertWeights* w : {&ex.w1, &ex.w3, &ex.w2}) {
    w->fmt = f;
    w->data = fake;
    w->scale = fake;
  }
  return ex;
}

}  // namespace

TEST(MoePlan, FastSupportedNeedsFp4E8m0And128Multiples) {
  EXPECT_TRUE(moe_fast_supported(experts(WeightFormat::FP4_G32, kFlashE, 4096, 2048)));
  EXPECT_TRUE(moe_fast_supported(experts(WeightFormat::FP4_G32, kSmallE, 256, 128)));
  EXPECT_FALSE(moe_fast_supported(experts(WeightFormat::FP8_BLOCK, kFlashE, 4096, 2048)));
  EXPECT_FALSE(moe_fast_supported(experts(WeightFormat::FP4_G32, kSmallE, 256, 96)));
  MoeExpertsDevice f32_scales = experts(WeightFormat::FP4_G32, kSmallE, 256, 128);
  f32_scales.w2.scale_e8m0 = false;
  EXPECT_FALSE(moe_fast_supported(f32_scales));
}

// The shared expert inside the decode kernels (moe_plan.h moe_shared_fused): MoePath::Fast on the decode kernels from
// kMoeSharedFusedMinT to kMoeSharedFusedMaxT tokens, FP8_BLOCK weights with 128 x 128 E8M0 scales shaped like the
// routed experts; else through gemm_cuda.
TEST(MoePlan, SharedExpertInsideTheDecodeKernels) {
  const MoeExpertsDevice ex = experts(WeightFormat::FP4_G32, kFlashE, 4096, 2048);
  static const uint8_t fake = 0;
  auto weight = [](int64_t rows, int64_t cols) {
    return DeviceWeight{WeightFormat::FP8_BLOCK, rows, cols, &fake, &fake, true, 128, 128};
  };
  const MoeSharedDevice sh{weight(2048, 4096), weight(2048, 4096), weight(4096, 2048)};
  const auto fast = MoeExpertKernels::kFast;
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, fast, kMoeSharedFusedMinT - 1, ex, sh));
  EXPECT_TRUE(moe_shared_fused(MoePath::Fast, fast, kMoeSharedFusedMinT, ex, sh));
  EXPECT_TRUE(moe_shared_fused(MoePath::Fast, fast, kMoeSharedFusedMaxT, ex, sh));
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, fast, kMoeSharedFusedMaxT + 1, ex, sh));
  EXPECT_FALSE(moe_shared_fused(MoePath::Invariant, fast, 8, ex, sh));  // --batch-invariant keeps its own path
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, MoeExpertKernels::kGemm, 8, ex, sh));
  MoeSharedDevice f32_scales = sh;
  f32_scales.w2.scale_e8m0 = false;
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, fast, 8, ex, f32_scales));
  MoeSharedDevice wider = sh;  // another inter than the routed experts' (other grid columns)
  wider.w1.rows = wider.w3.rows = 4096;
  wider.w2.cols = 4096;
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, fast, 8, ex, wider));
  MoeSharedDevice bf16 = sh;
  bf16.w3.fmt = WeightFormat::BF16;
  EXPECT_FALSE(moe_shared_fused(MoePath::Fast, fast, 8, ex, bf16));
  // the plan's choice for the routed experts at T = 256 is still the decode kernels
  EXPECT_EQ(plan_moe(MoePath::Fast, true, kMoeSharedFusedMaxT, kFlashK, true).experts, fast);
}

// Flash fast path: decode kernels up to kMoeGroupedMinT tokens, FP8 grouped prefill GEMMs beyond; the permutation in
// one launch up to 341 tokens (2046 assignments), writing the bf16 x rows beside it; above 341 they have a launch of
// their own (and from 641 tokens the grouped path gathers x itself).
TEST(MoePlan, FlashFastPathByTokens) {
  auto plan = [](int64_t T) { return plan_moe(MoePath::Fast, true, T, kFlashK, true); };
  EXPECT_EQ(plan(1).experts, MoeExpertKernels::kFast);
  EXPECT_EQ(plan(640).experts, MoeExpertKernels::kFast);
  EXPECT_EQ(plan(641).experts, MoeExpertKernels::kGroupedRs);
  EXPECT_TRUE(plan(341).prep_one_launch);
  EXPECT_FALSE(plan(342).prep_one_launch);
  for (int64_t T : {1, 2, 3, 341}) EXPECT_TRUE(plan(T).x_bf16_in_prep) << T;
  EXPECT_FALSE(plan(342).x_bf16_in_prep);
  EXPECT_FALSE(plan(641).x_bf16_in_prep);
  EXPECT_TRUE(plan(1).side_stream);
  EXPECT_TRUE(plan(4096).side_stream);
  EXPECT_FALSE(plan_moe(MoePath::Fast, true, 1, kFlashK, false).side_stream);  // no shared expert
}

// The other paths: Grouped at every T; Invariant the decode kernels at every T (a token's sums do not depend on T)
// and, without fast support, the tiled GEMMs only; Exact and unsupported formats the expert GEMMs, in line.
TEST(MoePlan, PathsAndFallbacks) {
  EXPECT_EQ(plan_moe(MoePath::Grouped, true, 1, kSmallK, true).experts, MoeExpertKernels::kGrouped);
  for (int64_t T : {1, 1025, 8192}) {
    const MoePlan inv = plan_moe(MoePath::Invariant, true, T, kFlashK, true);
    EXPECT_EQ(inv.experts, MoeExpertKernels::kFast) << T;
    EXPECT_FALSE(inv.gemm_skinny_ok);
  }
  const MoePlan inv_gemm = plan_moe(MoePath::Invariant, false, 1, kFlashK, true);
  EXPECT_EQ(inv_gemm.experts, MoeExpertKernels::kGemm);
  EXPECT_EQ(plan_moe_expert_gemm(inv_gemm.gemm_skinny_ok, 6, kFlashE, true).kernel, GemmKernel::kTiled);
  for (MoePath path : {MoePath::Exact, MoePath::Fast, MoePath::Grouped, MoePath::GroupedFp8}) {
    const MoePlan p = plan_moe(path, path == MoePath::Exact, 1, kFlashK, true);
    EXPECT_EQ(p.experts, MoeExpertKernels::kGemm);
    EXPECT_TRUE(p.gemm_skinny_ok);
    EXPECT_FALSE(p.prep_one_launch);
    EXPECT_FALSE(p.x_bf16_in_prep);
    EXPECT_FALSE(p.side_stream);
  }
}

// The FP8 grouped kernels: MoePath::GroupedFp8 at any T (Fast's prefill route until session 18); the bf16 grouped
// kernels only by name (MoePath::Grouped); MoePath::Fast above kMoeGroupedMinT takes the RS kernels
// (RsGroupedForPrefill), the decode kernels below; Default and Invariant never take them.
TEST(MoePlan, Fp8GroupedForPrefill) {
  for (int64_t T : {1, 1024, 4096, 8192}) {
    const MoePlan p = plan_moe(MoePath::GroupedFp8, true, T, kFlashK, true);
    EXPECT_EQ(p.experts, MoeExpertKernels::kGroupedFp8) << T;
    EXPECT_TRUE(p.side_stream);
    EXPECT_FALSE(p.x_bf16_in_prep);
  }
  EXPECT_EQ(plan_moe(MoePath::Fast, true, 4096, kFlashK, true).experts, MoeExpertKernels::kGroupedRs);
  EXPECT_EQ(plan_moe(MoePath::Grouped, true, 4096, kFlashK, true).experts, MoeExpertKernels::kGrouped);
  EXPECT_EQ(plan_moe(MoePath::Fast, false, 4096, kFlashK, true).experts, MoeExpertKernels::kGemm);
  EXPECT_EQ(plan_moe(MoePath::Invariant, true, 4096, kFlashK, true).experts, MoeExpertKernels::kFast);
  EXPECT_EQ(moe_path(KernelMode::kDefault, 4096), MoePath::Exact);
  EXPECT_EQ(plan_moe(MoePath::Fast, true, 64, kFlashK, true).experts, MoeExpertKernels::kFast);
  EXPECT_EQ(moe_path(KernelMode::kFast, 4096), MoePath::Fast);
  EXPECT_EQ(moe_shared_precision(MoePath::GroupedFp8, 4096, 2048), moe_shared_precision(MoePath::Fast, 4096, 2048));
}

// The RS grouped kernels (bf16 wgmma, FP4 weights in registers): MoePath::GroupedRs at any T when the experts are
// FP4 (else the exact path), and MoePath::Fast above kMoeGroupedMinT (measured 2.0x the FP8 kernels at T = 4,096, the
// bf16 grouped path's bits: bench/NOTES.md, session 18).
TEST(MoePlan, RsGroupedForPrefill) {
  for (int64_t T : {1, 1024, 4096, 8192}) {
    const MoePlan p = plan_moe(MoePath::GroupedRs, true, T, kFlashK, true);
    EXPECT_EQ(p.experts, MoeExpertKernels::kGroupedRs) << T;
    EXPECT_TRUE(p.side_stream);
    EXPECT_FALSE(p.x_bf16_in_prep);
  }
  EXPECT_EQ(plan_moe(MoePath::GroupedRs, false, 4096, kFlashK, true).experts, MoeExpertKernels::kGemm);
  EXPECT_EQ(plan_moe(MoePath::Fast, true, 4096, kFlashK, true).experts, MoeExpertKernels::kGroupedRs);
  EXPECT_EQ(plan_moe(MoePath::Fast, true, 640, kFlashK, true).experts, MoeExpertKernels::kFast);
  EXPECT_EQ(moe_shared_precision(MoePath::GroupedRs, 4096, 2048), moe_shared_precision(MoePath::Fast, 4096, 2048));
  // the expert outputs in bf16 on the two FP4 prefill kernels only (session 37)
  EXPECT_TRUE(plan_moe(MoePath::Fast, true, 4096, kFlashK, true).yp_bf16);
  EXPECT_TRUE(plan_moe(MoePath::Grouped, true, 4096, kFlashK, true).yp_bf16);
  EXPECT_FALSE(plan_moe(MoePath::Fast, true, 640, kFlashK, true).yp_bf16);
  EXPECT_FALSE(plan_moe(MoePath::GroupedFp8, true, 4096, kFlashK, true).yp_bf16);
  EXPECT_FALSE(plan_moe(MoePath::Exact, true, 4096, kFlashK, true).yp_bf16);
  EXPECT_FALSE(plan_moe(MoePath::GroupedRs, false, 4096, kFlashK, true).yp_bf16);
}

// The CUTLASS grouped FP8 GEMMs: FP8_BLOCK experts with 128 x 128 blocks (E8M0 or fp32 scales), 128 multiples and
// inter <= dim; MoePath::CutlassFp8 at any T; never for Fast (single-term activations fail the fidelity gate), FP4
// experts, Exact, Invariant or Default.
TEST(MoePlan, CutlassForFp8ExpertsAtPrefill) {
  const MoeExpertsDevice fp8 = experts(WeightFormat::FP8_BLOCK, kFlashE, 4096, 2048);
  EXPECT_TRUE(moe_cutlass_supported(fp8));
  MoeExpertsDevice f32_scales = fp8;
  f32_scales.w2.scale_e8m0 = false;
  EXPECT_TRUE(moe_cutlass_supported(f32_scales));
  EXPECT_FALSE(moe_cutlass_supported(experts(WeightFormat::FP4_G32, kFlashE, 4096, 2048)));
  EXPECT_FALSE(moe_cutlass_supported(experts(WeightFormat::FP8_BLOCK, kSmallE, 256, 384)));  // inter > dim
  EXPECT_FALSE(moe_cutlass_supported(experts(WeightFormat::FP8_BLOCK, kSmallE, 256, 96)));
  MoeExpertsDevice b64 = fp8;
  b64.w1.block_k = 64;
  EXPECT_FALSE(moe_cutlass_supported(b64));
  auto kernels = [](MoePath path, int64_t T, bool cutlass) {
    return plan_moe(path, false, T, kFlashK, true, cutlass).experts;
  };
  for (int64_t T : {1, 511, 512, 16384}) EXPECT_EQ(kernels(MoePath::CutlassFp8, T, true), MoeExpertKernels::kCutlassFp8);
  for (int64_t T : {1, 512, 4096, 16384}) EXPECT_EQ(kernels(MoePath::Fast, T, true), MoeExpertKernels::kGemm);
  EXPECT_EQ(kernels(MoePath::Fast, 4096, false), MoeExpertKernels::kGemm);
  EXPECT_EQ(kernels(MoePath::CutlassFp8, 4096, false), MoeExpertKernels::kGemm);
  for (MoePath path : {MoePath::Exact, MoePath::Invariant, MoePath::Grouped, MoePath::GroupedFp8})
    EXPECT_EQ(kernels(path, 4096, true), MoeExpertKernels::kGemm);
  const MoePlan p = plan_moe(MoePath::CutlassFp8, false, 4096, kFlashK, true, true);
  EXPECT_TRUE(p.side_stream);
  EXPECT_FALSE(p.x_bf16_in_prep);
  EXPECT_TRUE(plan_moe(MoePath::CutlassFp8, false, 64, kFlashK, false, true).prep_one_launch);
  EXPECT_EQ(moe_shared_precision(MoePath::CutlassFp8, 4096, 2048), moe_shared_precision(MoePath::Fast, 4096, 2048));
  // FP4 experts keep their kernels whatever cutlass_supported says (it is false for them)
  EXPECT_EQ(plan_moe(MoePath::Fast, true, 4096, kFlashK, true, false).experts, MoeExpertKernels::kGroupedRs);
}

// The CUTLASS GEMMs' cluster: 1 x 2 (A multicast) wherever N / 256 is whole (measured faster at every T on the H200,
// kMoeCutlassClusterMinRows = 0), else 1 x 1.
TEST(MoePlan, CutlassClusterFromRowsPerExpert) {
  EXPECT_EQ(kMoeCutlassClusterMinRows, 0);
  EXPECT_EQ(moe_cutlass_cluster_n(512 * kFlashK, kFlashE, 4096), 2);
  EXPECT_EQ(moe_cutlass_cluster_n(4096 * kFlashK, kFlashE, 2048), 2);
  EXPECT_EQ(moe_cutlass_cluster_n(6, kFlashE, 2048), 2);
  EXPECT_EQ(moe_cutlass_cluster_n(4096 * kFlashK, kFlashE, 384), 1);  // 3 N tiles: no whole pairs
  EXPECT_EQ(moe_cutlass_cluster_n(4096 * kFlashK, kFlashE, 128), 1);
  EXPECT_EQ(moe_cutlass_cluster_n(0, 0, 256), 2);
}

// The expert GEMMs: the skinny kernel while the rows average <= 8 per expert (and 16-byte vectors are legal), else
// the tiled kernel over the average expert's row tiles + 1 per block.
TEST(MoePlan, ExpertGemmKernel) {
  EXPECT_EQ(plan_moe_expert_gemm(true, 8 * kFlashE, kFlashE, true).kernel, GemmKernel::kSkinny);
  EXPECT_EQ(plan_moe_expert_gemm(true, 8 * kFlashE + 1, kFlashE, true).kernel, GemmKernel::kTiled);
  EXPECT_EQ(plan_moe_expert_gemm(true, 6, kFlashE, false).kernel, GemmKernel::kTiled);
  EXPECT_EQ(plan_moe_expert_gemm(true, 6 * 1024, kFlashE, true).m_tiles_z, 2);   // 24 rows per expert: 1 tile
  EXPECT_EQ(plan_moe_expert_gemm(true, 8 * 1000, kSmallE, true).m_tiles_z, 17);  // 1000 rows: 16 tiles
  EXPECT_EQ(plan_moe_expert_gemm(false, 1, kSmallE, true).m_tiles_z, 1);         // never past the rows' tiles
}

// The shared expert: the streaming GEMM on the fast paths where gemm_stream_preferred (Flash w1/w3 N = 2048 up to
// 128 tokens, w2 N = 4096 likewise), the default kernels beyond and on the exact path, kBatchInvariant when invariant.
TEST(MoePlan, SharedExpertPrecision) {
  for (MoePath path : {MoePath::Fast, MoePath::Grouped}) {
    EXPECT_EQ(moe_shared_precision(path, 1, 2048), GemmPrecision::kBf16);
    EXPECT_EQ(moe_shared_precision(path, 128, 4096), GemmPrecision::kBf16);
    EXPECT_EQ(moe_shared_precision(path, 129, 2048), GemmPrecision::kFp32SmallM);
    EXPECT_EQ(moe_shared_precision(path, 200, 128), GemmPrecision::kBf16);  // shipped: N <= 1024 up to 256
  }
  EXPECT_EQ(moe_shared_precision(MoePath::Exact, 1, 2048), GemmPrecision::kFp32SmallM);
  EXPECT_EQ(moe_shared_precision(MoePath::Invariant, 1, 2048), GemmPrecision::kBatchInvariant);
}

// The shared expert through the caller's projection GEMM: only on the fast path's prefill (T > kMoeGroupedMinT)
// with a shared expert and a GEMM given, and then in line (no side stream); decode sizes, Exact, Invariant and the
// paths asked for by name keep gemm_cuda (moe_shared_precision) and the side stream where they had it.
TEST(MoePlan, SharedExpertThroughTheCallersGemmAtPrefill) {
  const MoePlan prefill = plan_moe(MoePath::Fast, true, kMoeGroupedMinT + 1, kFlashK, true, false, true);
  EXPECT_TRUE(prefill.shared_projection);
  EXPECT_FALSE(prefill.side_stream);
  const MoePlan no_gemm = plan_moe(MoePath::Fast, true, 4096, kFlashK, true, false, false);
  EXPECT_FALSE(no_gemm.shared_projection);
  EXPECT_TRUE(no_gemm.side_stream);
  const MoePlan decode = plan_moe(MoePath::Fast, true, kMoeGroupedMinT, kFlashK, true, false, true);
  EXPECT_FALSE(decode.shared_projection);
  EXPECT_TRUE(decode.side_stream);
  EXPECT_FALSE(plan_moe(MoePath::Fast, true, 4096, kFlashK, false, false, true).shared_projection);
  EXPECT_FALSE(plan_moe(MoePath::Fast, false, 4096, kFlashK, true, false, true).shared_projection);
  for (MoePath path : {MoePath::Exact, MoePath::Invariant, MoePath::Grouped, MoePath::GroupedFp8})
    EXPECT_FALSE(plan_moe(path, true, 4096, kFlashK, true, false, true).shared_projection);
}

// The runners: path per mode (kDefault, the V4.1 runner: Fast up to 1024 tokens), tokens per moe_cuda call.
TEST(MoePlan, RunnerPathAndChunk) {
  EXPECT_EQ(moe_path(KernelMode::kExact, 1), MoePath::Exact);
  EXPECT_EQ(moe_path(KernelMode::kFast, 5000), MoePath::Fast);
  EXPECT_EQ(moe_path(KernelMode::kBatchInvariant, 1), MoePath::Invariant);
  EXPECT_EQ(moe_path(KernelMode::kDefault, 1024), MoePath::Fast);
  EXPECT_EQ(moe_path(KernelMode::kDefault, 1025), MoePath::Exact);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kExact, 4096, kFlashE, kFlashK), 8);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kExact, 4096, kSmallE, kSmallK), 8);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kExact, 4096, 4, 8), 4);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kExact, 4096, 1, 16), 1);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kBatchInvariant, 4096, kFlashE, kFlashK), 1024);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kFast, 4096, kFlashE, kFlashK), 4096);
  EXPECT_EQ(moe_chunk_tokens(KernelMode::kDefault, 0, kSmallE, kSmallK), 1);  // a loop step, never 0
}

// Exact mode's promise (check-reference compares the fp32 kernels with the CPU): every chunk it makes keeps the
// routed expert GEMMs and the shared expert's GEMMs (kFp32SmallM, T rows) on the fp32 skinny kernel.
TEST(MoePlan, ExactChunksStayOnTheFp32Kernel) {
  for (int64_t E : {1, 4, 8, 64, 256})
    for (int64_t k : {1, 2, 6, 8, 16}) {
      if (k > E) continue;
      const int64_t T = moe_chunk_tokens(KernelMode::kExact, 100000, E, k);
      ASSERT_GE(T, 1);
      const MoePlan p = plan_moe(moe_path(KernelMode::kExact, T), true, T, k, true);
      ASSERT_EQ(p.experts, MoeExpertKernels::kGemm);
      EXPECT_EQ(plan_moe_expert_gemm(p.gemm_skinny_ok, T * k, E, true).kernel, GemmKernel::kSkinny) << E << "/" << k;
      EXPECT_LE(T, kGemmSkinnyMaxM);
      EXPECT_EQ(moe_shared_precision(MoePath::Exact, T, 2048), GemmPrecision::kFp32SmallM);
    }
}

// The decode kernels' variant (moe_plan.h moe_fast_variant_from): unset or 1 -> the word decode, 0 -> session 18's
// kernels, anything else -> the word decode and not valid (moe_fast_variant names it on stderr).
TEST(MoePlan, FastVariantFromItsSetting) {
  bool valid = false;
  EXPECT_EQ(moe_fast_variant_from(nullptr, &valid), MoeFastVariant::kWordDecode);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_fast_variant_from("", &valid), MoeFastVariant::kWordDecode);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_fast_variant_from("1", &valid), MoeFastVariant::kWordDecode);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_fast_variant_from("0", &valid), MoeFastVariant::kSession18);
  EXPECT_TRUE(valid);
  for (const char* bad : {"2", "01", "on", "0 "}) {
    EXPECT_EQ(moe_fast_variant_from(bad, &valid), MoeFastVariant::kWordDecode) << bad;
    EXPECT_FALSE(valid) << bad;
  }
}

// The RS grouped kernels' variant (moe_plan.h moe_rs_variant_from): unset, empty or 3 -> kWordStageItem (the default
// since session 26), 0 -> session 23's code (the A/B), anything else (1 and 2 included: session 24's intermediate
// steps, gone) -> kWordStageItem and not valid (moe_rs_variant names it on stderr).
TEST(MoePlan, RsVariantFromItsSetting) {
  bool valid = false;
  EXPECT_EQ(moe_rs_variant_from(nullptr, &valid), MoeGroupedRsVariant::kWordStageItem);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_rs_variant_from("", &valid), MoeGroupedRsVariant::kWordStageItem);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_rs_variant_from("3", &valid), MoeGroupedRsVariant::kWordStageItem);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_rs_variant_from("0", &valid), MoeGroupedRsVariant::kSession23);
  EXPECT_TRUE(valid);
  for (const char* bad : {"1", "2", "4", "01", "word", "3 ", "-1"}) {
    EXPECT_EQ(moe_rs_variant_from(bad, &valid), MoeGroupedRsVariant::kWordStageItem) << bad;
    EXPECT_FALSE(valid) << bad;
  }
  // the launch default is the same code (moe_grouped_launch.h)
  EXPECT_EQ(MoeGroupedRsArgs{}.variant, MoeGroupedRsVariant::kWordStageItem);
}

// The paired kernel (MoePlan::paired, moe_plan.h): the decode kernels take it from kMoePairedMinRowsPerExpert
// assignments per expert on average (V4-Flash, 256 experts x 6: from 214 tokens), at every T of theirs when forced
// on, never when off or for another kernel; its grid rows stay within the experts that can have 9 rows.
TEST(MoePlan, PairedKernelByRowsPerExpert) {
  auto plan = [](int64_t T, MoePairedRoute r, MoePath path = MoePath::Fast) {
    return plan_moe(path, true, T, kFlashK, true, false, false, kFlashE, r).paired;
  };
  EXPECT_FALSE(plan(213, MoePairedRoute::kAuto));
  EXPECT_TRUE(plan(214, MoePairedRoute::kAuto));
  EXPECT_TRUE(plan(256, MoePairedRoute::kAuto));
  EXPECT_TRUE(plan(640, MoePairedRoute::kAuto));
  EXPECT_FALSE(plan(641, MoePairedRoute::kAuto));  // the grouped prefill kernels
  EXPECT_TRUE(plan(1, MoePairedRoute::kOn));
  EXPECT_FALSE(plan(256, MoePairedRoute::kOff));
  EXPECT_TRUE(plan(256, MoePairedRoute::kAuto, MoePath::Invariant));  // the same bits: invariance keeps
  EXPECT_FALSE(plan(256, MoePairedRoute::kOn, MoePath::Exact));
  EXPECT_FALSE(plan_moe(MoePath::Fast, true, 256, kFlashK, true).paired);  // experts unknown
  EXPECT_EQ(moe_paired_grid(6, kFlashE), 1);
  EXPECT_EQ(moe_paired_grid(99, kFlashE), 11);  // 99 rows: at most 11 experts with 9
  EXPECT_EQ(moe_paired_grid(256 * kFlashK, kFlashE), kMoePairedMaxGridRows);
  EXPECT_EQ(moe_paired_grid(4096, 16), 16);
}

TEST(MoePlan, PairedRouteFromItsSetting) {
  bool valid = false;
  EXPECT_EQ(moe_paired_from(nullptr, &valid), MoePairedRoute::kAuto);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_paired_from("auto", &valid), MoePairedRoute::kAuto);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_paired_from("on", &valid), MoePairedRoute::kOn);
  EXPECT_TRUE(valid);
  EXPECT_EQ(moe_paired_from("off", &valid), MoePairedRoute::kOff);
  EXPECT_TRUE(valid);
  for (const char* bad : {"1", "On", "off "}) {
    EXPECT_EQ(moe_paired_from(bad, &valid), MoePairedRoute::kAuto) << bad;
    EXPECT_FALSE(valid) << bad;
  }
}
