// The MoE kernel choice (see moe_plan.h).
#include "ops/moe/moe_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/env_switch.h"
#include "ops/gemm/gemm_common.h"
#include "ops/moe/moe_fast_common.h"  // kFastTokens

namespace dsinfer::ops::cuda {

bool moe_fast_supported(const MoeExpertsDevice& ex) {
  auto fp4 = [](const DeviceExpertWeights& w) {
    return w.fmt == WeightFormat::FP4_G32 && w.scale_e8m0 && w.data && w.scale;
  };
  return fp4(ex.w1) && fp4(ex.w3) && fp4(ex.w2) && ex.dim % 128 == 0 && ex.inter % 128 == 0;
}

bool moe_cutlass_supported(const MoeExpertsDevice& ex) {
  auto fp8 = [](const DeviceExpertWeights& w) {
    return w.fmt == WeightFormat::FP8_BLOCK && w.block_n == 128 && w.block_k == 128 && w.data && w.scale;
  };
  return fp8(ex.w1) && fp8(ex.w3) && fp8(ex.w2) && ex.dim % 128 == 0 && ex.inter % 128 == 0 && ex.inter <= ex.dim;
}

bool moe_shared_fused(MoePath path, MoeExpertKernels experts, int64_t T, const MoeExpertsDevice& ex,
                      const MoeSharedDevice& sh) {
  auto fp8 = [](const DeviceWeight& w, int64_t rows, int64_t cols) {
    return w.fmt == WeightFormat::FP8_BLOCK && w.scale_e8m0 && w.block_n == 128 && w.block_k == 128 && w.data &&
           w.scale && w.rows == rows && w.cols == cols;
  };
  return path == MoePath::Fast && experts == MoeExpertKernels::kFast && T >= kMoeSharedFusedMinT &&
         T <= kMoeSharedFusedMaxT &&
         fp8(sh.w1, ex.inter, ex.dim) && fp8(sh.w3, ex.inter, ex.dim) && fp8(sh.w2, ex.dim, ex.inter);
}

MoeFastVariant moe_fast_variant_from(const char* value, bool* valid) {
  if (valid) *valid = true;
  if (!value || !*value || std::strcmp(value, "1") == 0) return MoeFastVariant::kWordDecode;
  if (std::strcmp(value, "0") == 0) return MoeFastVariant::kSession18;
  if (valid) *valid = false;
  return MoeFastVariant::kWordDecode;
}

MoeFastVariant moe_fast_variant() {
  static const MoeFastVariant v = [] {
    const char* env = std::getenv("DSINFER_MOE_FAST_VARIANT");
    bool valid = true;
    const MoeFastVariant r = moe_fast_variant_from(env, &valid);
    if (!valid) std::fprintf(stderr, "DSINFER_MOE_FAST_VARIANT must be 0 or 1, found '%s': using 1\n", env);
    return r;
  }();
  return v;
}

MoeGroupedRsVariant moe_rs_variant_from(const char* value, bool* valid) {
  if (valid) *valid = true;
  if (!value || !*value || std::strcmp(value, "3") == 0) return MoeGroupedRsVariant::kWordStageItem;
  if (std::strcmp(value, "0") == 0) return MoeGroupedRsVariant::kSession23;
  if (valid) *valid = false;
  return MoeGroupedRsVariant::kWordStageItem;
}

MoeGroupedRsVariant moe_rs_variant() {
  static const MoeGroupedRsVariant v = [] {
    const char* env = std::getenv("DSINFER_MOE_RS_VARIANT");
    bool valid = true;
    const MoeGroupedRsVariant r = moe_rs_variant_from(env, &valid);
    if (!valid) std::fprintf(stderr, "DSINFER_MOE_RS_VARIANT must be 0 or 3, found '%s': using 3\n", env);
    return r;
  }();
  return v;
}

MoePairedRoute moe_paired_from(const char* value, bool* valid) {
  if (valid) *valid = true;
  if (!value || !*value || std::strcmp(value, "auto") == 0) return MoePairedRoute::kAuto;
  if (std::strcmp(value, "on") == 0) return MoePairedRoute::kOn;
  if (std::strcmp(value, "off") == 0) return MoePairedRoute::kOff;
  if (valid) *valid = false;
  return MoePairedRoute::kAuto;
}

MoePairedRoute moe_paired_route() {
  // env_switch names a value it cannot use on stderr and reads it as unset (auto)
  static const MoePairedRoute r = moe_paired_from(env_switch("DSINFER_MOE_PAIRED", {"auto", "on", "off"}).c_str());
  return r;
}

int64_t moe_paired_grid(int64_t n, int64_t experts) {
  return std::max<int64_t>(1, std::min({experts, n / (moe_detail::kFastTokens + 1), kMoePairedMaxGridRows}));
}

int moe_cutlass_cluster_n(int64_t rows, int64_t experts, int64_t N) {
  const bool full = rows >= kMoeCutlassClusterMinRows * std::max<int64_t>(experts, 1);
  return full && N % 256 == 0 ? 2 : 1;
}

MoePlan plan_moe(MoePath path, bool fast_supported, int64_t T, int64_t topk, bool has_shared,
                 bool cutlass_supported, bool shared_gemm, int64_t experts, MoePairedRoute paired) {
  const int64_t n = T * topk;
  const bool fast = path != MoePath::Exact && fast_supported;
  const bool prefill = fast && path == MoePath::Fast && T > kMoeGroupedMinT;
  const bool cutlass = cutlass_supported && path == MoePath::CutlassFp8;
  MoePlan p;
  if (cutlass) p.experts = MoeExpertKernels::kCutlassFp8;
  else if (fast && path == MoePath::GroupedFp8) p.experts = MoeExpertKernels::kGroupedFp8;
  else if (fast && path == MoePath::Grouped) p.experts = MoeExpertKernels::kGrouped;
  else if (fast && (path == MoePath::GroupedRs || prefill)) p.experts = MoeExpertKernels::kGroupedRs;
  else p.experts = fast ? MoeExpertKernels::kFast : MoeExpertKernels::kGemm;
  const bool any_fast = p.experts != MoeExpertKernels::kGemm;
  p.gemm_skinny_ok = path != MoePath::Invariant;
  p.prep_one_launch = any_fast && n <= kMoePrepMaxN;
  p.x_bf16_in_prep = p.experts == MoeExpertKernels::kFast && p.prep_one_launch;
  p.shared_projection = has_shared && shared_gemm && prefill;
  p.yp_bf16 = p.experts == MoeExpertKernels::kGroupedRs || p.experts == MoeExpertKernels::kGrouped;
  p.side_stream = has_shared && any_fast && !p.shared_projection;
  p.paired = p.experts == MoeExpertKernels::kFast && experts > 0 && paired != MoePairedRoute::kOff &&
             (paired == MoePairedRoute::kOn || n >= kMoePairedMinRowsPerExpert * experts);
  return p;
}

MoeExpertGemmPlan plan_moe_expert_gemm(bool skinny_ok, int64_t total_rows, int64_t experts, bool w_vec) {
  MoeExpertGemmPlan p;
  if (skinny_ok && total_rows <= kMoeSkinnyRowsPerExpert * experts && w_vec) {
    p.kernel = GemmKernel::kSkinny;
    return p;
  }
  const int64_t bm = gemm_detail::kBM;
  const int64_t avg_tiles = (total_rows / std::max<int64_t>(experts, 1) + bm - 1) / bm;
  const int64_t max_tiles = (total_rows + bm - 1) / bm;
  p.m_tiles_z = int(std::clamp<int64_t>(avg_tiles + 1, 1, std::max<int64_t>(1, std::min<int64_t>(max_tiles, 65535))));
  return p;
}

GemmPrecision moe_shared_precision(MoePath path, int64_t T, int64_t N) {
  if (path == MoePath::Invariant) return GemmPrecision::kBatchInvariant;
  const bool fast = path == MoePath::Fast || path == MoePath::Grouped || path == MoePath::GroupedFp8 ||
                    path == MoePath::CutlassFp8 || path == MoePath::GroupedRs;
  return fast && gemm_stream_preferred(T, N) ? GemmPrecision::kBf16 : GemmPrecision::kFp32SmallM;
}

MoePath moe_path(KernelMode mode, int64_t T) {
  switch (mode) {
    case KernelMode::kExact: return MoePath::Exact;
    case KernelMode::kBatchInvariant: return MoePath::Invariant;
    case KernelMode::kFast: return MoePath::Fast;
    case KernelMode::kDefault: break;
  }
  return T <= kMoeDefaultFastMaxT ? MoePath::Fast : MoePath::Exact;
}

int64_t moe_chunk_tokens(KernelMode mode, int64_t T, int64_t experts, int64_t topk) {
  if (mode == KernelMode::kExact)
    return std::max<int64_t>(1, std::min<int64_t>(kGemmSkinnyMaxM, kMoeSkinnyRowsPerExpert * experts /
                                                                      std::max<int64_t>(topk, 1)));
  if (mode == KernelMode::kBatchInvariant) return kMoeInvariantChunkT;
  return std::max<int64_t>(T, 1);
}

}  // namespace dsinfer::ops::cuda
