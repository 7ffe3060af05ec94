// One drafter decoder layer on the CPU (fp32 storage, double accumulation like the target reference): the V4
// layer format with mHC around sliding-window attention (sink, grouped output projection, inverse RoPE of the
// output) and a score-routed MoE, but with caller-chosen attention keys, so that DSpark (bidirectional block
// over cached context K=V rows) and MTP-1 (causal window over its own ring) share it. Numerics follow
// transformers (the drafters were trained there): no FP8 KV simulation, router renormalization eps 1e-20.
// DeepSeek-V4.1's drafter stages (research/dsv41-architecture.md §2.9) are V4.1 layers: the mHC collapses with the
// carried pre (draft_layer_forward_v41), q has no per-head norm, the K=V rows get the window KV's FP8 1x32 QAT, and
// the context K=V projects the context without attn_norm.
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
  bool v41 = false;                      // DeepSeek-V4.1 stages (cfg->is_v41())
  explicit DraftLayerCtx(const io::ModelConfig& c);
};

// keys(t, kv, out): fills `out` with the K=V rows token t attends to; `kv` is this call's [T, head_dim] block
// K=V (RoPE applied), complete before the first call; calls come in order t = 0..T-1.
using KeyFn = std::function<void(int64_t t, const float* kv, std::vector<const float*>& out)>;

// X: [T, hc_mult, D] residual streams (in/out) of tokens at positions pos[T].
void draft_layer_forward(const DraftLayerCtx& ctx, const model::LayerWeights& L, std::vector<float>& X, int64_t T,
                         const int64_t* pos, const KeyFn& keys);

// DeepSeek-V4.1 stage: X [T, hc_mult, D] as above; pre [T, hc_mult] in: the carried coefficients that collapse the
// attention input (one-hot for the first stage), out: the FFN site's own pre (what collapses the next stage's input).
void draft_layer_forward_v41(const DraftLayerCtx& ctx, const model::LayerWeights& L, std::vector<float>& X, int64_t T,
                             const int64_t* pos, const KeyFn& keys, std::vector<float>& pre);

// K=V of inputs that skip the layer's mHC (DSpark context): RoPE(kv_norm(wkv(attn_norm(x)))) -> kv [T, head_dim]
// (V4.1: QAT-fp8(RoPE(kv_norm(wkv(x))))).
void draft_context_kv(const DraftLayerCtx& ctx, const model::LayerWeights& L, const float* x, int64_t T,
                      const int64_t* pos, float* kv);

// V4.1 (no hc_head): hb [T, D] = the collapse of X with the last stage's pre, h [T, D] = RMSNorm(hb, norm).
void draft_collapse_hidden(const DraftLayerCtx& ctx, const std::vector<float>& pre, const model::Vec& norm,
                           const std::vector<float>& X, int64_t T, std::vector<float>& hb, std::vector<float>& h);

// hc_head collapse then the final RMSNorm: X [T, hc, D] -> h [T, D].
void draft_head_hidden(const DraftLayerCtx& ctx, const model::HcWeights& hc, const model::Vec& norm,
                       const std::vector<float>& X, int64_t T, std::vector<float>& h);

}  // namespace dsinfer::speculative
