// A MoE layer's output described instead of summed (moe_cuda's `defer`): f[t] = sum over k in order of
// weight[t, k] * yp[pos_of[t, k]] (pos_of < 0: skipped; yp fp32 or bf16, widened exactly), then + shared[t] where
// shared is not null. Whoever reads f
// computes it (ops/routed_sum.cuh: moe_cuda's combine kernel and hc_post_routed, the one definition of that
// arithmetic), so that f need not cross memory twice. Device pointers; plain C++ (shared with .cu files).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

struct RoutedSum {
  const float* yp = nullptr;        // [rows, dim]: the routed experts' outputs, in permuted row order
  const int32_t* pos_of = nullptr;  // [T, topk]: the permuted row of assignment (t, k), -1 for none
  const float* weight = nullptr;    // [T, topk]: the routing weights
  int64_t topk = 0;
  const float* shared = nullptr;    // [T, dim]: the shared expert's output, or null
  bool yp_bf16 = false;             // yp holds bf16 values (uint16_t [rows, dim]; MoePlan::yp_bf16), else fp32
};

}  // namespace dsinfer::ops
