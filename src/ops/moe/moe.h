// Mixture-of-experts routing and SwiGLU experts (architecture notes §8).
// Router: s = score_fn(x . gate^T); selection by top-k of (s + bias) (bias only for selection) or by the
// token's hash row tid2eid[token]; weights = s[selected], renormalized (sum + eps), times routed_scaling_factor.
// Expert: w2 . (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/config_enums.h"

namespace dsinfer::ops {

using ScoreFunc = io::ScoringFunc;

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

// Token permutation of the GPU MoE (specification of moe_cuda's grouping): assignment a = t*topk + k with expert
// e = idx[a] in [0, experts) goes to permuted row pos_of[a]; rows are grouped by expert (offsets[e] = first row of
// expert e, offsets[experts] = number of valid assignments) and ordered by a within an expert; perm_token[row] =
// a / topk. Invalid ids get pos_of = -1. offsets has experts + 1 entries, perm_token and pos_of T * topk.
void moe_permutation_ref(const int32_t* idx, int64_t T, int64_t topk, int64_t experts, int32_t* offsets,
                         int32_t* perm_token, int32_t* pos_of);

}  // namespace dsinfer::ops
