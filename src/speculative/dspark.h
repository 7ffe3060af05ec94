// DSpark drafter, CPU reference (research/dspark-deepinfer.md §1.2, docs/small_model.md; PyTorch reference
// tools/train/arch.py DSpark). Context: per committed position the mean over the hc streams of each tapped
// target layer's output, concatenated, -> main_proj -> main_norm = H_ctx; every draft layer caches its own
// K=V projection RoPE(kv_norm(wkv(attn_norm(H_ctx)))) per position (a ring of `window` rows per slot).
// Block: [anchor, noise x (gamma-1)] at positions anchor .. anchor+gamma-1, bidirectional within the block and
// attending to context positions [max(anchor - window, context_start), anchor); hc_head -> norm -> h_k; draft logits
// head(h_k) + W2 W1[x_{k-1}] (x_0 = anchor), confidence logit w.[h_k ; W1[x_{k-1}]] + b.
// DeepSeek-V4.1 (w.v41; research/dsv41-architecture.md §2.9): the tapped streams are each target layer's input (after
// its Engram), the context K=V has no attn_norm and an FP8 QAT, the stages are V4.1 layers carrying the mHC pre
// (draft_layer_forward_v41), hb is the collapse with the last stage's pre (no hc_head), h_k = norm(hb_k), and the
// bias-free confidence head reads the pre-norm hb_k: w.[hb_k ; W1[x_{k-1}]].
#pragma once
#include <algorithm>

#include "speculative/draft_layer.h"
#include "speculative/draft_weights.h"
#include "speculative/drafter.h"

namespace dsinfer::speculative {

class DsparkCpu final : public Drafter {
 public:
  DsparkCpu(const io::ModelConfig& target, DraftConfig dc, DsparkWeights w, SharedWeights sw, int32_t num_slots);
  SpecMethod method() const override { return SpecMethod::kDspark; }
  const std::vector<int64_t>& tapped_layers() const override { return dc_.target_layer_ids; }
  int32_t max_drafts() const override { return int32_t(dc_.block_size); }
  bool has_confidence() const override { return true; }
  int64_t context_window() const override { return window_; }
  int64_t resume_positions() const override { return std::min(kDsparkResumePositions, window_); }
  Status ingest(std::span<const IngestItem> items, std::span<const float> hidden) override;
  Status propose(std::span<const ProposeItem> items, const DrawFn& draw, std::vector<Proposal>& out) override;

  // Final normed hidden h [gamma, D] of one block, and hc [gamma, D], what the confidence head reads (V4: h; V4.1:
  // the pre-norm collapse).
  void block_hidden(int32_t slot, int64_t anchor_pos, int32_t anchor_token, std::vector<float>& h,
                    std::vector<float>& hc, int64_t context_start = 0) const;
  // Draft logits [V] and confidence logit of one slot of the block given its predecessor token.
  float head(const float* h, const float* hc, int32_t prev, std::vector<float>& logits) const;

 private:
  float* ring(int32_t slot, int64_t layer, int64_t pos) {
    return ring_.data() + ((size_t(slot) * size_t(w_.layers.size()) + size_t(layer)) * size_t(window_) +
                           size_t(pos % window_)) * size_t(lc_.head_dim);
  }
  const float* ring(int32_t slot, int64_t layer, int64_t pos) const {
    return const_cast<DsparkCpu*>(this)->ring(slot, layer, pos);
  }

  io::ModelConfig tc_, lc_;  // target, drafter layers
  DraftConfig dc_;
  DsparkWeights w_;
  SharedWeights sw_;
  DraftLayerCtx ctx_;
  int32_t num_slots_;
  int64_t window_;
  std::vector<float> ring_;  // [slots, layers, window, head_dim]
};

}  // namespace dsinfer::speculative
