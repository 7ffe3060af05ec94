// One drafter decoder layer on the CPU (fp32 storage, double accumulation like the target reference): the V4
// layer format with mHC around sliding-window attention (sink, grouped output projection, inverse RoPE of the
// output) and a score-routed MoE, but with caller-chosen attention keys, so that DSpark (bidirectional block
// over cached context K=V rows) and MTP-1 (causal window over its own ring) share it. Numerics follow
// transformers (the drafters were trained there): no FP8 KV simulation, router renormalization eps 1e-20.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "io/config.h"
#include "model/weights.h"

namespace dsinfer::speculative {

struct DraftLayerCtx {
  const io::ModelConfig* cfg = nullptr;  // drafter layer dimensions (speculative/draft_weights.h draft_layer_config)
  std::vector<float> inv_freq;           // main (sliding-window) RoPE
  explicit DraftLayerCtx(const io::ModelConfig& c);
};

// keys(t, kv, out): fills `out` with the K=V rows token t attends to; `kv` is this call's [T, head_dim] block
// K=V (RoPE applied), complete before the first call; calls come in order t = 0..T-1.
using KeyFn = std::function<void(int64_t t, const float* kv, std::vector<const float*>& out)>;

// X: [T, hc_mult, D] residual streams (in/out) of tokens at positions pos[T].
void draft_layer_forward(const DraftLayerCtx& ctx, const model::LayerWeights& L, std::vector<float>& X, int64_t T,
                         const int64_t* pos, const KeyFn& keys);

// K=V of inputs that skip the layer's mHC (DSpark context): RoPE(kv_norm(wkv(attn_norm(x)))) -> kv [T, head_dim].
void draft_context_kv(const DraftLayerCtx& ctx, const model::LayerWeights& L, const float* x, int64_t T,
                      const int64_t* pos, float* kv);

// hc_head collapse then the final RMSNorm: X [T, hc, D] -> h [T, D].
void draft_head_hidden(const DraftLayerCtx& ctx, const model::HcWeights& hc, const model::Vec& norm,
                       const std::vector<float>& X, int64_t T, std::vector<float>& h);

}  // namespace dsinfer::speculative
