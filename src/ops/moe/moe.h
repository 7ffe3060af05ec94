// Mixture-of-experts routing and SwiGLU experts (architecture notes §8).
// Router: s = score_fn(x . gate^T); selection by top-k of (s + bias) (bias only for selection) or by the
// token's hash row tid2eid[token]; weights = s[selected], renormalized (sum + eps), times routed_scaling_factor.
// Expert: w2 . (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsinfer::ops {

enum class ScoreFunc { SqrtSoftplus, Softmax, Sigmoid };

struct RouterParams {
  const float* gate = nullptr;   // [E, D]
  const float* bias = nullptr;   // [E] or nullptr (hash layers)
  int64_t experts = 0, dim = 0, topk = 0;
  ScoreFunc score = ScoreFunc::SqrtSoftplus;
  bool renormalize = true;
  float norm_eps = 0.0f;         // official 0, transformers 1e-20
  float route_scale = 1.0f;
};

// For one token: fills idx[topk] and weight[topk]. hash_row: the token's tid2eid row (nullptr for
// score-routed layers). Selection ties break toward the lower expert id.
void route_ref(const RouterParams& p, const float* x, const int32_t* hash_row, int32_t* idx, float* weight);

struct ExpertParams {
  const float* w1 = nullptr;  // [I, D] gate
  const float* w3 = nullptr;  // [I, D] up
  const float* w2 = nullptr;  // [D, I] down
  int64_t dim = 0, inter = 0;
  float limit = 0.0f;         // 0 = no clamp
};

// out[D] += scale * expert(x).
void expert_accumulate_ref(const ExpertParams& p, const float* x, float scale, double* out);

}  // namespace dsinfer::ops
