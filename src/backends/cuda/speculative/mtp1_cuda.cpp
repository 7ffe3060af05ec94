// MTP-1 drafter on the GPU (see draft_cuda.h; CPU reference speculative/mtp1.cpp, same ring layout [slots, window,
// head_dim]). ingest: X = h_proj(hnorm(X_main)) + e_proj(enorm(embed(next token))) for every committed position,
// one decoder layer whose window reads the ring for positions before the call and this call's K=V rows after,
// then the ring scatter of each sequence's last `window` rows and hc_head + norm of its last position (kept per
// slot). propose: the head over each anchor's kept hidden; greedy-plain requests (ProposeItem::pick_argmax) take
// the argmax on the device and download only the ids, others download the rows for the host's draw. Every
// per-row array goes up in one copy; gathers and scatters are one kernel each (no per-sequence copies).
#include <algorithm>

#include "backends/cuda/speculative/draft_cuda.h"
#include "cuda/cuda_common.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
#include "ops/embed/embed_cuda.h"

namespace dsinfer::backends {

using ops::cuda::DraftKeys;

Mtp1Cuda::Mtp1Cuda(const io::ModelConfig& target, speculative::Mtp1Weights w, int32_t num_slots, DraftDeviceContext ctx)
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
struct Mtp1Batch {
  std::vector<int32_t> tok, slot, last_rows, last_slots;
  std::vector<int32_t> src_rows;   // [N] capture row of each row
  std::vector<int32_t> ring_rows;  // rows of each sequence's last `window` positions (earlier ones would collide)
  std::vector<int64_t> pos;
  std::vector<DraftKeys> keys;
  std::vector<size_t> items;  // non-empty items, in order
};

// Window of position p of a sequence whose call starts at `start` (rows from `row0`): ring positions
// [max(0, p-W+1), start), then this call's rows of positions [max(start, p-W+1), p].
Status plan_mtp1(std::span<const speculative::IngestItem> items, int64_t W, int64_t V, int32_t num_slots, Mtp1Batch& b) {
  for (size_t i = 0; i < items.size(); ++i) {
    const speculative::IngestItem& it = items[i];
    if (it.slot < 0 || it.slot >= num_slots) return Status::errorf("mtp1 ingest: slot {} outside [0, {})", it.slot, num_slots);
    if (it.count <= 0) continue;
    if (int64_t(it.next_tokens.size()) != it.count) return Status::error("mtp1 ingest: needs the next token of every position");
    const int64_t row0 = int64_t(b.pos.size()), skip = std::max<int64_t>(0, it.count - W);
    b.items.push_back(i);
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
      b.src_rows.push_back(int32_t(it.row + t));
      if (t >= skip) b.ring_rows.push_back(int32_t(row0 + t));
    }
    b.last_rows.push_back(int32_t(row0 + it.count - 1));
    b.last_slots.push_back(it.slot);
  }
  return Status::ok();
}
}  // namespace

Status Mtp1Cuda::ingest(std::span<const speculative::IngestItem> items, std::span<const float> hidden) {
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
  HostPack pk;  // one upload of every per-row / per-item array
  const size_t o_tok = pk.add(b.tok), o_slot = pk.add(b.slot), o_pos = pk.add(b.pos), o_keys = pk.add(b.keys);
  const size_t o_last = pk.add(b.last_rows), o_lslot = pk.add(b.last_slots), o_src = pk.add(b.src_rows);
  const size_t o_ring = pk.add(b.ring_rows);
  DSI_RETURN_IF_ERROR(upload_async(s, in_, pk.bytes.data(), pk.bytes.size(), "mtp1 ingest arrays"));
  auto at = [&](size_t off) { return in_.data() + off; };
  const auto* pos = reinterpret_cast<const int64_t*>(at(o_pos));
  const auto* slot = reinterpret_cast<const int32_t*>(at(o_slot));
  DSI_RETURN_IF_ERROR(fwd_.reserve(N, window_));
  DSI_RETURN_IF_ERROR(grow_buffer(X_, size_t(N * n * D), s, "mtp1 streams"));
  DSI_RETURN_IF_ERROR(grow_buffer(hs_, size_t(N * n * D), s, "mtp1 target streams"));
  DSI_RETURN_IF_ERROR(grow_buffer(e_, size_t(N * D), s, "mtp1 embeddings"));
  DSI_RETURN_IF_ERROR(grow_buffer(ep_, size_t(N * D), s, "mtp1 embeddings"));
  DSI_RETURN_IF_ERROR(grow_buffer(h_, size_t(std::max<int64_t>(I, 1) * D), s, "mtp1 hidden"));
  // Target streams of every row (one gather), then hnorm -> h_proj per stream.
  const auto* src_rows = reinterpret_cast<const int32_t*>(at(o_src));
  DSI_RETURN_IF_ERROR(ops::cuda::copy_rows_cuda(src.data(), src_rows, hs_.data(), nullptr, N, n * D, s));
  DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(hs_.data(), N * n, D, hnorm_, hs_.data()));
  DSI_RETURN_IF_ERROR(fwd_.gemm(hs_.data(), N * n, D, h_proj_, X_.data(), D, false));
  const ops::cuda::DeviceWeight& emb = *ctx_.embed;
  const auto dt = emb.fmt == ops::cuda::WeightFormat::BF16 ? ops::cuda::EmbedDType::BF16 : ops::cuda::EmbedDType::F32;
  DSI_RETURN_IF_ERROR(ops::cuda::embed(emb.data, dt, V, D, reinterpret_cast<const int32_t*>(at(o_tok)), N, 1, e_.data(), s));
  DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(e_.data(), N, D, enorm_, e_.data()));
  DSI_RETURN_IF_ERROR(fwd_.gemm(e_.data(), N, D, e_proj_, ep_.data(), D, false));
  DSI_RETURN_IF_ERROR(ops::cuda::add_rows_cuda(ep_.data(), N * n, n, D, X_.data(), s));
  DSI_RETURN_IF_ERROR(fwd_.layer(layer_->L, X_.data(), N, pos, reinterpret_cast<const DraftKeys*>(at(o_keys)), window_,
                                 ring_.data(), window_ * hd));
  DSI_RETURN_IF_ERROR(ops::cuda::ring_scatter_cuda(fwd_.last_kv(), slot, pos, int64_t(b.ring_rows.size()), hd,
                                                   ring_.data(), window_ * hd, window_, s,
                                                   reinterpret_cast<const int32_t*>(at(o_ring))));
  DSI_RETURN_IF_ERROR(fwd_.head_hidden(hc_head_, norm_, X_.data(), reinterpret_cast<const int32_t*>(at(o_last)), I, h_.data()));
  const auto* last_slots = reinterpret_cast<const int32_t*>(at(o_lslot));
  DSI_RETURN_IF_ERROR(ops::cuda::copy_rows_cuda(h_.data(), nullptr, last_h_.data(), last_slots, I, D, s));
  for (size_t j : b.items) last_pos_[size_t(items[j].slot)] = items[j].start_pos + items[j].count - 1;
  return Status::ok();
}

Status Mtp1Cuda::propose(std::span<const speculative::ProposeItem> items, const speculative::DrawFn& draw,
                         std::vector<speculative::Proposal>& out) {
  out.assign(items.size(), {});
  const int64_t D = tc_.hidden_size, V = tc_.vocab_size;
  std::vector<size_t> live;
  std::vector<int32_t> slots;
  bool pick = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const speculative::ProposeItem& it = items[i];
    if (it.num_drafts <= 0) continue;
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("mtp1 propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (last_pos_[size_t(it.slot)] != it.anchor_pos - 1)
      return Status::errorf("mtp1 propose: slot {} ingested up to position {}, the anchor is at {}", it.slot,
                            last_pos_[size_t(it.slot)], it.anchor_pos);
    live.push_back(i);
    slots.push_back(it.slot);
    pick = pick && it.pick_argmax;
  }
  if (live.empty()) return Status::ok();
  const int64_t B = int64_t(live.size());
  void* s = ctx_.stream;
  cudaStream_t cs = static_cast<cudaStream_t>(s);
  DSI_RETURN_IF_ERROR(grow_buffer(h_, size_t(B * D), s, "mtp1 hidden"));
  DSI_RETURN_IF_ERROR(grow_buffer(logits_, size_t(B * V), s, "mtp1 logits"));
  DSI_RETURN_IF_ERROR(grow_buffer(ids_, size_t(B), s, "mtp1 drafted ids"));
  DSI_RETURN_IF_ERROR(upload_async(s, pin_, slots.data(), slots.size() * 4, "mtp1 propose slots"));
  DSI_RETURN_IF_ERROR(ops::cuda::copy_rows_cuda(last_h_.data(), pin_.as<int32_t>(), h_.data(), nullptr, B, D, s));
  DSI_RETURN_IF_ERROR(fwd_.gemm(h_.data(), B, D, *ctx_.head, logits_.data(), V, false));
  if (pick) {  // greedy-plain requests: the argmax on the device, only the ids come down
    ops::cuda::DraftPickArgs a;
    a.logits = logits_.data();
    a.logits_ld = V;
    a.vocab = V;
    a.B = B;
    a.out_ld = 1;
    a.ids = ids_.data();
    DSI_RETURN_IF_ERROR(ops::cuda::draft_pick_cuda(a, s));
    std::vector<int32_t> ids(static_cast<size_t>(B));
    DSI_CUDA_TRY(cudaMemcpyAsync(ids.data(), ids_.data(), size_t(B) * 4, cudaMemcpyDeviceToHost, cs));
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    for (int64_t b = 0; b < B; ++b) {
      if (ids[size_t(b)] < 0 || ids[size_t(b)] >= V) return Status::errorf("mtp1 propose: drafted token {} outside the vocabulary", ids[size_t(b)]);
      out[live[size_t(b)]].tokens.push_back(ids[size_t(b)]);
    }
    return Status::ok();
  }
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
