// CudaForwardV41's attention block of one layer (model/deepseek_v41_attention.cpp attention()): q = wq_b(q_norm(wq_a
// y)) with RoPE (no per-head norm), window kv = FP8-QAT(RoPE(kv_norm(wkv y))); a KV-source layer pools and emits
// its compressed entries + indexer keys (kv_source), an index source selects the top-k (index_source); then sparse
// attention over the layer's own window and the latest index source's picks among the KV source's entries, the
// ring write and the grouped output projection.
#include <algorithm>
#include <cmath>

#include "backends/cuda/runner/forward_v41.h"
#include "backends/cuda/runner/tensor_parallel_parts.h"
#include "model/state_pool.h"
#include "ops/csa2/csa2_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/gemm/gemm_official_cuda.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using model::v41::Gemm;

namespace {
bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

// KV source l: ratio > 1 pools the step's projections with the frontier (ratio 1 takes them as they are), the
// latents are comp_norm'd, projected to indexer keys, and the completed entries stored in the token blocks.
Status CudaForwardV41::kv_source(int64_t l, const ops::StepDevice& st) {
  const DeviceLayerV41& L = weights_.layer(l);
  const int64_t T = st.T, D = cfg_.hidden_size, hd = cfg_.head_dim, di = cfg_.index_head_dim, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps);
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  const ops::LayerStateView view = model::layer_view(pool, l);
  float* latent = m > 1 ? s_.latent.data() : s_.ckv.data();
  // Official numerics: the ratio > 1 pooling projections in fp32, the ratio-1 latents in bf16.
  DSI_OP("compressor_proj", l, linear(m > 1 ? Gemm::F32 : Gemm::BF16, s_.y.data(), T, D, L.comp_wkv, s_.ckv.data(), hd));
  if (m > 1) {
    DSI_OP("compressor_proj", l, linear(Gemm::F32, s_.y.data(), T, D, L.comp_wgate, s_.cg.data(), hd));
    DSI_OP("compressor", l, csa2_pool(st, view, m, hd, s_.ckv.data(), s_.cg.data(), latent, stream_));
    DSI_OP("compressor", l, csa2_frontier_write(st, view, hd, s_.ckv.data(), s_.cg.data(), stream_));
    DSI_OP("compressor", l, round(latent, T, hd, 0, hd));
  }
  DSI_OP("compressor", l, rmsnorm(latent, T, hd, L.comp_norm, eps, latent, stream_, official()));  // + bf16 rounding
  DSI_RETURN_IF_ERROR(dump("kv.latent", l, latent, T, hd));
  DSI_OP("indexer_keys", l, linear(Gemm::BF16, latent, T, hd, L.idx_wk, s_.key.data(), di));
  Csa2EmitCudaParams ep;
  ep.ratio = m;
  ep.d = hd;
  ep.di = di;
  ep.rope_dim = cfg_.qk_rope_head_dim;
  ep.inv_freq = inv_comp_.data();
  ep.eps = eps;
  ep.key_norm_w = L.idx_k_norm;
  ep.qat = num_.qat_sim;
  ep.round_bf16 = official();
  DSI_OP("compressor_emit", l, csa2_emit(st, view, ep, latent, s_.key.data(), stream_));
  DSI_RETURN_IF_ERROR(dump("kv.key", l, s_.key.data(), T, di));
  return Status::ok();
}

// Index source l: queries from the q latent (RoPE, FP4 QAT), head weights * Hi^-1/2, scores over the KV source's
// keys, then the (two-level) top-k into s_.sel, which every layer up to the next index source attends with.
Status CudaForwardV41::index_source(int64_t l, const ops::StepDevice& st) {
  const DeviceLayerV41& L = weights_.layer(l);
  const int64_t T = st.T, D = cfg_.hidden_size, Hi = cfg_.index_n_heads, di = cfg_.index_head_dim, qr = cfg_.q_lora_rank;
  const auto& v = cfg_.v41;
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  const ops::LayerStateView src = model::layer_view(pool, cfg_.kv_source_of(l));
  float *iq = s_.iq.data(), *iw = s_.iw.data();
  DSI_OP("indexer_q", l, linear(Gemm::FP8, s_.cq.data(), T, qr, L.idx_wq_b, iq, Hi * di));
  DSI_OP("indexer_proj", l, linear(Gemm::BF16, s_.y.data(), T, D, L.idx_wproj, iw, Hi));
  // transformers scales the head weights by Hi^-1/2 and the scores by di^-1/2; the official code folds both into
  // the (bf16) head weights.
  const double ws = official() ? std::pow(double(Hi), -0.5) * std::pow(double(di), -0.5) : std::pow(double(Hi), -0.5);
  DSI_OP("indexer_proj", l, scale_cuda(iw, T * Hi, float(ws), stream_));
  DSI_OP("indexer_proj", l, round(iw, T, Hi, 0, Hi));
  const int64_t rd = cfg_.qk_rope_head_dim;
  HeadNormRopeParams rp{T, Hi, di, HeadNorm::None, nullptr, float(cfg_.rms_norm_eps), rd, inv_comp_.data(), 1.0f,
                        false};
  rp.round_rope_bf16 = official();  // the RoPE channels' bf16 rounding fused (was a second launch)
  DSI_OP("indexer_q_rope", l, head_norm_rope(rp, iq, st.pos, stream_));
  if (num_.qat_sim) DSI_OP("indexer_q_qat", l, csa2_qat(iq, T * Hi, di, 32, QatKind::Fp4Ue8m0, stream_));
  DSI_RETURN_IF_ERROR(dump("idx.iq", l, iq, T, Hi * di));
  DSI_RETURN_IF_ERROR(dump("idx.iw", l, iw, T, Hi));
  Csa2IndexCudaParams xp;
  xp.heads = Hi;
  xp.dim = di;
  xp.ratio = cfg_.ratio(l);
  xp.topk = cfg_.index_topk;
  xp.stride = s_.stride;
  xp.official = official();
  xp.fast = kernel_mode() == ops::KernelMode::kFast;  // fp32 scores (exact and batch-invariant keep fp64)
  if (l == v.candidate_source_layer_id) {
    xp.mode = Csa2SelectMode::Candidate;
    xp.cand_topk_blocks = v.candidate_topk_blocks;
    xp.cand_block_size = v.candidate_block_size;
  } else if (v.candidate_source_layer_id >= 0 && v.candidate_source_layer_id < l &&
             contains(v.index_source_layer_ids, v.candidate_source_layer_id)) {  // else no mask was ever published
    xp.mode = Csa2SelectMode::Masked;
  }
  DSI_OP("indexer_scores", l, csa2_index_scores(st, src, xp, iq, iw, s_.scores.data(), stream_));
  DSI_OP("indexer_topk", l, csa2_index_select(st, xp, s_.scores.data(), s_.mask.data(), s_.mask_n.data(), s_.blk.data(),
                                                s_.sel.data(), stream_, s_.pairs.data()));
  DSI_RETURN_IF_ERROR(dump("idx.scores", l, s_.scores.data(), T, s_.stride));
  DSI_RETURN_IF_ERROR(dump("idx.sel", l, s_.sel.data(), T, cfg_.index_topk, 0, true));
  return Status::ok();
}

Status CudaForwardV41::attention(int64_t l, const ops::StepDevice& st) {
  const DeviceLayerV41& L = weights_.layer(l);
  const int64_t T = st.T, D = cfg_.hidden_size, H = cfg_.num_attention_heads, hd = cfg_.head_dim, qr = cfg_.q_lora_rank;
  const int64_t rd = cfg_.qk_rope_head_dim, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps);
  const float* inv = (m == 0 ? inv_main_ : inv_comp_).data();
  float *y = s_.y.data(), *cq = s_.cq.data(), *q = s_.q.data(), *kv = s_.kv.data();
  // TP attention (tensor_parallel_cuda.cpp, as V4's): this shard's query heads [h0, h0 + Hl) of its wo_a output
  // groups; Hl = H outside TP. The latents, the KV and index sources and the state are every rank's. Official
  // numerics never get here with several ranks (cuda_numerics_refusal).
  const HeadGroups hg = head_groups();
  const int64_t h0 = hg.h0, Hl = hg.h1 - hg.h0;
  const bool tp = Hl != H || hg.g1 - hg.g0 != cfg_.o_groups;
  DSI_OP("wq_a", l, linear(Gemm::FP8, y, T, D, L.wq_a, cq, qr));
  DSI_OP("q_norm", l, rmsnorm(cq, T, qr, L.q_norm, eps, cq, stream_, official()));  // + the bf16 rounding
  DSI_RETURN_IF_ERROR(dump("attn.cq", l, cq, T, qr));
  if (Hl > 0 && tp) {
    // This rank's rows of wq_b, called so that they run the whole weight's kernel (tensor_parallel_parts.h).
    DSI_ASSIGN_OR_RETURN(const tp::PartGemm p, tp::rows_part(L.wq_b, h0 * hd, (h0 + Hl) * hd,
                                                             kernel_mode() == ops::KernelMode::kBatchInvariant,
                                                             device_.multiprocessors));
    if (p.groups == 1) DSI_OP("wq_b", l, gemm(cq, T, qr, p.w, q, Hl * hd));
    else DSI_OP("wq_b", l, gemm_grouped(cq, T, qr, p.x_stride, p.w, p.groups, q, Hl * hd, p.y_stride));
  } else if (Hl > 0) {
    DSI_OP("wq_b", l, linear(Gemm::FP8, cq, T, qr, L.wq_b, q, H * hd));
  }
  DSI_OP("wkv", l, linear(Gemm::FP8, y, T, D, L.wkv, kv, hd));
  // The query's RoPE and the window kv's norm + RoPE in one launch, the bf16 roundings of official numerics fused
  // (was two launches, six in official numerics; the same bits). There the norm's bf16 output is what RoPE rotates,
  // so the kv norm stays a separate rmsnorm (with its rounding fused) and the pair kernel only rotates.
  HeadNormRopeParams qp{T, Hl, hd, HeadNorm::None, nullptr, eps, rd, inv, 1.0f, false};
  HeadNormRopeParams kp{T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, rd, inv, 1.0f, false};
  qp.round_rope_bf16 = official();
  kp.round_rope_bf16 = official();
  if (official()) {
    DSI_OP("kv_norm_rope", l, rmsnorm(kv, T, hd, L.kv_norm, eps, kv, stream_, true));
    kp.norm = HeadNorm::None;
  }
  if (Hl > 0) DSI_OP("q_rope", l, head_norm_rope_pair(qp, q, kp, kv, st.pos, stream_));
  else DSI_OP("q_rope", l, head_norm_rope(kp, kv, st.pos, stream_));  // a TP rank without heads: the kv only
  if (num_.qat_sim) DSI_OP("kv_qat", l, csa2_qat(kv, T, hd, 32, QatKind::Fp8Ue8m0, stream_));
  DSI_RETURN_IF_ERROR(dump("attn.q", l, q, T, Hl * hd));
  DSI_RETURN_IF_ERROR(dump("attn.kv", l, kv, T, hd));
  const int64_t src = cfg_.kv_source_of(l);
  if (src == l) DSI_RETURN_IF_ERROR(kv_source(l, st));
  if (m > 0 && contains(cfg_.v41.index_source_layer_ids, l)) DSI_RETURN_IF_ERROR(index_source(l, st));

  // The layer's own window ring, the KV source's compressed entries.
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  ops::LayerStateView view = model::layer_view(pool, l);
  if (m > 0) {
    const ops::LayerStateView sv = model::layer_view(pool, src);
    view.entries_offset = sv.entries_offset;
    view.entries_per_block = sv.entries_per_block;
  }
  SparseAttentionCudaParams ap;
  ap.heads = Hl;
  ap.head_dim = hd;
  ap.scale = float(1.0 / std::sqrt(double(hd)));
  ap.sinks = L.sink + h0;
  ap.window = cfg_.sliding_window;
  ap.m = m;
  ap.topk_idx = m > 0 ? s_.sel.data() : nullptr;
  ap.topk = m > 0 ? cfg_.index_topk : 0;
  ap.rope_dim = rd;  // the inverse RoPE of the output, fused into the kernel's final write
  ap.inv_freq = inv;
  ap.attention_factor = 1.0f;
  ap.num_splits = attention_splits(l, T);  // from the model's head count: a TP rank's heads split as one rank's
  ap.split_keys = official() ? 0 : sparse_attention_split_keys(kernel_mode());  // batch-invariant: fixed key chunks
  // Fast and batch-invariant modes: the bf16 tensor-core kernel, as V4's (sparse_attention_plan.h); exact and
  // official keep their fp32 kernels.
  ap.tensor_cores = sparse_attention_tensor_cores(kernel_mode(), hd);
  ap.official = official();
  float* o = s_.o.data();
  if (Hl > 0) DSI_OP("sparse_attention", l, sparse_attention(st, view, ap, q, kv, o, s_.attn_ws.data(), stream_));
  DSI_OP("ring_write", l, ring_write(st, view, kv, stream_));
  DSI_RETURN_IF_ERROR(dump("attn.o", l, o, T, Hl * hd));
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, gin = H * hd / G, ng = hg.g1 - hg.g0;
  if (official()) {  // a bf16 einsum per group
    DSI_OP("wo_a", l, gemm_official_cuda(o, T, H * hd, L.wo_a, s_.mid.data(), G * r, OfficialGemm::kBf16, stream_, G));
  } else if (ng == G) {
    DSI_OP("wo_a", l, gemm_grouped(o, T, H * hd, gin, L.wo_a, G, s_.mid.data(), G * r, r));
  } else {
    // TP: this rank's groups' columns of wo_a's output, zero elsewhere, summed over the ranks (an exact gather), so
    // every rank runs wo_b whole, as one rank does.
    DSI_RETURN_IF_ERROR(clear_head_groups(s_.mid.data(), T, G * r));
    if (ng > 0) {
      DSI_ASSIGN_OR_RETURN(const tp::PartGemm p, tp::groups_part(L.wo_a, G, hg.g0, hg.g1, gin));
      DSI_OP("wo_a", l, gemm_grouped(o, T, Hl * hd, p.x_stride, p.w, p.groups, s_.mid.data() + hg.g0 * r, G * r,
                                     p.y_stride));
    }
    DSI_RETURN_IF_ERROR(gather_head_groups(s_.mid.data(), T, G * r, l));
  }
  DSI_RETURN_IF_ERROR(dump("attn.mid", l, s_.mid.data(), T, G * r));
  DSI_OP("wo_b", l, linear(Gemm::FP8, s_.mid.data(), T, G * r, L.wo_b, s_.f.data(), D));
  return Status::ok();
}

}  // namespace dsinfer::backends
