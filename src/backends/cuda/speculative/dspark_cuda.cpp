// DSpark drafter on the GPU (see draft_cuda.h; CPU reference speculative/dspark.cpp, same ring layout
// [slots, layers, window, head_dim]). ingest: stream mean of the tapped layers' captured rows -> main_proj ->
// main_norm -> per layer K=V rows scattered into the ring. propose: the whole block of every sequence in one
// batched forward (embed -> draft layers over ring context + the bidirectional block -> hc_head + norm -> head),
// then per draft position the Markov bias of the chosen predecessor and the confidence logit on the device. When
// every request draws greedily from unprocessed logits (ProposeItem::pick_argmax) the argmax is taken on the
// device too and the round (one input upload, forward, k picks) replays a CUDA graph of its padded batch size;
// only the drafted ids and confidences come down (one copy, the one host wait). Otherwise each draft position's
// rows come down for the host's draw. The step's ingest is deferred and runs inside that graph, its rows in the
// same upload (padded to Bp (1 + g) rows; larger ingests, and steps that propose nothing, run it eagerly: flush()).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "backends/cuda/speculative/draft_cuda.h"
#include "core/env_switch.h"
#include "cuda/cuda_common.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
#include "ops/embed/embed_cuda.h"

namespace dsinfer::backends {

using ops::cuda::DraftKeys;
using ops::cuda::draft_pick_cuda;
using ops::cuda::ring_scatter_cuda;
using ops::cuda::stream_mean_cuda;

DsparkCuda::DsparkCuda(const io::ModelConfig& target, speculative::DraftConfig dc, speculative::DsparkWeights w, int32_t num_slots,
                       DraftDeviceContext ctx)
    : tc_(target),
      lc_(speculative::draft_layer_config(target, dc)),
      dc_(std::move(dc)),
      w_(std::move(w)),
      num_slots_(num_slots),
      window_(lc_.sliding_window),
      ctx_(std::move(ctx)),
      fwd_(lc_, ctx_) {
  // DSINFER_DSPARK_FUSED_INGEST=0: every ingest runs on its own at once (session 17's round: the before/after switch).
  fuse_ingest_ = env_switch("DSINFER_DSPARK_FUSED_INGEST", {"0", "1"}) != "0";
  times_.on = env_switch("DSINFER_DSPARK_PART_TIMES", {"0", "1"}) == "1";
  profile_ = env_switch("DSINFER_DSPARK_PROFILE", {"0", "1"}) == "1";
  // DSINFER_DSPARK_FUSED_PICKS: unset the fused picks up to kDraftPicksFusedMaxB padded sequences, 1 at every size
  // the kernel takes, 0 never (the A/B switches).
  const std::string picks = env_switch("DSINFER_DSPARK_FUSED_PICKS", {"0", "1"});
  fused_picks_max_b_ = picks == "0" ? 0 : picks == "1" ? ops::cuda::kDraftPicksMaxB : ops::cuda::kDraftPicksFusedMaxB;
  concurrent_ = draft_side_streams();
}

DsparkCuda::~DsparkCuda() {
  if (downloaded_) cudaEventDestroy(static_cast<cudaEvent_t>(downloaded_));
  if (!times_.on) return;
  std::fprintf(stderr, "dspark round parts: %lld eager ingests, %.4f ms each; %lld proposes (%lld with the ingest inside), "
               "%.4f ms each\n", static_cast<long long>(times_.ingests),
               times_.ingests ? times_.ingest_ms / double(times_.ingests) : 0.0, static_cast<long long>(times_.proposes),
               static_cast<long long>(times_.fused), times_.proposes ? times_.propose_ms / double(times_.proposes) : 0.0);
}

Status DsparkCuda::init() {
  DSI_RETURN_IF_ERROR(fwd_.init());
  DSI_CUDA_TRY(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(&downloaded_), cudaEventDisableTiming));
  if (concurrent_) DSI_RETURN_IF_ERROR(side_.create(w_.layers.size()));  // a join a layer's context rows
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
  DSI_ASSIGN_OR_RETURN(conf_w_, upload_floats(owned_, w_.confidence_w.data(), w_.confidence_w.size()));
  const size_t ring = size_t(num_slots_) * layers_.size() * size_t(window_) * size_t(lc_.head_dim);
  DSI_RETURN_IF_ERROR(ring_.alloc(ring, "dspark context ring"));
  int dev = 0, sms = 0;
  DSI_CUDA_TRY(cudaGetDevice(&dev));
  DSI_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  picks_max_blocks_ = std::max(1, sms);
  DSI_RETURN_IF_ERROR(picks_barrier_.alloc(2, "dspark picks barrier"));
  DSI_CUDA_TRY(cudaMemsetAsync(picks_barrier_.data(), 0, 2 * sizeof(int32_t), static_cast<cudaStream_t>(ctx_.stream)));
  if (ring) DSI_CUDA_TRY(cudaMemsetAsync(ring_.data(), 0, ring * 4, static_cast<cudaStream_t>(ctx_.stream)));
  return Status::ok();
}

namespace {
size_t align16(size_t b) { return (b + 15) / 16 * 16; }
// Padded batch of a propose graph: powers of two, so a handful of graphs serve every batch size.
int64_t bucket(int64_t B) {
  int64_t p = 1;
  while (p < B) p *= 2;
  return p;
}
}  // namespace

// Validates and packs the rows; the kernels are deferred (pending_) to run inside the next propose's graph with its
// inputs in the same upload (one upload and one graph per round instead of an upload and 11 eager kernels more),
// or eagerly at flush(): before another ingest, a propose that cannot take them, or the speculator's end of step.
Status DsparkCuda::ingest(std::span<const speculative::IngestItem> items, std::span<const float> hidden) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, m = int64_t(dc_.target_layer_ids.size());
  const int64_t row_width = m * n * D;
  PendingIngest p;
  for (const speculative::IngestItem& it : items) {
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark ingest: slot {} outside [0, {})", it.slot, num_slots_);
    if (it.count <= 0) continue;
    const int64_t skip = std::max<int64_t>(0, it.count - window_);  // only the last `window` positions are read again
    for (int64_t t = skip; t < it.count; ++t) {
      p.rows.push_back(int32_t(it.row + t));
      p.slots.push_back(it.slot);
      p.pos.push_back(it.start_pos + t);
    }
  }
  if (p.rows.empty()) return Status::ok();
  DSI_RETURN_IF_ERROR(flush());  // the pending rows read the source this call may overwrite
  DSI_ASSIGN_OR_RETURN(std::span<const float> src, device_hidden_source(ctx_, hidden, hidden_up_));
  for (const speculative::IngestItem& it : items)
    if (it.count > 0 && int64_t(it.row + it.count) * row_width > int64_t(src.size()))
      return Status::errorf("dspark ingest: rows [{}, {}) outside the captured hidden states", it.row, it.row + it.count);
  p.src = src.data();
  pending_ = std::move(p);
  return fuse_ingest_ ? Status::ok() : flush();
}

Status DsparkCuda::reserve_ingest(int64_t rows) {
  const int64_t N = scratch_tokens(rows);  // a prompt a few tokens longer keeps the propose graphs (decode_graphs.h)
  const int64_t D = tc_.hidden_size, m = int64_t(dc_.target_layer_ids.size()), hd = lc_.head_dim;
  void* s = ctx_.stream;
  DSI_RETURN_IF_ERROR(fwd_.reserve(N, 0));
  DSI_RETURN_IF_ERROR(grow_buffer(feats_, size_t(N * m * D), s, "dspark context features", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(hctx_, size_t(N * D), s, "dspark context", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(kvn_, size_t(N * D), s, "dspark context norm", &gen_));
  return grow_buffer(kvc_, size_t(N * hd), s, "dspark context kv", &gen_);
}

// Kernels only (capturable): stream mean of the N rows' tapped layers -> main_proj -> main_norm -> per layer the K=V
// row scattered into the ring (a row of slot -1 is padding: computed, never scattered). On `side` (when given): its
// joins[l] recorded once layer l's rows are in the ring.
Status DsparkCuda::ingest_kernels(const float* src, const int32_t* rows, const int32_t* slots, const int64_t* pos,
                                  int64_t N, DraftSideStream* side) {
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, m = int64_t(dc_.target_layer_ids.size()), hd = lc_.head_dim;
  void* s = side ? side->stream : ctx_.stream;
  fwd_.set_stream(s);
  const Status st = [&]() -> Status {
    DSI_RETURN_IF_ERROR(stream_mean_cuda(src, rows, N, m, n, D, feats_.data(), s));
    mark("ingest stream mean");
    DSI_RETURN_IF_ERROR(fwd_.gemm(feats_.data(), N, m * D, main_proj_, hctx_.data(), D, false));
    DSI_RETURN_IF_ERROR(fwd_.rmsnorm_rows(hctx_.data(), N, D, main_norm_, hctx_.data()));
    mark("ingest main_proj + main_norm");
    const int64_t L = int64_t(layers_.size()), slot_stride = L * window_ * hd;
    for (int64_t l = 0; l < L; ++l) {
      DSI_RETURN_IF_ERROR(fwd_.context_kv(layers_[size_t(l)]->L, hctx_.data(), N, pos, kvc_.data(), kvn_.data()));
      DSI_RETURN_IF_ERROR(ring_scatter_cuda(kvc_.data(), slots, pos, N, hd, ring_.data() + l * window_ * hd,
                                            slot_stride, window_, s));
      if (side) DSI_RETURN_IF_ERROR(side->done(size_t(l)));
      mark("ingest context kv + ring scatter (a layer)");
    }
    return Status::ok();
  }();
  fwd_.set_stream(nullptr);
  return st;
}

// The pending ingest on its own (one upload, eager kernels): the path of a step that proposes nothing.
Status DsparkCuda::flush() {
  if (!pending_) return Status::ok();
  const PendingIngest p = std::move(*pending_);
  pending_.reset();
  const int64_t N = int64_t(p.rows.size());
  const auto t0 = std::chrono::steady_clock::now();
  HostPack pk;
  const size_t o_rows = pk.add(p.rows), o_slot = pk.add(p.slots), o_pos = pk.add(p.pos);
  DSI_RETURN_IF_ERROR(upload_async(ctx_.stream, ingest_in_, pk.bytes.data(), pk.bytes.size(), "dspark ingest arrays"));
  DSI_RETURN_IF_ERROR(reserve_ingest(N));
  DSI_RETURN_IF_ERROR(ingest_kernels(p.src, reinterpret_cast<const int32_t*>(ingest_in_.data() + o_rows),
                                     reinterpret_cast<const int32_t*>(ingest_in_.data() + o_slot),
                                     reinterpret_cast<const int64_t*>(ingest_in_.data() + o_pos), N));
  if (times_.on) {
    DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.stream)));
    times_.ingest_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++times_.ingests;
  }
  return Status::ok();
}

DsparkCuda::BlockLayout DsparkCuda::block_layout(int64_t Bp, bool fused, bool round) const {
  BlockLayout bl;
  bl.Bp = Bp;
  bl.g = dc_.block_size;
  const size_t Tq = size_t(bl.Bp * bl.g);
  bl.tok = 0;
  bl.pos = align16(Tq * 4);
  bl.keys = bl.pos + align16(Tq * 8);
  bl.prev = bl.keys + align16(Tq * sizeof(DraftKeys));
  bl.in_bytes = bl.prev + align16(size_t(bl.Bp) * 4);
  if (fused) {
    bl.ing_n = bl.Bp * (bl.g + 1);
    bl.ing_rows = bl.in_bytes;
    bl.ing_slot = bl.ing_rows + align16(size_t(bl.ing_n) * 4);
    bl.ing_pos = bl.ing_slot + align16(size_t(bl.ing_n) * 4);
    bl.in_bytes = bl.ing_pos + align16(size_t(bl.ing_n) * 8);
  }
  bl.ids = 0;
  bl.conf = align16(Tq * 4);
  bl.out_bytes = bl.conf + Tq * 4;
  if (round) {
    bl.accepted = align16(bl.out_bytes);
    bl.tokens = bl.accepted + align16(size_t(bl.Bp) * 4);
    bl.out_bytes = bl.tokens + size_t(bl.Bp * (bl.g + 1)) * 4;
  }
  return bl;
}

// Replays (or captures) the block's graph; the pending ingest, when bl has its rows, runs inside it. A one-wait round
// (bl.accepted) replays the same graph as a fused all-greedy propose of its padded batch: the graph reads in_, which
// that round's acceptance kernel wrote instead of an upload.
Status DsparkCuda::launch_block(const BlockLayout& bl, int32_t kpick) {
  if (pending_ && bl.ing_n > 0 && pending_->src != graph_src_) {  // the captured source moved (or the upload buffer did)
    graph_src_ = pending_->src;
    ++gen_;
  }
  const bool pick = kpick > 0;
  auto body = [&] { return block_forward(bl, kpick); };
  const int64_t key = (bl.ing_n > 0 ? int64_t(1) << 40 : 0) + bl.Bp * 512 + kpick * 2 + (pick ? 1 : 0);
  if (profile_ && std::find(profiled_.begin(), profiled_.end(), key) == profiled_.end()) {
    profiled_.push_back(key);
    DSI_RETURN_IF_ERROR(profile_block(bl, kpick));
  }
  const Status launched = ctx_.graphs ? graphs_.launch(key, generation(), ctx_.stream, body) : body();
  times_.fused += bl.ing_n > 0 ? 1 : 0;
  pending_.reset();  // launched (or failed: the rows are lost with the step)
  return launched;
}

// Packs and uploads the block's inputs (one copy): Bp padded sequences of g positions; a padding sequence drafts
// noise tokens at positions 0..g-1 over slot 0 with no ring keys (valid reads, outputs ignored).
Status DsparkCuda::upload_block(std::span<const speculative::ProposeItem> items, const std::vector<size_t>& live,
                                const BlockLayout& bl) {
  const int64_t g = bl.g;
  in_host_.assign(bl.in_bytes, 0);
  auto* tok = reinterpret_cast<int32_t*>(in_host_.data() + bl.tok);
  auto* pos = reinterpret_cast<int64_t*>(in_host_.data() + bl.pos);
  auto* keys = reinterpret_cast<DraftKeys*>(in_host_.data() + bl.keys);
  auto* prev = reinterpret_cast<int32_t*>(in_host_.data() + bl.prev);
  for (int64_t b = 0; b < bl.Bp; ++b) {
    const bool real = b < int64_t(live.size());
    const speculative::ProposeItem* it = real ? &items[live[size_t(b)]] : nullptr;
    const int64_t anchor = real ? it->anchor_pos : 0;
    prev[b] = real ? it->anchor_token : int32_t(dc_.noise_token_id);
    for (int64_t k = 0; k < g; ++k) {
      tok[b * g + k] = k == 0 && real ? it->anchor_token : int32_t(dc_.noise_token_id);
      pos[b * g + k] = anchor + k;
      DraftKeys kk;
      kk.slot = real ? it->slot : 0;
      kk.ring_lo = real ? std::max<int64_t>({0, anchor - window_, it->context_start}) : 0;
      kk.ring_hi = anchor;
      kk.new_lo = int32_t(b * g);
      kk.new_hi = int32_t(b * g + g);
      keys[b * g + k] = kk;
    }
  }
  if (bl.ing_n > 0) {  // the fused ingest's rows, padded to ing_n with rows of slot -1 (row 0, position 0)
    auto* irows = reinterpret_cast<int32_t*>(in_host_.data() + bl.ing_rows);
    auto* islot = reinterpret_cast<int32_t*>(in_host_.data() + bl.ing_slot);
    auto* ipos = reinterpret_cast<int64_t*>(in_host_.data() + bl.ing_pos);
    const size_t N = pending_->rows.size();
    for (size_t t = 0; t < size_t(bl.ing_n); ++t) {
      irows[t] = t < N ? pending_->rows[t] : 0;
      islot[t] = t < N ? pending_->slots[t] : -1;
      ipos[t] = t < N ? pending_->pos[t] : 0;
    }
  }
  DSI_RETURN_IF_ERROR(reserve_block(bl));
  return upload_async(ctx_.stream, in_, in_host_.data(), bl.in_bytes, "dspark block inputs");
}

Status DsparkCuda::reserve_block(const BlockLayout& bl) {
  void* s = ctx_.stream;
  const int64_t g = bl.g, Tq = bl.Bp * g, D = tc_.hidden_size, n = tc_.hc_mult, V = tc_.vocab_size;
  if (bl.ing_n > 0) DSI_RETURN_IF_ERROR(reserve_ingest(bl.ing_n));
  DSI_RETURN_IF_ERROR(fwd_.reserve(Tq, window_ + g));
  DSI_RETURN_IF_ERROR(grow_buffer(in_, bl.in_bytes, s, "dspark block inputs", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(out_, bl.out_bytes, s, "dspark block outputs", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(X_, size_t(Tq * n * D), s, "dspark block streams", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(h_, size_t(Tq * D), s, "dspark block hidden", &gen_));
  DSI_RETURN_IF_ERROR(grow_buffer(logits_, size_t(Tq * V), s, "dspark draft logits", &gen_));
  if (picks_fused(bl.Bp)) {
    const size_t parts = size_t(g * bl.Bp * ops::cuda::draft_picks_slices(V));
    DSI_RETURN_IF_ERROR(grow_buffer(part_v_, parts, s, "dspark picks partials", &gen_));
    DSI_RETURN_IF_ERROR(grow_buffer(part_i_, parts, s, "dspark picks partials", &gen_));
  }
  return grow_buffer(e_, size_t(bl.Bp * std::max<int64_t>(dc_.markov_rank, 1)), s, "dspark markov rows", &gen_);
}

// Kernels only (no host synchronisation, no allocation): capturable into a CUDA graph.
Status DsparkCuda::block_forward(const BlockLayout& bl, int32_t kpick) {
  const int64_t g = bl.g, D = tc_.hidden_size, n = tc_.hc_mult, V = tc_.vocab_size, hd = lc_.head_dim, Tq = bl.Bp * g;
  const ops::cuda::DeviceWeight& emb = *ctx_.embed;
  const auto dt = emb.fmt == ops::cuda::WeightFormat::BF16 ? ops::cuda::EmbedDType::BF16 : ops::cuda::EmbedDType::F32;
  const auto* tok = reinterpret_cast<const int32_t*>(in_.data() + bl.tok);
  const auto* pos = reinterpret_cast<const int64_t*>(in_.data() + bl.pos);
  const auto* keys = reinterpret_cast<const DraftKeys*>(in_.data() + bl.keys);
  // The side stream's ingest runs beside the embed and the layers' kernels, each layer's attention core waiting for
  // its own layer's context rows only (the profile's eager stages run it in order, so they time each part alone).
  const bool side = bl.ing_n > 0 && side_.stream && !fwd_.mark;
  if (side) DSI_RETURN_IF_ERROR(side_.fork(ctx_.stream));
  if (bl.ing_n > 0)
    DSI_RETURN_IF_ERROR(ingest_kernels(pending_->src, reinterpret_cast<const int32_t*>(in_.data() + bl.ing_rows),
                                       reinterpret_cast<const int32_t*>(in_.data() + bl.ing_slot),
                                       reinterpret_cast<const int64_t*>(in_.data() + bl.ing_pos), bl.ing_n,
                                       side ? &side_ : nullptr));
  if (side) fwd_.joins_before_core = side_.joins;
  DSI_RETURN_IF_ERROR(ops::cuda::embed(emb.data, dt, V, D, tok, Tq, n, X_.data(), ctx_.stream));
  mark("embed");
  const int64_t L = int64_t(layers_.size());
  for (int64_t l = 0; l < L; ++l)
    DSI_RETURN_IF_ERROR(fwd_.layer(layers_[size_t(l)]->L, X_.data(), Tq, pos, keys, window_ + g,
                                   ring_.data() + l * window_ * hd, L * window_ * hd));
  if (!fwd_.joins_before_core.empty()) {  // fewer cores than joins: the last one closes the side stream's work
    void* const j = fwd_.joins_before_core.back();
    fwd_.joins_before_core.clear();
    DSI_RETURN_IF_ERROR(stream_wait(ctx_.stream, j));
  }
  DSI_RETURN_IF_ERROR(fwd_.head_hidden(hc_head_, norm_, X_.data(), nullptr, Tq, h_.data()));
  mark("hc_head + norm");
  DSI_RETURN_IF_ERROR(fwd_.gemm(h_.data(), Tq, D, *ctx_.head, logits_.data(), V, false));
  mark("head gemm");
  if (kpick == g && picks_fused(bl.Bp)) {
    DSI_RETURN_IF_ERROR(fused_picks(bl));
  } else {
    for (int32_t k = 0; k < kpick; ++k) DSI_RETURN_IF_ERROR(bias_and_pick(bl, k, /*chained=*/true));
  }
  mark("markov bias + confidence + pick (every position)");
  return Status::ok();
}

// Draft position k: logits[b, k] += W2 W1[prev_b] (prev on the device), the confidence logit
// w.[h_k ; W1[prev_b]] + b and the argmax into out_ (prev_b := the argmax). chained (the device picks every position
// in order): the pick of position k - 1 already wrote W1[prev_b] into e_, so only position 0 gathers it.
Status DsparkCuda::bias_and_pick(const BlockLayout& bl, int32_t k, bool chained) {
  const int64_t g = bl.g, D = tc_.hidden_size, V = tc_.vocab_size, r = dc_.markov_rank;
  auto* prev = reinterpret_cast<int32_t*>(in_.data() + bl.prev);
  void* s = ctx_.stream;
  if (r > 0) {
    if (!chained || k == 0)
      DSI_RETURN_IF_ERROR(ops::cuda::embed(markov_embed_.data, ops::cuda::EmbedDType::F32, V, r, prev, bl.Bp, 1, e_.data(), s));
    DSI_RETURN_IF_ERROR(fwd_.gemm(e_.data(), bl.Bp, r, markov_head_, logits_.data() + k * V, g * V, true));
  }
  ops::cuda::DraftPickArgs a;
  a.logits = logits_.data() + k * V;
  a.logits_ld = g * V;
  a.vocab = V;
  a.h = h_.data() + k * D;
  a.h_ld = g * D;
  a.dim = D;
  a.e = r > 0 ? e_.data() : nullptr;
  a.rank = r;
  a.conf_w = conf_w_;
  a.conf_b = float(w_.confidence_b);
  a.B = bl.Bp;
  a.out_ld = g;
  a.ids = reinterpret_cast<int32_t*>(out_.data() + bl.ids) + k;
  a.conf = reinterpret_cast<float*>(out_.data() + bl.conf) + k;
  a.prev = prev;
  if (chained && r > 0 && k + 1 < g) {
    a.next_table = static_cast<const float*>(markov_embed_.data);
    a.next_e = e_.data();
  }
  return draft_pick_cuda(a, s);
}

bool DsparkCuda::picks_fused(int64_t Bp) const {
  return Bp <= fused_picks_max_b_ && ops::cuda::draft_picks_supported(tc_.vocab_size, dc_.markov_rank, Bp);
}

// The chained picks of every position in one launch: the same biased logits (the skinny GEMM's sums), confidences,
// ids and Markov rows as g x bias_and_pick(chained) where the bias GEMM takes the fp32 skinny kernel.
Status DsparkCuda::fused_picks(const BlockLayout& bl) {
  const int64_t g = bl.g, D = tc_.hidden_size, V = tc_.vocab_size;
  ops::cuda::DraftPicksArgs a;
  a.logits = logits_.data();
  a.logits_ld = g * V;
  a.vocab = V;
  a.h = h_.data();
  a.dim = D;
  a.markov_head = static_cast<const float*>(markov_head_.data);
  a.markov_embed = static_cast<const float*>(markov_embed_.data);
  a.e = e_.data();
  a.rank = dc_.markov_rank;
  a.conf_w = conf_w_;
  a.conf_b = float(w_.confidence_b);
  a.B = bl.Bp;
  a.g = g;
  a.ids = reinterpret_cast<int32_t*>(out_.data() + bl.ids);
  a.conf = reinterpret_cast<float*>(out_.data() + bl.conf);
  a.prev = reinterpret_cast<int32_t*>(in_.data() + bl.prev);
  a.part_v = part_v_.data();
  a.part_i = part_i_.data();
  a.barrier = reinterpret_cast<unsigned*>(picks_barrier_.data());
  a.blocks = ops::cuda::draft_picks_blocks(V, bl.Bp, picks_max_blocks_);
  return ops::cuda::draft_picks_cuda(a, ctx_.stream);
}

// Requests that need the host's draw (sampling, processed logits): per draft position the predecessors go up,
// the bias + pick run (for the confidence logit), the rows come down and the DrawFn chooses.
Status DsparkCuda::host_draws(std::span<const speculative::ProposeItem> items, const std::vector<size_t>& live,
                              const BlockLayout& bl, int32_t kmax, const speculative::DrawFn& draw,
                              std::vector<std::vector<int32_t>>& toks) {
  const int64_t g = bl.g, V = tc_.vocab_size, B = int64_t(live.size());
  cudaStream_t cs = static_cast<cudaStream_t>(ctx_.stream);
  std::vector<int32_t> prev(size_t(bl.Bp), int32_t(dc_.noise_token_id));
  for (int64_t b = 0; b < B; ++b) prev[size_t(b)] = items[live[size_t(b)]].anchor_token;
  lg_host_.resize(size_t(B * V));
  for (int32_t k = 0; k < kmax; ++k) {
    DSI_CUDA_TRY(cudaMemcpyAsync(in_.data() + bl.prev, prev.data(), prev.size() * 4, cudaMemcpyHostToDevice, cs));
    DSI_RETURN_IF_ERROR(bias_and_pick(bl, k, /*chained=*/false));
    DSI_CUDA_TRY(cudaMemcpy2DAsync(lg_host_.data(), size_t(V) * 4, logits_.data() + k * V, size_t(g * V) * 4,
                                   size_t(V) * 4, size_t(B), cudaMemcpyDeviceToHost, cs));
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    for (int64_t b = 0; b < B; ++b) {
      const size_t i = live[size_t(b)];
      if (k >= items[i].num_drafts) continue;
      const int32_t t = draw(i, k, std::span<const float>(lg_host_.data() + b * V, size_t(V)));
      if (t < 0 || t >= V) return Status::errorf("dspark propose: drew token {} outside the vocabulary", t);
      prev[size_t(b)] = t;
      toks[size_t(b)].push_back(t);
    }
  }
  return Status::ok();
}

Status DsparkCuda::propose(std::span<const speculative::ProposeItem> items, const speculative::DrawFn& draw,
                           std::vector<speculative::Proposal>& out) {
  out.assign(items.size(), {});
  const int64_t g = dc_.block_size, V = tc_.vocab_size;
  std::vector<size_t> live;
  int32_t kmax = 0;
  bool pick = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const speculative::ProposeItem& it = items[i];
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark propose: slot {} outside [0, {})", it.slot, num_slots_);
    if (it.num_drafts > g) return Status::errorf("dspark propose: {} drafts asked, the block has {}", it.num_drafts, g);
    if (it.anchor_token < 0 || it.anchor_token >= V) return Status::errorf("dspark propose: token {} outside the vocabulary", it.anchor_token);
    if (it.num_drafts <= 0) continue;
    live.push_back(i);
    kmax = std::max(kmax, it.num_drafts);
    pick = pick && it.pick_argmax;
  }
  if (live.empty()) return flush();
  if (g > 255) return Status::errorf("dspark propose: block size {} above 255", g);
  const int64_t Bp = bucket(int64_t(live.size()));
  // The pending ingest joins the round's graph when its rows fit the one ingest shape of this padded batch, Bp (1 + g)
  // rows (a decode round commits at most 1 + g positions a sequence), so a round adds no graph shape; larger ones
  // (prefill chunks, sequences that ingest without drafting) run eagerly first.
  if (pending_ && int64_t(pending_->rows.size()) > Bp * (g + 1)) DSI_RETURN_IF_ERROR(flush());
  const auto t0 = std::chrono::steady_clock::now();  // the round's propose (with its ingest when fused)
  const BlockLayout bl = block_layout(Bp, pending_.has_value(), /*round=*/false);
  DSI_RETURN_IF_ERROR(upload_block(items, live, bl));
  // All greedy-plain: the whole round (forward + picks) is one graph and only ids + confidences come down. It picks
  // the whole block even where every sequence asks fewer (a request's last tokens): picks are sequential, so the
  // drafts kept are the same, and the graph is the one the start-up profile captured instead of one more capture
  // per shorter block (a few ms each, inside the run).
  const int32_t kpick = pick ? int32_t(g) : 0;
  DSI_RETURN_IF_ERROR(launch_block(bl, kpick));
  std::vector<std::vector<int32_t>> toks(live.size());
  if (!pick) DSI_RETURN_IF_ERROR(host_draws(items, live, bl, kmax, draw, toks));
  DSI_RETURN_IF_ERROR(queue_download(bl));
  DSI_RETURN_IF_ERROR(wait_download());
  const auto* ids = reinterpret_cast<const int32_t*>(out_host_.data() + bl.ids);
  const auto* conf = reinterpret_cast<const float*>(out_host_.data() + bl.conf);
  for (size_t b = 0; b < live.size(); ++b) {
    speculative::Proposal& p = out[live[b]];
    for (int32_t k = 0; k < items[live[b]].num_drafts; ++k) {
      const int32_t t = pick ? ids[b * size_t(g) + size_t(k)] : toks[b][size_t(k)];
      if (t < 0 || t >= V) return Status::errorf("dspark propose: drafted token {} outside the vocabulary", t);
      p.tokens.push_back(t);
      p.confidence_logits.push_back(conf[b * size_t(g) + size_t(k)]);
    }
  }
  if (times_.on) {
    times_.propose_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++times_.proposes;
  }
  return Status::ok();
}

Status DsparkCuda::queue_download(const BlockLayout& bl) {
  // Pinned: a pageable download is staged by the driver after the stream drains, on the round's critical path.
  if (out_host_.size() < bl.out_bytes)
    DSI_RETURN_IF_ERROR(out_host_.alloc(std::max<size_t>(bl.out_bytes, 4096), "dspark outputs"));
  cudaStream_t cs = static_cast<cudaStream_t>(ctx_.stream);
  DSI_CUDA_TRY(cudaMemcpyAsync(out_host_.data(), out_.data(), bl.out_bytes, cudaMemcpyDeviceToHost, cs));
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(downloaded_), cs));
  return Status::ok();
}

Status DsparkCuda::wait_download() {
  DSI_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(downloaded_)));
  return Status::ok();
}

// The one-wait round: the verify step is on the stream (its logits stay on the device); one upload of the items, the
// acceptance kernel (writes this round's propose inputs and ingest rows into in_), the fused propose graph, one
// download of the acceptance and the drafts (launch_round); one host wait (finish_round).
Status DsparkCuda::launch_round(std::span<const speculative::RoundItem> items) {
  round_bl_ = BlockLayout{};
  if (items.empty()) return Status::ok();
  const int64_t g = dc_.block_size, V = tc_.vocab_size, B = int64_t(items.size());
  if (g <= 0 || g > ops::cuda::kSpecRoundMaxBlock || window_ < g + 1)
    return Status::errorf("dspark round: block size {} with a window of {}", g, window_);
  const std::span<const float> logits = ctx_.device_logits ? ctx_.device_logits() : std::span<const float>();
  for (const speculative::RoundItem& it : items) {
    if (it.slot < 0 || it.slot >= num_slots_) return Status::errorf("dspark round: slot {} outside [0, {})", it.slot, num_slots_);
    if (int64_t(it.drafts.size()) > g) return Status::errorf("dspark round: {} drafts verified, the block has {}", it.drafts.size(), g);
    if (it.logits_row < 0 || (int64_t(it.logits_row) + int64_t(it.drafts.size()) + 1) * V > int64_t(logits.size()))
      return Status::errorf("dspark round: logits rows [{}, {}) outside the step's {} rows", it.logits_row,
                            it.logits_row + int64_t(it.drafts.size()) + 1, int64_t(logits.size()) / V);
  }
  DSI_RETURN_IF_ERROR(flush());  // nothing should be pending; an older ingest reads a capture this step overwrote
  DSI_ASSIGN_OR_RETURN(std::span<const float> src, device_hidden_source(ctx_, {}, hidden_up_));
  const int64_t D = tc_.hidden_size, n = tc_.hc_mult, m = int64_t(dc_.target_layer_ids.size());
  for (const speculative::RoundItem& it : items)
    if (it.row < 0 || (int64_t(it.row) + int64_t(it.drafts.size()) + 1) * m * n * D > int64_t(src.size()))
      return Status::errorf("dspark round: capture rows from {} outside the captured hidden states", it.row);
  const auto t0 = std::chrono::steady_clock::now();
  const BlockLayout bl = block_layout(bucket(B), /*fused=*/true, /*round=*/true);
  DSI_RETURN_IF_ERROR(reserve_block(bl));
  // One upload: the item rows, then their drafts [B, g].
  const size_t o_drafts = align16(size_t(B) * sizeof(ops::cuda::SpecRoundRow));
  round_host_.assign(o_drafts + size_t(B * g) * 4, 0);
  auto* rows = reinterpret_cast<ops::cuda::SpecRoundRow*>(round_host_.data());
  auto* drafts = reinterpret_cast<int32_t*>(round_host_.data() + o_drafts);
  for (int64_t b = 0; b < B; ++b) {
    const speculative::RoundItem& it = items[size_t(b)];
    ops::cuda::SpecRoundRow r;
    r.start_pos = it.start_pos;
    r.context_start = it.context_start;
    r.slot = it.slot;
    r.L = int32_t(it.drafts.size());
    r.logits_row = it.logits_row;
    r.cap_row = it.row;
    rows[b] = r;
    std::copy(it.drafts.begin(), it.drafts.end(), drafts + b * g);
  }
  void* s = ctx_.stream;
  DSI_RETURN_IF_ERROR(upload_async(s, round_in_, round_host_.data(), round_host_.size(), "dspark round inputs"));
  ops::cuda::SpecRoundArgs a;
  a.rows = round_in_.as<const ops::cuda::SpecRoundRow>();
  a.drafts = reinterpret_cast<const int32_t*>(round_in_.data() + o_drafts);
  a.logits = logits.data();
  a.vocab = V;
  a.B = int32_t(B);
  a.Bp = int32_t(bl.Bp);
  a.g = int32_t(g);
  a.window = window_;
  a.noise_token = int32_t(dc_.noise_token_id);
  a.accepted = reinterpret_cast<int32_t*>(out_.data() + bl.accepted);
  a.tokens = reinterpret_cast<int32_t*>(out_.data() + bl.tokens);
  a.tok = reinterpret_cast<int32_t*>(in_.data() + bl.tok);
  a.pos = reinterpret_cast<int64_t*>(in_.data() + bl.pos);
  a.keys = reinterpret_cast<DraftKeys*>(in_.data() + bl.keys);
  a.prev = reinterpret_cast<int32_t*>(in_.data() + bl.prev);
  a.ing_rows = reinterpret_cast<int32_t*>(in_.data() + bl.ing_rows);
  a.ing_slot = reinterpret_cast<int32_t*>(in_.data() + bl.ing_slot);
  a.ing_pos = reinterpret_cast<int64_t*>(in_.data() + bl.ing_pos);
  DSI_RETURN_IF_ERROR(ops::cuda::spec_round_cuda(a, s));
  PendingIngest p;  // the graph's ingest reads the capture; its rows are the ones the acceptance kernel wrote
  p.src = src.data();
  pending_ = std::move(p);
  DSI_RETURN_IF_ERROR(launch_block(bl, int32_t(g)));
  DSI_RETURN_IF_ERROR(queue_download(bl));
  round_bl_ = bl;
  if (times_.on) {
    times_.propose_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++times_.proposes;
  }
  return Status::ok();
}

speculative::RoundOutputs DsparkCuda::round_outputs() const {
  const BlockLayout& bl = round_bl_;
  if (bl.Bp == 0) return {};
  speculative::RoundOutputs r;
  r.accepted = reinterpret_cast<const int32_t*>(out_.data() + bl.accepted);
  r.verified = reinterpret_cast<const int32_t*>(out_.data() + bl.tokens);
  r.drafts = reinterpret_cast<const int32_t*>(out_.data() + bl.ids);
  r.block = int32_t(bl.g);
  return r;
}

Status DsparkCuda::finish_round(std::span<const speculative::RoundItem> items,
                                std::vector<speculative::RoundResult>& out) {
  out.assign(items.size(), {});
  if (items.empty()) return Status::ok();
  const BlockLayout& bl = round_bl_;
  if (bl.Bp < int64_t(items.size())) return Status::error("dspark round: finish_round without its launch_round");
  const int64_t g = bl.g, V = tc_.vocab_size, B = int64_t(items.size());
  const auto t0 = std::chrono::steady_clock::now();
  DSI_RETURN_IF_ERROR(wait_download());
  const auto* ids = reinterpret_cast<const int32_t*>(out_host_.data() + bl.ids);
  const auto* conf = reinterpret_cast<const float*>(out_host_.data() + bl.conf);
  const auto* acc = reinterpret_cast<const int32_t*>(out_host_.data() + bl.accepted);
  const auto* tok = reinterpret_cast<const int32_t*>(out_host_.data() + bl.tokens);
  for (int64_t b = 0; b < B; ++b) {
    speculative::RoundResult& r = out[size_t(b)];
    r.accepted = acc[b];
    if (r.accepted < 0 || r.accepted > int32_t(items[size_t(b)].drafts.size()))
      return Status::errorf("dspark round: accepted {} of {} drafts", r.accepted, items[size_t(b)].drafts.size());
    for (int32_t t = 0; t <= r.accepted; ++t) {
      const int32_t x = tok[b * (g + 1) + t];
      if (x < 0 || x >= V) return Status::errorf("dspark round: target token {} outside the vocabulary", x);
      r.tokens.push_back(x);
    }
    for (int64_t k = 0; k < g; ++k) {
      const int32_t x = ids[b * g + k];
      if (x < 0 || x >= V) return Status::errorf("dspark round: drafted token {} outside the vocabulary", x);
      r.proposal.tokens.push_back(x);
      r.proposal.confidence_logits.push_back(conf[b * g + k]);
    }
  }
  if (times_.on)  // the round's wait and reading, with its launch (launch_round)
    times_.propose_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace dsinfer::backends
