// DSpark drafter, CPU reference (see dspark.h).
#include "speculative/dspark.h"

#include <algorithm>

#include "ops/linear/linear.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace dsinfer::speculative {

DsparkCpu::DsparkCpu(const io::ModelConfig& target, DraftConfig dc, DsparkWeights w, SharedWeights sw, int32_t num_slots)
    : tc_(target),
      lc_(draft_layer_config(target, dc)),
      dc_(std::move(dc)),
      w_(std::move(w)),
      sw_(std::move(sw)),
      ctx_(lc_),
      num_slots_(num_slots),
      window_(lc_.sliding_window) {
  ring_.assign(size_t(num_slots) * w_.layers.size() * size_t(window_) * size_t(lc_.head_dim), 0.0f);
}

Status DsparkCpu::ingest(std::span<const IngestItem> items, std::span<const float> hidden) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, m = int64_t(dc_.target_layer_ids.size());
  const int64_t row_width = m * n * D, hd = lc_.head_dim;
  std::vector<float> feats, hctx, kv;
  std::vector<int64_t> pos;
  for (const IngestItem& it : items) {
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark ingest: slot {} outside [0, {})", it.slot, num_slots_);
    if (int64_t(it.row + it.count) * row_width > int64_t(hidden.size()))
      return Status::errorf("dspark ingest: rows [{}, {}) outside the captured hidden states", it.row, it.row + it.count);
    const int64_t T = it.count;
    if (T <= 0) continue;
    // Only the last `window` positions can ever be read again.
    const int64_t skip = std::max<int64_t>(0, T - window_);
    const int64_t Tk = T - skip;
    feats.assign(size_t(Tk * m * D), 0.0f);
    pos.resize(size_t(Tk));
    for (int64_t t = 0; t < Tk; ++t) {
      pos[size_t(t)] = it.start_pos + skip + t;
      const float* src = hidden.data() + (it.row + skip + t) * row_width;
      for (int64_t l = 0; l < m; ++l)
        for (int64_t d = 0; d < D; ++d) {
          float s = 0.0f;  // PyTorch: X.float().mean(dim=streams)
          for (int64_t j = 0; j < n; ++j) s += src[(l * n + j) * D + d];
          feats[size_t((t * m + l) * D + d)] = s / float(n);
        }
    }
    hctx.assign(size_t(Tk * D), 0.0f);
    ops::linear_ref(feats.data(), Tk, m * D, w_.main_proj.p(), D, hctx.data());
    ops::rmsnorm_ref(hctx.data(), Tk, D, w_.main_norm.data(), float(tc_.rms_norm_eps), hctx.data());
    kv.resize(size_t(Tk * hd));
    for (size_t l = 0; l < w_.layers.size(); ++l) {
      draft_context_kv(ctx_, w_.layers[l], hctx.data(), Tk, pos.data(), kv.data());
      for (int64_t t = 0; t < Tk; ++t) std::copy_n(kv.data() + t * hd, hd, ring(it.slot, int64_t(l), pos[size_t(t)]));
    }
  }
  return Status::ok();
}

void DsparkCpu::block_hidden(int32_t slot, int64_t anchor_pos, int32_t anchor_token, std::vector<float>& h,
                             std::vector<float>& hc, int64_t context_start) const {
  const int64_t g = dc_.block_size, D = tc_.hidden_size, n = tc_.hc_mult;
  std::vector<int32_t> tok(size_t(g), int32_t(dc_.noise_token_id));
  tok[0] = anchor_token;
  std::vector<int64_t> pos(static_cast<size_t>(g));
  for (int64_t k = 0; k < g; ++k) pos[size_t(k)] = anchor_pos + k;
  std::vector<float> X(size_t(g * n * D));
  for (int64_t k = 0; k < g; ++k)
    for (int64_t j = 0; j < n; ++j) std::copy_n(sw_.embed.p() + int64_t(tok[size_t(k)]) * D, D, X.data() + (k * n + j) * D);
  const int64_t ctx_begin = std::max<int64_t>({0, anchor_pos - window_, context_start});
  std::vector<float> pre(size_t(g * n), 0.0f);  // V4.1: the carried mHC pre, one-hot on stream 0 at the first stage
  for (int64_t k = 0; k < g; ++k) pre[size_t(k * n)] = 1.0f;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    auto keys = [&](int64_t, const float* kv, std::vector<const float*>& out) {
      for (int64_t p = ctx_begin; p < anchor_pos; ++p) out.push_back(ring(slot, int64_t(l), p));
      for (int64_t k = 0; k < g; ++k) out.push_back(kv + k * lc_.head_dim);
    };
    if (w_.v41) draft_layer_forward_v41(ctx_, w_.layers[l], X, g, pos.data(), keys, pre);
    else draft_layer_forward(ctx_, w_.layers[l], X, g, pos.data(), keys);
  }
  if (w_.v41) {
    draft_collapse_hidden(ctx_, pre, w_.norm, X, g, hc, h);
    return;
  }
  draft_head_hidden(ctx_, w_.hc_head, w_.norm, X, g, h);
  hc = h;
}

float DsparkCpu::head(const float* h, const float* hc, int32_t prev, std::vector<float>& logits) const {
  const int64_t D = tc_.hidden_size, V = tc_.vocab_size, r = dc_.markov_rank;
  logits.assign(size_t(V), 0.0f);
  ops::linear_ref(h, 1, D, sw_.head.p(), V, logits.data());
  const float* e = r > 0 ? w_.markov_embed.p() + int64_t(prev) * r : nullptr;
  if (r > 0) {
    std::vector<float> bias(static_cast<size_t>(V));
    ops::linear_ref(e, 1, r, w_.markov_head.p(), V, bias.data());
    for (int64_t v = 0; v < V; ++v) logits[size_t(v)] += bias[size_t(v)];
  }
  double c = w_.confidence_b;
  for (int64_t d = 0; d < D; ++d) c += double(w_.confidence_w[size_t(d)]) * double(hc[d]);
  for (int64_t i = 0; i < r; ++i) c += double(w_.confidence_w[size_t(D + i)]) * double(e[i]);
  return float(c);
}

Status DsparkCpu::propose(std::span<const ProposeItem> items, const DrawFn& draw, std::vector<Proposal>& out) {
  out.assign(items.size(), {});
  std::vector<float> h, hc, logits;
  const int64_t D = tc_.hidden_size;
  for (size_t i = 0; i < items.size(); ++i) {
    const ProposeItem& it = items[i];
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (it.num_drafts > dc_.block_size)
      return Status::errorf("dspark propose: {} drafts asked, the block has {}", it.num_drafts, dc_.block_size);
    if (it.num_drafts <= 0) continue;
    block_hidden(it.slot, it.anchor_pos, it.anchor_token, h, hc, it.context_start);
    int32_t prev = it.anchor_token;
    for (int32_t k = 0; k < it.num_drafts; ++k) {
      const float c = head(h.data() + k * D, hc.data() + k * D, prev, logits);
      prev = draw(i, k, logits);
      out[i].tokens.push_back(prev);
      out[i].confidence_logits.push_back(c);
    }
  }
  return Status::ok();
}

}  // namespace dsinfer::speculative
