// Partial interleaved RoPE on the trailing `rope_dim` channels of a vector (layout [nope | rope]); pairs
// (2i, 2i+1) rotate by angle p * inv_freq[i]. Plain RoPE for sliding layers, YaRN-blended frequencies for
// compressed layers (architecture notes §3.2). The inverse (angle -p) undoes it on the attention output.
#pragma once
#include <cstdint>
#include <vector>

#include "io/config.h"

namespace dsinfer::ops {

// inv_freq[i], i < rope_dim/2, computed as transformers does (fp32), incl. the YaRN ramp blend.
std::vector<float> rope_inv_freq(const io::RopeParams& p, int64_t rope_dim);

// Rotates x[dim - rope_dim .. dim) in place at position `pos` (inverse: angle -pos). `attention_factor`
// scales cos/sin (1.0 for every DeepSeek-V4 checkpoint).
void rope_apply_ref(float* x, int64_t dim, int64_t rope_dim, const std::vector<float>& inv_freq, int64_t pos,
                    bool inverse, float attention_factor = 1.0f);

}  // namespace dsinfer::ops
