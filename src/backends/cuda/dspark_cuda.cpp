// DSpark drafter on the GPU (see draft_cuda.h; CPU reference spec/dspark.cpp, same ring layout
// [slots, layers, window, head_dim]). ingest: stream mean of the tapped layers' captured rows -> main_proj ->
// main_norm -> per layer K=V rows scattered into the ring. propose: the whole block of every sequence in one
// batched forward (embed -> draft layers over ring context + the bidirectional block -> hc_head + norm -> head),
// then per draft position the Markov bias of the chosen predecessor added on the device and the rows downloaded
// for the host's draw; the confidence logit is computed on the host from the downloaded h (D + r products).
#include <algorithm>

#include "backends/cuda/draft_cuda.h"
#include "backends/cuda/draft_kernels_cuda.h"
#include "cuda/cuda_common.h"
#include "ops/embed/embed_cuda.h"

namespace dsinfer::backends {

using detail::DraftKeys;

DsparkCuda::DsparkCuda(const io::ModelConfig& target, spec::DraftConfig dc, spec::DsparkWeights w, int32_t num_slots,
                       DraftDeviceContext ctx)
    : tc_(target),
      lc_(spec::draft_layer_config(target, dc)),
      dc_(std::move(dc)),
      w_(std::move(w)),
      num_slots_(num_slots),
      window_(lc_.sliding_window),
      ctx_(std::move(ctx)),
      fwd_(lc_, ctx_) {}

Status DsparkCuda::init() {
  DSI_RETURN_IF_ERROR(fwd_.init());
  for (const model::LayerWeights& l : w_.layers) {
    DSI_ASSIGN_OR_RETURN(std::unique_ptr<DraftDeviceLayer> d, upload_draft_layer(l, lc_));
    layers_.push_back(std::move(d));
  }
  DSI_ASSIGN_OR_RETURN(main_proj_, upload_mat(owned_, w_.main_proj));
  DSI_ASSIGN_OR_RETURN(main_norm_, upload_floats(owned_, w_.main_norm.data(), w_.main_norm.size()));
  DSI_ASSIGN_OR_RETURN(norm_, upload_floats(owned_, w_.norm.data(), w_.norm.size()));
  DSI_ASSIGN_OR_RETURN(hc_head_, upload_hc(owned_, w_.hc_head));
  if (dc_.markov_rank > 0) {
    DSI_ASSIGN_OR_RETURN(markov_embed_, upload_mat(owned_, w_.markov_embed));
    DSI_ASSIGN_OR_RETURN(markov_head_, upload_mat(owned_, w_.markov_head));
  }
  if (w_.confidence_w.size() != size_t(tc_.hidden_size + dc_.markov_rank))
    return Status::errorf("dspark (cuda): confidence weights hold {} floats, expected {}", w_.confidence_w.size(),
                          tc_.hidden_size + dc_.markov_rank);
  const size_t ring = size_t(num_slots_) * layers_.size() * size_t(window_) * size_t(lc_.head_dim);
  DSI_RETURN_IF_ERROR(ring_.alloc(ring, "dspark context ring"));
  if (ring) DSI_CUDA_TRY(cudaMemsetAsync(ring_.data(), 0, ring * 4, static_cast<cudaStream_t>(ctx_.stream)));
  return Status::ok();
}

namespace {
template <typename T>
Status grow(cuda::DeviceBuffer<T>& b, size_t n, void* stream, const char* what) {
  if (b.size() >= n) return Status::ok();
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));  // queued kernels may read the old one
  return b.alloc(std::max<size_t>(n, 64), what);
}
}  // namespace

Status DsparkCuda::ingest(std::span<const spec::IngestItem> items, std::span<const float> hidden) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, m = int64_t(dc_.target_layer_ids.size()), hd = lc_.head_dim;
  const int64_t row_width = m * n * D;
  std::vector<int32_t> rows, slots;
  std::vector<int64_t> pos;
  for (const spec::IngestItem& it : items) {
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark ingest: slot {} outside [0, {})", it.slot, num_slots_);
    if (it.count <= 0) continue;
    const int64_t skip = std::max<int64_t>(0, it.count - window_);  // only the last `window` positions are read again
    for (int64_t t = skip; t < it.count; ++t) {
      rows.push_back(int32_t(it.row + t));
      slots.push_back(it.slot);
      pos.push_back(it.start_pos + t);
    }
  }
  const int64_t N = int64_t(rows.size());
  if (N == 0) return Status::ok();
  DSI_ASSIGN_OR_RETURN(std::span<const float> src, device_hidden_source(ctx_, hidden, hidden_up_));
  for (const spec::IngestItem& it : items)
    if (it.count > 0 && int64_t(it.row + it.count) * row_width > int64_t(src.size()))
      return Status::errorf("dspark ingest: rows [{}, {}) outside the captured hidden states", it.row, it.row + it.count);
  void* s = ctx_.stream;
  DSI_RETURN_IF_ERROR(upload_async(s, rows_, rows.data(), rows.size() * 4, "dspark rows"));
  DSI_RETURN_IF_ERROR(upload_async(s, slot_, slots.data(), slots.size() * 4, "dspark slots"));
  DSI_RETURN_IF_ERROR(upload_async(s, pos_, pos.data(), pos.size() * 8, "dspark positions"));
  DSI_RETURN_IF_ERROR(fwd_.reserve(N, 0));
  DSI_RETURN_IF_ERROR(grow(feats_, size_t(N * m * D), s, "dspark context features"));
  DSI_RETURN_IF_ERROR(grow(hctx_, size_t(N * D), s, "dspark context"));
  DSI_RETURN_IF_ERROR(grow(kvc_, size_t(N * hd), s, "dspark context kv"));
  DSI_RETURN_IF_ERROR(stream_mean_cuda(src.data(), rows_.as<int32_t>(), N, m, n, D, feats_.data(), s));
  DSI_RETURN_IF_ERROR(fwd_.gemm(feats_.data(), N, m * D, main_proj_, hctx_.data(), D, false));
  DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(hctx_.data(), N, D, main_norm_, hctx_.data()));
  const int64_t L = int64_t(layers_.size()), slot_stride = L * window_ * hd;
  for (int64_t l = 0; l < L; ++l) {
    DSI_RETURN_IF_ERROR(fwd_.context_kv(layers_[size_t(l)]->L, hctx_.data(), N, pos_.as<int64_t>(), kvc_.data()));
    DSI_RETURN_IF_ERROR(ring_scatter_cuda(kvc_.data(), slot_.as<int32_t>(), pos_.as<int64_t>(), N, hd,
                                          ring_.data() + l * window_ * hd, slot_stride, window_, s));
  }
  return Status::ok();
}

// Logits without the Markov bias [B * g, V] on the device and the normed hidden h [B * g, D] on the host.
Status DsparkCuda::block_logits(std::span<const spec::ProposeItem> items, const std::vector<size_t>& live) {
  const int64_t g = dc_.block_size, D = tc_.hidden_size, n = tc_.hc_mult, V = tc_.vocab_size, hd = lc_.head_dim;
  const int64_t B = int64_t(live.size()), Tq = B * g, max_keys = window_ + g;
  std::vector<int32_t> tok(size_t(Tq), int32_t(dc_.noise_token_id));
  std::vector<int64_t> pos(static_cast<size_t>(Tq));
  std::vector<DraftKeys> keys(static_cast<size_t>(Tq));
  for (int64_t b = 0; b < B; ++b) {
    const spec::ProposeItem& it = items[live[size_t(b)]];
    tok[size_t(b * g)] = it.anchor_token;
    for (int64_t k = 0; k < g; ++k) {
      DraftKeys& kk = keys[size_t(b * g + k)];
      pos[size_t(b * g + k)] = it.anchor_pos + k;
      kk.slot = it.slot;
      kk.ring_lo = std::max<int64_t>(0, it.anchor_pos - window_);
      kk.ring_hi = it.anchor_pos;
      kk.new_lo = int32_t(b * g);
      kk.new_hi = int32_t(b * g + g);
    }
  }
  void* s = ctx_.stream;
  DSI_RETURN_IF_ERROR(upload_async(s, tok_, tok.data(), tok.size() * 4, "dspark block tokens"));
  DSI_RETURN_IF_ERROR(upload_async(s, pos_, pos.data(), pos.size() * 8, "dspark block positions"));
  DSI_RETURN_IF_ERROR(upload_async(s, keys_, keys.data(), keys.size() * sizeof(DraftKeys), "dspark block keys"));
  DSI_RETURN_IF_ERROR(fwd_.reserve(Tq, max_keys));
  DSI_RETURN_IF_ERROR(grow(X_, size_t(Tq * n * D), s, "dspark block streams"));
  DSI_RETURN_IF_ERROR(grow(h_, size_t(Tq * D), s, "dspark block hidden"));
  DSI_RETURN_IF_ERROR(grow(logits_, size_t(Tq * V), s, "dspark draft logits"));
  const ops::cuda::DeviceWeight& emb = *ctx_.embed;
  const auto dt = emb.fmt == ops::cuda::WeightFormat::BF16 ? ops::cuda::EmbedDType::BF16 : ops::cuda::EmbedDType::F32;
  DSI_RETURN_IF_ERROR(ops::cuda::embed(emb.data, dt, V, D, tok_.as<int32_t>(), Tq, n, X_.data(), s));
  const int64_t L = int64_t(layers_.size());
  for (int64_t l = 0; l < L; ++l)
    DSI_RETURN_IF_ERROR(fwd_.layer(layers_[size_t(l)]->L, X_.data(), Tq, pos_.as<int64_t>(), keys_.as<DraftKeys>(),
                                   max_keys, ring_.data() + l * window_ * hd, L * window_ * hd));
  DSI_RETURN_IF_ERROR(fwd_.head_hidden(hc_head_, norm_, X_.data(), nullptr, Tq, h_.data()));
  DSI_RETURN_IF_ERROR(fwd_.gemm(h_.data(), Tq, D, *ctx_.head, logits_.data(), V, false));
  h_host_.resize(size_t(Tq * D));
  DSI_CUDA_TRY(cudaMemcpyAsync(h_host_.data(), h_.data(), size_t(Tq * D) * 4, cudaMemcpyDeviceToHost,
                               static_cast<cudaStream_t>(s)));
  return Status::ok();
}

Status DsparkCuda::propose(std::span<const spec::ProposeItem> items, const spec::DrawFn& draw,
                           std::vector<spec::Proposal>& out) {
  out.assign(items.size(), {});
  const int64_t g = dc_.block_size, D = tc_.hidden_size, V = tc_.vocab_size, r = dc_.markov_rank;
  std::vector<size_t> live;
  int32_t kmax = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const spec::ProposeItem& it = items[i];
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (it.num_drafts > g) return Status::errorf("dspark propose: {} drafts asked, the block has {}", it.num_drafts, g);
    if (it.anchor_token < 0 || it.anchor_token >= V) return Status::errorf("dspark propose: token {} outside the vocabulary", it.anchor_token);
    if (it.num_drafts <= 0) continue;
    live.push_back(i);
    kmax = std::max(kmax, it.num_drafts);
  }
  if (live.empty()) return Status::ok();
  const int64_t B = int64_t(live.size());
  DSI_RETURN_IF_ERROR(block_logits(items, live));
  void* s = ctx_.stream;
  cudaStream_t cs = static_cast<cudaStream_t>(s);
  if (r > 0) DSI_RETURN_IF_ERROR(grow(e_, size_t(B * r), s, "dspark markov rows"));
  std::vector<int32_t> prev(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) prev[size_t(b)] = items[live[size_t(b)]].anchor_token;
  lg_host_.resize(size_t(B * V));
  for (int32_t k = 0; k < kmax; ++k) {
    if (r > 0) {  // logits[b, k] += W2 W1[prev_b]
      DSI_RETURN_IF_ERROR(upload_async(s, tok_, prev.data(), prev.size() * 4, "dspark predecessors"));
      DSI_RETURN_IF_ERROR(ops::cuda::embed(markov_embed_.data, ops::cuda::EmbedDType::F32, V, r, tok_.as<int32_t>(), B,
                                           1, e_.data(), s));
      DSI_RETURN_IF_ERROR(fwd_.gemm(e_.data(), B, r, markov_head_, logits_.data() + k * V, g * V, true));
    }
    DSI_CUDA_TRY(cudaMemcpy2DAsync(lg_host_.data(), size_t(V) * 4, logits_.data() + k * V, size_t(g * V) * 4,
                                   size_t(V) * 4, size_t(B), cudaMemcpyDeviceToHost, cs));
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    for (int64_t b = 0; b < B; ++b) {
      const size_t i = live[size_t(b)];
      if (k >= items[i].num_drafts) continue;
      // Confidence logit w.[h_k ; W1[x_{k-1}]] + b, summed in the reference's order.
      const float* h = h_host_.data() + (b * g + k) * D;
      const float* e = r > 0 ? w_.markov_embed.p() + int64_t(prev[size_t(b)]) * r : nullptr;
      double c = w_.confidence_b;
      for (int64_t d = 0; d < D; ++d) c += double(w_.confidence_w[size_t(d)]) * double(h[d]);
      for (int64_t j = 0; j < r; ++j) c += double(w_.confidence_w[size_t(D + j)]) * double(e[j]);
      const int32_t t = draw(i, k, std::span<const float>(lg_host_.data() + b * V, size_t(V)));
      if (t < 0 || t >= V) return Status::errorf("dspark propose: drew token {} outside the vocabulary", t);
      prev[size_t(b)] = t;
      out[i].tokens.push_back(t);
      out[i].confidence_logits.push_back(float(c));
    }
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
