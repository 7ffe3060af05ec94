// RMSNorm over the last dimension: y = x * rsqrt(mean(x^2) + eps) [* w]. Weighted (attn_norm, ffn_norm,
// q_norm, kv_norm, compressor norms, final norm) and unweighted (per-head q normalization, mHC input RMS).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

// x, y: [rows, dim] (may alias); w: [dim] or nullptr for the unweighted form.
void rmsnorm_ref(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y);

}  // namespace dsinfer::ops
