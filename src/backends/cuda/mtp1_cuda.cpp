// MTP-1 drafter on the GPU (see draft_cuda.h; CPU reference spec/mtp1.cpp, same ring layout [slots, window,
// head_dim]). ingest: X = h_proj(hnorm(X_main)) + e_proj(enorm(embed(next token))) for every committed position,
// one decoder layer whose window reads the ring for positions before the call and this call's K=V rows after,
// then the ring scatter of each sequence's last `window` rows and hc_head + norm of its last position (kept per
// slot). propose: the head over each anchor's kept hidden, downloaded for the host's draw.
#include <algorithm>

#include "backends/cuda/draft_cuda.h"
#include "backends/cuda/draft_kernels_cuda.h"
#include "cuda/cuda_common.h"
#include "ops/embed/embed_cuda.h"

namespace dsinfer::backends {

using detail::DraftKeys;

Mtp1Cuda::Mtp1Cuda(const io::ModelConfig& target, spec::Mtp1Weights w, int32_t num_slots, DraftDeviceContext ctx)
    : tc_(target),
      w_(std::move(w)),
      tapped_{target.num_hidden_layers - 1},
      num_slots_(num_slots),
      window_(target.sliding_window),
      ctx_(std::move(ctx)),
      fwd_(tc_, ctx_) {}

Status Mtp1Cuda::init() {
  DSI_RETURN_IF_ERROR(fwd_.init());
  DSI_ASSIGN_OR_RETURN(layer_, upload_draft_layer(w_.layer, tc_));
  DSI_ASSIGN_OR_RETURN(e_proj_, upload_mat(owned_, w_.e_proj));
  DSI_ASSIGN_OR_RETURN(h_proj_, upload_mat(owned_, w_.h_proj));
  DSI_ASSIGN_OR_RETURN(enorm_, upload_floats(owned_, w_.enorm.data(), w_.enorm.size()));
  DSI_ASSIGN_OR_RETURN(hnorm_, upload_floats(owned_, w_.hnorm.data(), w_.hnorm.size()));
  DSI_ASSIGN_OR_RETURN(norm_, upload_floats(owned_, w_.norm.data(), w_.norm.size()));
  DSI_ASSIGN_OR_RETURN(hc_head_, upload_hc(owned_, w_.hc_head));
  const size_t ring = size_t(num_slots_) * size_t(window_) * size_t(tc_.head_dim);
  DSI_RETURN_IF_ERROR(ring_.alloc(ring, "mtp1 ring"));
  DSI_RETURN_IF_ERROR(last_h_.alloc(size_t(num_slots_) * size_t(tc_.hidden_size), "mtp1 last hidden"));
  cudaStream_t cs = static_cast<cudaStream_t>(ctx_.stream);
  if (ring) DSI_CUDA_TRY(cudaMemsetAsync(ring_.data(), 0, ring * 4, cs));
  DSI_CUDA_TRY(cudaMemsetAsync(last_h_.data(), 0, last_h_.bytes(), cs));
  last_pos_.assign(size_t(num_slots_), -1);
  return Status::ok();
}

namespace {
template <typename T>
Status grow(cuda::DeviceBuffer<T>& b, size_t n, void* stream, const char* what) {
  if (b.size() >= n) return Status::ok();
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));  // queued kernels may read the old one
  return b.alloc(std::max<size_t>(n, 64), what);
}

struct Mtp1Batch {
  std::vector<int32_t> tok, slot, last_rows;
  std::vector<int64_t> pos;
  std::vector<DraftKeys> keys;
  std::vector<size_t> items;  // non-empty items, in order; their rows start at base[i]
  std::vector<int64_t> base;
};

// Window of position p of a sequence whose call starts at `start` (rows from `row0`): ring positions
// [max(0, p-W+1), start), then this call's rows of positions [max(start, p-W+1), p].
Status plan_mtp1(std::span<const spec::IngestItem> items, int64_t W, int64_t V, int32_t num_slots, Mtp1Batch& b) {
  for (size_t i = 0; i < items.size(); ++i) {
    const spec::IngestItem& it = items[i];
    if (it.slot < 0 || it.slot >= num_slots) return Status::errorf("mtp1 ingest: slot {} outside [0, {})", it.slot, num_slots);
    if (it.count <= 0) continue;
    if (int64_t(it.next_tokens.size()) != it.count) return Status::error("mtp1 ingest: needs the next token of every position");
    const int64_t row0 = int64_t(b.pos.size());
    b.items.push_back(i);
    b.base.push_back(row0);
    for (int64_t t = 0; t < it.count; ++t) {
      const int32_t tok = it.next_tokens[size_t(t)];
      if (tok < 0 || tok >= V) return Status::errorf("mtp1 ingest: token {} outside the vocabulary", tok);
      const int64_t p = it.start_pos + t, lo = std::max<int64_t>(0, p - W + 1);
      DraftKeys k;
      k.slot = it.slot;
      k.ring_lo = lo;
      k.ring_hi = std::max<int64_t>(lo, it.start_pos);
      k.new_lo = int32_t(row0 + std::max<int64_t>(lo, it.start_pos) - it.start_pos);
      k.new_hi = int32_t(row0 + t + 1);
      b.tok.push_back(tok);
      b.slot.push_back(it.slot);
      b.pos.push_back(p);
      b.keys.push_back(k);
    }
    b.last_rows.push_back(int32_t(row0 + it.count - 1));
  }
  return Status::ok();
}
}  // namespace

Status Mtp1Cuda::ingest(std::span<const spec::IngestItem> items, std::span<const float> hidden) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, hd = tc_.head_dim, V = tc_.vocab_size;
  Mtp1Batch b;
  DSI_RETURN_IF_ERROR(plan_mtp1(items, window_, V, num_slots_, b));
  const int64_t N = int64_t(b.pos.size()), I = int64_t(b.items.size());
  if (N == 0) return Status::ok();
  DSI_ASSIGN_OR_RETURN(std::span<const float> src, device_hidden_source(ctx_, hidden, hidden_up_));
  for (size_t j : b.items)
    if (int64_t(items[j].row + items[j].count) * n * D > int64_t(src.size()))
      return Status::errorf("mtp1 ingest: rows [{}, {}) outside the captured hidden states", items[j].row,
                            items[j].row + items[j].count);
  void* s = ctx_.stream;
  cudaStream_t cs = static_cast<cudaStream_t>(s);
  DSI_RETURN_IF_ERROR(upload_async(s, tok_, b.tok.data(), b.tok.size() * 4, "mtp1 next tokens"));
  DSI_RETURN_IF_ERROR(upload_async(s, slot_, b.slot.data(), b.slot.size() * 4, "mtp1 slots"));
  DSI_RETURN_IF_ERROR(upload_async(s, pos_, b.pos.data(), b.pos.size() * 8, "mtp1 positions"));
  DSI_RETURN_IF_ERROR(upload_async(s, keys_, b.keys.data(), b.keys.size() * sizeof(DraftKeys), "mtp1 keys"));
  DSI_RETURN_IF_ERROR(upload_async(s, lastsel_, b.last_rows.data(), b.last_rows.size() * 4, "mtp1 last rows"));
  DSI_RETURN_IF_ERROR(fwd_.reserve(N, window_));
  DSI_RETURN_IF_ERROR(grow(X_, size_t(N * n * D), s, "mtp1 streams"));
  DSI_RETURN_IF_ERROR(grow(hs_, size_t(N * n * D), s, "mtp1 target streams"));
  DSI_RETURN_IF_ERROR(grow(e_, size_t(N * D), s, "mtp1 embeddings"));
  DSI_RETURN_IF_ERROR(grow(ep_, size_t(N * D), s, "mtp1 embeddings"));
  DSI_RETURN_IF_ERROR(grow(h_, size_t(std::max<int64_t>(I, 1) * D), s, "mtp1 hidden"));
  // Target streams of each item's rows (contiguous per item), then hnorm -> h_proj per stream.
  for (int64_t i = 0; i < I; ++i) {
    const spec::IngestItem& it = items[b.items[size_t(i)]];
    DSI_CUDA_TRY(cudaMemcpyAsync(hs_.data() + b.base[size_t(i)] * n * D, src.data() + int64_t(it.row) * n * D,
                                 size_t(it.count * n * D) * 4, cudaMemcpyDeviceToDevice, cs));
  }
  DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(hs_.data(), N * n, D, hnorm_, hs_.data()));
  DSI_RETURN_IF_ERROR(fwd_.gemm(hs_.data(), N * n, D, h_proj_, X_.data(), D, false));
  const ops::cuda::DeviceWeight& emb = *ctx_.embed;
  const auto dt = emb.fmt == ops::cuda::WeightFormat::BF16 ? ops::cuda::EmbedDType::BF16 : ops::cuda::EmbedDType::F32;
  DSI_RETURN_IF_ERROR(ops::cuda::embed(emb.data, dt, V, D, tok_.as<int32_t>(), N, 1, e_.data(), s));
  DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(e_.data(), N, D, enorm_, e_.data()));
  DSI_RETURN_IF_ERROR(fwd_.gemm(e_.data(), N, D, e_proj_, ep_.data(), D, false));
  DSI_RETURN_IF_ERROR(add_rows_cuda(ep_.data(), N * n, n, D, X_.data(), s));
  DSI_RETURN_IF_ERROR(fwd_.layer(layer_->L, X_.data(), N, pos_.as<int64_t>(), keys_.as<DraftKeys>(), window_,
                                 ring_.data(), window_ * hd));
  // Ring rows of each sequence's last `window` positions (earlier ones would collide in the ring).
  for (int64_t i = 0; i < I; ++i) {
    const spec::IngestItem& it = items[b.items[size_t(i)]];
    const int64_t skip = std::max<int64_t>(0, it.count - window_), r0 = b.base[size_t(i)] + skip;
    DSI_RETURN_IF_ERROR(ring_scatter_cuda(fwd_.last_kv() + r0 * hd, slot_.as<int32_t>() + r0, pos_.as<int64_t>() + r0,
                                          it.count - skip, hd, ring_.data(), window_ * hd, window_, s));
  }
  DSI_RETURN_IF_ERROR(fwd_.head_hidden(hc_head_, norm_, X_.data(), lastsel_.as<int32_t>(), I, h_.data()));
  for (int64_t i = 0; i < I; ++i) {
    const spec::IngestItem& it = items[b.items[size_t(i)]];
    DSI_CUDA_TRY(cudaMemcpyAsync(last_h_.data() + int64_t(it.slot) * D, h_.data() + i * D, size_t(D) * 4,
                                 cudaMemcpyDeviceToDevice, cs));
    last_pos_[size_t(it.slot)] = it.start_pos + it.count - 1;
  }
  return Status::ok();
}

Status Mtp1Cuda::propose(std::span<const spec::ProposeItem> items, const spec::DrawFn& draw,
                         std::vector<spec::Proposal>& out) {
  out.assign(items.size(), {});
  const int64_t D = tc_.hidden_size, V = tc_.vocab_size;
  std::vector<size_t> live;
  for (size_t i = 0; i < items.size(); ++i) {
    const spec::ProposeItem& it = items[i];
    if (it.num_drafts <= 0) continue;
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("mtp1 propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (last_pos_[size_t(it.slot)] != it.anchor_pos - 1)
      return Status::errorf("mtp1 propose: slot {} ingested up to position {}, the anchor is at {}", it.slot,
                            last_pos_[size_t(it.slot)], it.anchor_pos);
    live.push_back(i);
  }
  if (live.empty()) return Status::ok();
  const int64_t B = int64_t(live.size());
  void* s = ctx_.stream;
  cudaStream_t cs = static_cast<cudaStream_t>(s);
  DSI_RETURN_IF_ERROR(fwd_.reserve(B, 0));
  DSI_RETURN_IF_ERROR(grow(h_, size_t(B * D), s, "mtp1 hidden"));
  DSI_RETURN_IF_ERROR(grow(logits_, size_t(B * V), s, "mtp1 logits"));
  for (int64_t b = 0; b < B; ++b)
    DSI_CUDA_TRY(cudaMemcpyAsync(h_.data() + b * D, last_h_.data() + int64_t(items[live[size_t(b)]].slot) * D,
                                 size_t(D) * 4, cudaMemcpyDeviceToDevice, cs));
  DSI_RETURN_IF_ERROR(fwd_.gemm(h_.data(), B, D, *ctx_.head, logits_.data(), V, false));
  lg_host_.resize(size_t(B * V));
  DSI_CUDA_TRY(cudaMemcpyAsync(lg_host_.data(), logits_.data(), size_t(B * V) * 4, cudaMemcpyDeviceToHost, cs));
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  for (int64_t b = 0; b < B; ++b) {
    const size_t i = live[size_t(b)];
    const int32_t t = draw(i, 0, std::span<const float>(lg_host_.data() + b * V, size_t(V)));
    if (t < 0 || t >= V) return Status::errorf("mtp1 propose: drew token {} outside the vocabulary", t);
    out[i].tokens.push_back(t);
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
