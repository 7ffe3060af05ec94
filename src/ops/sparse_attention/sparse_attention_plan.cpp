// The sparse-attention kernel choice (see sparse_attention_plan.h).
#include "ops/sparse_attention/sparse_attention_plan.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/env_switch.h"

namespace dsinfer::ops::cuda {

int64_t sparse_attention_fixed_splits(int64_t max_keys, int64_t split_keys) {
  const int64_t s = split_keys > 0 && max_keys > 0 ? (max_keys + split_keys - 1) / split_keys : 1;
  return s < 1 ? 1 : s;
}

int64_t sparse_attention_splits(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count) {
  const int64_t hpb = 8 * (heads >= 16 ? 2 : 1);
  const int64_t blocks = T * ((heads + hpb - 1) / hpb);
  const int64_t s = (2 * sm_count + blocks - 1) / (blocks > 0 ? blocks : 1);
  const int64_t cap = max_keys / 64 > 1 ? max_keys / 64 : 1;
  return s < 1 ? 1 : (s > cap ? cap : s);
}

bool sparse_attention_tc_supported(int64_t head_dim) { return head_dim == detail::kTcDim; }

int64_t sparse_attention_tc_splits(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count) {
  const int64_t groups = T * ((heads + detail::kTcHeads - 1) / detail::kTcHeads);
  const int64_t tiles = max_keys > detail::kTcKeys ? (max_keys + detail::kTcKeys - 1) / detail::kTcKeys : 1;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  int64_t best = 1;
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= tiles && s <= 256; ++s) {
    const int64_t cost = (groups * s + sms - 1) / sms * ((tiles + s - 1) / s + 2);
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

int64_t sparse_attention_split_keys(KernelMode mode) {
  return mode == KernelMode::kBatchInvariant ? kAttnInvariantSplitKeys : 0;
}

bool sparse_attention_tensor_cores(KernelMode mode, int64_t head_dim) {
  return (mode == KernelMode::kFast || mode == KernelMode::kBatchInvariant) && sparse_attention_tc_supported(head_dim);
}

namespace {
// The FP8 kernel's modelled time in twentieths of a one-block tile (sparse_attention_plan.h): waves of blocks times
// (tiles a split x the tile's cost + the block cost); the pair puts two blocks (SMs) on each (token, group, split).
int64_t fp8_cost(int64_t groups, int64_t tiles, int64_t s, int64_t sms, bool pair) {
  const int64_t blocks = groups * s * (pair ? 2 : 1);
  return (blocks + sms - 1) / sms * ((pair ? kFp8PairTileCost20 : 20) * ((tiles + s - 1) / s) + 20 * kFp8BlockCost);
}
int64_t fp8_groups(int64_t T, int64_t heads) {
  return (T > 0 ? T : 1) * ((heads + detail::kFp8Heads - 1) / detail::kFp8Heads);
}
int64_t fp8_tiles(int64_t max_keys) {
  return max_keys > detail::kFp8Keys ? (max_keys + detail::kFp8Keys - 1) / detail::kFp8Keys : 1;
}
}  // namespace

int64_t plan_sparse_attention_fp8(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count) {
  const int64_t groups = fp8_groups(T, heads), tiles = fp8_tiles(max_keys);
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  int64_t best = 1;
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= tiles && s <= 64; ++s)
    for (int pair = 0; pair < 2; ++pair) {
      const int64_t cost = fp8_cost(groups, tiles, s, sms, pair != 0);
      if (best_cost < 0 || cost < best_cost) {
        best = s;
        best_cost = cost;
      }
    }
  return best;
}

Fp8AttentionKernel plan_sparse_attention_fp8_kernel(Fp8AttentionKernel requested, int64_t T, int64_t heads,
                                                    int64_t max_keys, int64_t num_splits, int64_t sm_count) {
  if (requested != Fp8AttentionKernel::kAuto) return requested;
  const int64_t groups = fp8_groups(T, heads), tiles = fp8_tiles(max_keys);
  const int64_t sms = sm_count > 0 ? sm_count : 1, s = num_splits > 0 ? num_splits : 1;
  return fp8_cost(groups, tiles, s, sms, true) < fp8_cost(groups, tiles, s, sms, false)
             ? Fp8AttentionKernel::kWarpSpecialisedPair
             : Fp8AttentionKernel::kWarpSpecialised;
}

int64_t plan_sparse_attention_fp8_r64(int64_t T, int64_t heads, int64_t max_keys, int64_t sm_count) {
  const int64_t groups = fp8_groups(T, heads);
  const int64_t tiles =
      max_keys > detail::kFp8R64Keys ? (max_keys + detail::kFp8R64Keys - 1) / detail::kFp8R64Keys : 1;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  int64_t best = 1;
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= tiles && s <= 64; ++s) {
    const int64_t cost = (groups * s + sms - 1) / sms * ((tiles + s - 1) / s + kFp8R64BlockCost) +
                         (s > 1 ? kFp8R64CombineCost : 0);
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

SparseAttentionFp8Plan plan_sparse_attention_fp8_decode(KernelMode mode, int64_t T, int64_t heads, int64_t max_keys,
                                                        int64_t sm_count, bool roles64) {
  SparseAttentionFp8Plan p;
  if (roles64 && mode == KernelMode::kFast) {
    p.kernel = Fp8AttentionKernel::kRoles64;
    p.num_splits = plan_sparse_attention_fp8_r64(T, heads, max_keys, sm_count);
  } else {
    p.num_splits = plan_sparse_attention_fp8(T, heads, max_keys, sm_count);
  }
  return p;
}

Result<bool> sparse_decode64_from(const char* value) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "off") return false;
  if (v == "on") return true;
  return Status::errorf("DSINFER_SPARSE_DECODE64 must be on or off, found '{}'", v);
}

bool sparse_decode64_enabled() {
  static const bool on = [] {
    const Result<bool> r = sparse_decode64_from(std::getenv("DSINFER_SPARSE_DECODE64"));
    if (!r.is_ok()) std::fprintf(stderr, "%s; main's kernels run\n", r.status().message().c_str());
    return r.is_ok() && r.value();
  }();
  return on;
}

Result<SparsePrefillRoute> sparse_prefill_route_from(const char* value) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto") return SparsePrefillRoute::kAuto;
  if (v == "on") return SparsePrefillRoute::kOn;
  if (v == "off") return SparsePrefillRoute::kOff;
  return Status::errorf("DSINFER_SPARSE_PREFILL must be on, off or auto, found '{}'", v);
}

Result<SparsePrefillRoute> sparse_prefill_route_from_env() {
  return sparse_prefill_route_from(std::getenv("DSINFER_SPARSE_PREFILL"));
}

bool plan_sparse_attention_fp8_prefill(int64_t T, SparsePrefillRoute route) {
  if (route == SparsePrefillRoute::kOff || T < 1) return false;
  return route == SparsePrefillRoute::kOn || (kFp8PrefillMinTokens > 0 && T >= kFp8PrefillMinTokens);
}

Result<SparsePrefillKernel> sparse_prefill_kernel_from(const char* value) {
  const std::string v = value ? value : "";
  if (v == "main") return SparsePrefillKernel::kMain;
  if (v.empty() || v == "split") return SparsePrefillKernel::kSplit;
  if (v == "split-s26") return SparsePrefillKernel::kSplitS26;
  return Status::errorf("DSINFER_SPARSE_PREFILL_KERNEL must be main, split or split-s26, found '{}'", v);
}

Result<SparsePrefillKernel> sparse_prefill_kernel_from_env() {
  return sparse_prefill_kernel_from(std::getenv("DSINFER_SPARSE_PREFILL_KERNEL"));
}

bool plan_sparse_prefill_split(SparsePrefillKernel kernel, KernelMode mode, int64_t num_splits) {
  return kernel != SparsePrefillKernel::kMain && mode == KernelMode::kFast && num_splits == 1;
}

int sparse_prefill_split_variant_from(const char* value) {
  const std::string v = value ? value : "";
  // session 29's H200 A/B: 3.20 -> 2.86 ms with store16 (4 layers, 4,096); the reuse: session 40
  if (v.empty() || v == "reuse") return detail::kSplitVarStore16 | detail::kSplitVarReuse;
  if (v == "0") return 0;
  if (v == "l2") return detail::kSplitVarL2Hints;
  if (v == "store16") return detail::kSplitVarStore16;
  if (v == "early") return detail::kSplitVarEarlyItem;
  if (v == "all") return detail::kSplitVarAll;
  return -1;
}

int plan_sparse_prefill_split_variant() {
  static const int variant = sparse_prefill_split_variant_from(
      env_switch("DSINFER_SPARSE_PREFILL_SPLIT_VARIANT", {"0", "l2", "store16", "early", "all", "reuse"}).c_str());
  return variant;
}

int64_t sparse_prefill_split_run(int64_t T, int64_t groups, int64_t sms) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (T <= 0 || groups <= 0 || sms <= 0) return 1;
  const int64_t one = ceil_div(T * groups, sms);  // the busiest block's items with runs of one token
  for (int64_t run = 8; run > 1; run /= 2)
    if (8 * ceil_div(groups * ceil_div(T, run), sms) * run <= 9 * one) return run;
  return 1;
}

bool plan_split_q_norm() {
  static const bool on = env_switch("DSINFER_SPLIT_Q_NORM", {"0", "1"}) != "0";
  return on;
}

bool plan_sparse_prefill_split_step(const SparsePrefillSplitStep& s) {
  return plan_sparse_prefill_split(s.kernel, s.mode, s.num_splits) && s.fp8_state && s.prefill_op && s.all_heads &&
         s.wo_a_bf16;
}

SparseAttentionPlan plan_sparse_attention(KernelMode mode, int64_t T, int64_t heads, int64_t head_dim,
                                          int64_t max_keys, int64_t sm_count) {
  SparseAttentionPlan p;
  p.split_keys = sparse_attention_split_keys(mode);
  p.tensor_cores = sparse_attention_tensor_cores(mode, head_dim);
  if (mode == KernelMode::kBatchInvariant) p.num_splits = sparse_attention_fixed_splits(max_keys, p.split_keys);
  else if (p.tensor_cores) p.num_splits = sparse_attention_tc_splits(T, heads, max_keys, sm_count);
  else p.num_splits = sparse_attention_splits(T, heads, max_keys, sm_count);
  return p;
}

}  // namespace dsinfer::ops::cuda
