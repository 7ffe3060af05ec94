// MTP-1 drafter, CPU reference (see mtp1.h).
#include "speculative/mtp1.h"

#include <algorithm>

#include "ops/linear/linear.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace dsinfer::speculative {

Mtp1Cpu::Mtp1Cpu(const io::ModelConfig& target, Mtp1Weights w, SharedWeights sw, int32_t num_slots)
    : tc_(target),
      w_(std::move(w)),
      sw_(std::move(sw)),
      ctx_(tc_),
      tapped_{target.num_hidden_layers - 1},
      num_slots_(num_slots),
      window_(target.sliding_window) {
  ring_.assign(size_t(num_slots) * size_t(window_) * size_t(tc_.head_dim), 0.0f);
  last_h_.assign(size_t(num_slots) * size_t(tc_.hidden_size), 0.0f);
  last_pos_.assign(size_t(num_slots), -1);
}

Status Mtp1Cpu::ingest(std::span<const IngestItem> items, std::span<const float> hidden) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, hd = tc_.head_dim, V = tc_.vocab_size;
  const float eps = float(tc_.rms_norm_eps);
  std::vector<float> e, X, hs, h;
  std::vector<int64_t> pos;
  for (const IngestItem& it : items) {
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("mtp1 ingest: slot {} outside [0, {})", it.slot, num_slots_);
    const int64_t T = it.count;
    if (T <= 0) continue;
    if (int64_t(it.next_tokens.size()) != T) return Status::error("mtp1 ingest: needs the next token of every position");
    if (int64_t(it.row + T) * n * D > int64_t(hidden.size()))
      return Status::errorf("mtp1 ingest: rows [{}, {}) outside the captured hidden states", it.row, it.row + T);
    e.assign(size_t(T * D), 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t tok = it.next_tokens[size_t(t)];
      if (tok < 0 || tok >= V) return Status::errorf("mtp1 ingest: token {} outside the vocabulary", tok);
      std::copy_n(sw_.embed.p() + int64_t(tok) * D, D, e.data() + t * D);
    }
    ops::rmsnorm_ref(e.data(), T, D, w_.enorm.data(), eps, e.data());
    std::vector<float> ep(size_t(T * D));
    ops::linear_ref(e.data(), T, D, w_.e_proj.p(), D, ep.data());
    hs.assign(hidden.begin() + (it.row * n * D), hidden.begin() + (it.row + T) * n * D);
    ops::rmsnorm_ref(hs.data(), T * n, D, w_.hnorm.data(), eps, hs.data());
    X.assign(size_t(T * n * D), 0.0f);
    ops::linear_ref(hs.data(), T * n, D, w_.h_proj.p(), D, X.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) X[size_t((t * n + j) * D + d)] += ep[size_t(t * D + d)];
    pos.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = it.start_pos + t;
    auto keys = [&](int64_t t, const float* kv, std::vector<const float*>& out) {
      const int64_t p = pos[size_t(t)];
      std::copy_n(kv + t * hd, hd, ring(it.slot, p));
      for (int64_t q = std::max<int64_t>(0, p - window_ + 1); q <= p; ++q) out.push_back(ring(it.slot, q));
    };
    draft_layer_forward(ctx_, w_.layer, X, T, pos.data(), keys);
    // Only the last position's output is ever used (it drafts the token after the anchor).
    std::vector<float> last(X.end() - n * D, X.end());
    draft_head_hidden(ctx_, w_.hc_head, w_.norm, last, 1, h);
    std::copy(h.begin(), h.end(), last_h_.begin() + int64_t(it.slot) * D);
    last_pos_[size_t(it.slot)] = it.start_pos + T - 1;
  }
  return Status::ok();
}

void Mtp1Cpu::last_logits(int32_t slot, std::vector<float>& logits) const {
  logits.assign(size_t(tc_.vocab_size), 0.0f);
  ops::linear_ref(last_h_.data() + int64_t(slot) * tc_.hidden_size, 1, tc_.hidden_size, sw_.head.p(), tc_.vocab_size,
                  logits.data());
}

Status Mtp1Cpu::propose(std::span<const ProposeItem> items, const DrawFn& draw, std::vector<Proposal>& out) {
  out.assign(items.size(), {});
  std::vector<float> logits;
  for (size_t i = 0; i < items.size(); ++i) {
    const ProposeItem& it = items[i];
    if (it.num_drafts <= 0) continue;
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("mtp1 propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (last_pos_[size_t(it.slot)] != it.anchor_pos - 1)
      return Status::errorf("mtp1 propose: slot {} ingested up to position {}, the anchor is at {}", it.slot,
                            last_pos_[size_t(it.slot)], it.anchor_pos);
    last_logits(it.slot, logits);
    out[i].tokens.push_back(draw(i, 0, logits));
  }
  return Status::ok();
}

}  // namespace dsinfer::speculative
