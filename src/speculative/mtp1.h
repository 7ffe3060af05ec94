// MTP-1 drafter, CPU reference (DeepSeek-V4 MTP, research/dsv4-architecture.md §9; PyTorch reference
// tools/train/arch.py MTP1): for committed position i, X = h_proj(hnorm(X_main_i)) + e_proj(enorm(embed(t_{i+1})))
// (X_main = the last target layer's output streams), one sliding-window decoder layer over the MTP's own causal
// ring, hc_head -> norm -> the target's head = the distribution of t_{i+2}. The output at the last ingested
// position (anchor - 1) is the single draft after the anchor.
#pragma once
#include "speculative/draft_layer.h"
#include "speculative/draft_weights.h"
#include "speculative/drafter.h"

namespace dsinfer::speculative {

class Mtp1Cpu final : public Drafter {
 public:
  Mtp1Cpu(const io::ModelConfig& target, Mtp1Weights w, SharedWeights sw, int32_t num_slots);
  SpecMethod method() const override { return SpecMethod::kMtp1; }
  const std::vector<int64_t>& tapped_layers() const override { return tapped_; }
  int32_t max_drafts() const override { return 1; }
  bool has_confidence() const override { return false; }
  int64_t context_window() const override { return window_; }
  int64_t resume_positions() const override { return window_; }  // its ingest reads its own earlier rows
  Status ingest(std::span<const IngestItem> items, std::span<const float> hidden) override;
  Status propose(std::span<const ProposeItem> items, const DrawFn& draw, std::vector<Proposal>& out) override;
  // Logits [V] for the token after the anchor of `slot` (last ingested position + 2).
  void last_logits(int32_t slot, std::vector<float>& logits) const;

 private:
  float* ring(int32_t slot, int64_t pos) {
    return ring_.data() + (size_t(slot) * size_t(window_) + size_t(pos % window_)) * size_t(tc_.head_dim);
  }

  io::ModelConfig tc_;
  Mtp1Weights w_;
  SharedWeights sw_;
  DraftLayerCtx ctx_;
  std::vector<int64_t> tapped_;
  int32_t num_slots_;
  int64_t window_;
  std::vector<float> ring_;       // [slots, window, head_dim]
  std::vector<float> last_h_;     // [slots, D]: normed hidden of the last ingested position
  std::vector<int64_t> last_pos_; // [slots]
};

}  // namespace dsinfer::speculative
