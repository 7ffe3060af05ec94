// CPU reference of the FP8-state sparse attention decode (see sparse_attention_fp8.h).
#include "ops/sparse_attention/sparse_attention_fp8.h"

#include <algorithm>
#include <vector>

#include "core/small_float.h"
#include "ops/kv_format/kv_format.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace dsinfer::ops {

void sparse_attention_fp8_ref(const cuda::SparseAttentionFp8Params& p, const void* q, float* out) {
  const int64_t H = p.heads, D = kKvDim;
  const SparseAttentionParams ap{H, D, p.scale, p.sinks};
  const std::vector<float> inv_freq(p.inv_freq, p.inv_freq + (p.rope_dim > 0 ? p.rope_dim / 2 : 0));
  std::vector<float> qt(size_t(H * D)), rows;
  std::vector<const float*> keys;
  for (int64_t t = 0; t < p.T; ++t) {
    rows.clear();
    for (const cuda::Fp8KeySource& src : p.keys) {
      if (!src.idx) continue;
      const int64_t n = src.len ? std::clamp<int64_t>(src.len[t], 0, src.stride) : src.stride;
      for (int64_t j = 0; j < n; ++j) {
        const int32_t r = src.idx[t * src.stride + j];
        if (r < 0 || r >= src.rows) continue;
        rows.resize(rows.size() + size_t(D));
        kv_decode_row_ref(src.cache, r, rows.data() + rows.size() - size_t(D), src.pages);
      }
    }
    keys.clear();
    for (size_t k = 0; k < rows.size(); k += size_t(D)) keys.push_back(rows.data() + k);
    for (int64_t i = 0; i < H * D; ++i) {
      qt[size_t(i)] = p.q_bf16 ? small_float::from_bits(small_float::bf16_f32_bits(
                                     static_cast<const uint16_t*>(q)[t * H * D + i]))
                               : static_cast<const float*>(q)[t * H * D + i];
    }
    float* ot = out + t * H * D;
    sparse_attention_ref(ap, qt.data(), keys.data(), int64_t(keys.size()), ot);
    if (p.rope_dim > 0)
      for (int64_t h = 0; h < H; ++h) rope_apply_ref(ot + h * D, D, p.rope_dim, inv_freq, p.pos[t], true,
                                                     p.attention_factor);
  }
}

}  // namespace dsinfer::ops
