// CudaForwardV4 (forward_v4.h): the DeepSeek-V4 forward on the GPU, in the order of the CPU reference
// (model/deepseek_v4.cpp): embed -> per layer [hc_pre+attn_norm -> attention -> hc_post -> hc_pre+ffn_norm ->
// MoE -> hc_post] -> hc_head+norm -> head. Every op is named (timing for `dsinfer bench`). The attention block is
// attention_v4_cuda.cpp; the weights, RoPE tables and the scratch it all runs in are set up here.
#include <algorithm>
#include <vector>

#include "backends/cuda/runner/forward_v4.h"
#include "core/env_switch.h"
#include "cuda/cuda_common.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/embed/embed_cuda.h"
#include "ops/gemm/gemm_fp8_skinny_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "model/tensor_table.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

// The split count of the attention kernel (ops/sparse_attention/sparse_attention_plan.h): batch-invariant mode a
// fixed split size, fast mode the tensor-core kernel's count, exact mode ~2 blocks per SM.
int64_t CudaForwardV4::attention_splits(AttnType type, int64_t m, int64_t T, int64_t max_pos) const {
  const int64_t max_keys = cfg_.sliding_window + (type == AttnType::CSA   ? cfg_.index_topk
                                                  : type == AttnType::HCA ? (max_pos + 1) / std::max<int64_t>(m, 1)
                                                                          : 0);
  return plan_sparse_attention(kernel_mode(), T, cfg_.num_attention_heads, cfg_.head_dim, max_keys,
                               device_.multiprocessors)
      .num_splits;
}

// Weights (checkpoint, validated by model::resolve_weights, or dummy weights generated on the GPU in the official
// formats) after the per-rank fit check, and the RoPE tables.
Status CudaForwardV4::load(const runner::RunnerOptions& opts, ExpertSlots slots) {
  DSI_ASSIGN_OR_RETURN(sparse_prefill_kernel_, sparse_prefill_kernel_from_env());
  DSI_ASSIGN_OR_RETURN(gemm_settings_, gemm_settings_from_env());
  lt_.emplace(gemm_settings_.lt_activations, gemm_settings_.lt_stack);
  if (gemm_settings_.fp8_skinny != GemmFp8Skinny::kOff) {  // the widest activation row of a dense FP8 projection
    const int64_t k_total = std::max({cfg_.hidden_size, cfg_.q_lora_rank, cfg_.num_attention_heads * cfg_.head_dim,
                                      cfg_.o_groups * cfg_.o_lora_rank});
    const int terms = gemm_settings_.fp8_skinny == GemmFp8Skinny::kOneTerm ? 1 : 2;
    DSI_RETURN_IF_ERROR(fp8sk_ws_.alloc(gemm_fp8_skinny_workspace_bytes(k_total, terms), "fp8 skinny workspace"));
  }
  DSI_ASSIGN_OR_RETURN(sparse_prefill_, sparse_prefill_route_from_env());
  DSI_RETURN_IF_ERROR(hc_side_.create());
  // Refuse a model that cannot fit before allocating anything (the same per-rank sizing as the ParallelRunner).
  DSI_RETURN_IF_ERROR(parallel::check_rank_fits(
      parallel::rank_memory(model::weight_specs(cfg_), ep_size_, core_.eplb_.redundant), ep_size_, core_.ordinal_,
      device_.free_bytes, device_.name));
  if (opts.load_format == runner::LoadFormat::kDummy)
    DSI_RETURN_IF_ERROR(weights_.generate_dummy(cfg_, std::move(slots), stream_));
  else
    DSI_RETURN_IF_ERROR(weights_.load_checkpoint(cfg_, opts.model_dir, std::move(slots)));
  const std::vector<float> inv_main = ops::rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  const std::vector<float> inv_comp = ops::rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
  DSI_RETURN_IF_ERROR(inv_main_.upload(inv_main.data(), inv_main.size(), "rope inv_freq"));
  DSI_RETURN_IF_ERROR(inv_comp_.upload(inv_comp.data(), inv_comp.size(), "rope inv_freq"));
  return Status::ok();
}

Status CudaForwardV4::prepare(int64_t T, int64_t R, int64_t max_pos) {
  shape_.max_pos = max_pos;
  shape_.visible = (max_pos + 1) / std::max<int64_t>(cfg_.csa_ratio, 1);
  const int64_t max_visible = shape_.visible;
  // Element counts; at least 64 elements (256 bytes) per buffer (CudaForward::grow).
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, H = cfg_.num_attention_heads, hd = cfg_.head_dim;
  const int64_t Hi = std::max<int64_t>(cfg_.index_n_heads, 1), di = std::max<int64_t>(cfg_.index_head_dim, 1);
  const size_t t = size_t(T);
  DSI_RETURN_IF_ERROR(grow(s_.X, t * size_t(n * D), "residual streams"));
  DSI_RETURN_IF_ERROR(grow(s_.y, t * size_t(D), "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.f, t * size_t(D), "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.y16, t * size_t(D), "bf16 activations"));
  DSI_RETURN_IF_ERROR(grow(s_.post, t * size_t(n), "mHC post"));
  DSI_RETURN_IF_ERROR(grow(s_.comb, t * size_t(n * n), "mHC comb"));
  DSI_RETURN_IF_ERROR(grow(s_.cq, t * size_t(cfg_.q_lora_rank), "q latent"));
  DSI_RETURN_IF_ERROR(grow(s_.q, t * size_t(H * hd), "q"));
  DSI_RETURN_IF_ERROR(grow(s_.kv, t * size_t(hd), "kv"));
  DSI_RETURN_IF_ERROR(grow(s_.ckv, t * size_t(2 * hd), "compressor kv"));
  DSI_RETURN_IF_ERROR(grow(s_.cg, t * size_t(2 * hd), "compressor gate"));
  DSI_RETURN_IF_ERROR(grow(s_.iq, t * size_t(Hi * di), "indexer q"));
  DSI_RETURN_IF_ERROR(grow(s_.iw, t * size_t(Hi), "indexer weights"));
  DSI_RETURN_IF_ERROR(grow(s_.ikv, t * size_t(2 * di), "indexer kv"));
  DSI_RETURN_IF_ERROR(grow(s_.ig, t * size_t(2 * di), "indexer gate"));
  DSI_RETURN_IF_ERROR(grow(s_.sel, t * size_t(std::max<int64_t>(cfg_.index_topk, 1)), "indexer selection"));
  DSI_RETURN_IF_ERROR(grow(s_.scores, size_t(indexer_scores_floats(T, std::max<int64_t>(max_visible, 1))), "indexer scores"));
  DSI_RETURN_IF_ERROR(grow(s_.o, t * size_t(H * hd), "attention output"));
  DSI_RETURN_IF_ERROR(grow(s_.mid, t * size_t(cfg_.o_groups * cfg_.o_lora_rank), "output projection"));
  DSI_RETURN_IF_ERROR(grow(s_.router, t * size_t(cfg_.n_routed_experts), "router logits"));
  DSI_RETURN_IF_ERROR(grow(s_.ridx, t * size_t(cfg_.num_experts_per_tok), "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.centries, t + 1, "compressor entries"));
  DSI_RETURN_IF_ERROR(grow(s_.rw, t * size_t(cfg_.num_experts_per_tok), "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.hid, size_t(R) * size_t(D), "final hidden"));
  DSI_RETURN_IF_ERROR(grow(s_.logits, size_t(R) * size_t(cfg_.vocab_size), "logits"));
  int64_t ws = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    ws = std::max(ws, sparse_attention_workspace_floats(T, H, hd, attention_splits(cfg_.layer_types[size_t(l)], cfg_.ratio(l), T, max_pos),
                                                        batch_invariant_));
  DSI_RETURN_IF_ERROR(grow(s_.attn_ws, size_t(ws) + 64, "attention workspace"));
  DSI_RETURN_IF_ERROR(prepare_fp8(T, max_pos));  // FP8 state only (attention_v4_cuda.cpp)
  if (T > s_.tokens) {
    DSI_RETURN_IF_ERROR(moe_ws_.reserve(T, cfg_.num_experts_per_tok, D, cfg_.moe_intermediate_size, cfg_.n_routed_experts));
    s_.tokens = T;
    ++scratch_gen_;
  }
  return Status::ok();
}

// Kernel choice of the projections: ops/gemm/gemm_plan.h plan_gemm_call / plan_gemm_grouped_call (exact: chunks
// for the fp32 kernel; batch-invariant: kernel and K split per weight, never cuBLASLt; fast: cuBLASLt from the
// settings' thresholds, else the GEMV / streaming kernels where they measured faster). The engine's one-time setup
// (weight scales, buffers for s_.tokens rows) runs on every eager call, so each weight is ready before a decode
// graph captures it; any engine error falls back to gemm_cuda (the runner never accumulates here, so even a
// half-done call is overwritten).
Status CudaForwardV4::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool acc) {
  const GemmCallPlan p = plan_gemm_call(w, M, kernel_mode(), gemm_settings_);
  if (p.fp8_skinny_terms > 0 &&
      gemm_fp8_skinny_cuda(x, M, ldx, 0, w, 1, y, ldy, 0, acc, p.fp8_skinny_terms, fp8sk_ws_.data(), fp8sk_ws_.size(),
                           device_.multiprocessors, stream_)
          .is_ok())
    return Status::ok();
  if (p.lt_prepare && lt_->prepare(w, std::max(M, s_.tokens), stream_).is_ok() && p.lt &&
      lt_->gemm(x, M, ldx, w, y, ldy, acc, stream_).is_ok())
    return Status::ok();
  const int64_t chunk = p.chunk_rows;
  const GemmPrecision prec = p.precision;
  for (int64_t r = 0; r < M; r += chunk)
    DSI_RETURN_IF_ERROR(gemm_cuda(x + r * ldx, std::min(chunk, M - r), ldx, w, y + r * ldy, ldy, acc, stream_, prec));
  return Status::ok();
}

bool CudaForwardV4::lt_bf16_call(const DeviceWeight& w, int64_t M) {
  const GemmCallPlan p = plan_gemm_call(w, M, kernel_mode(), gemm_settings_);
  const bool bf16 = w.fmt == WeightFormat::BF16 ||
                    (w.fmt == WeightFormat::FP8_BLOCK &&
                     gemm_lt_fp8_route(w, M, gemm_settings_.lt_activations) == GemmLtActivations::kBf16);
  return p.lt && p.fp8_skinny_terms == 0 && bf16 && lt_->prepare(w, std::max(M, s_.tokens), stream_).is_ok();
}

Status CudaForwardV4::gemm_x16(const float* x, const uint16_t* x16, int64_t M, int64_t ldx, const DeviceWeight& w,
                               float* y, int64_t ldy) {
  if (x16 && lt_bf16_call(w, M) && lt_->gemm_bf16_in(x16, M, ldx, w, y, ldy, false, stream_).is_ok())
    return Status::ok();
  if (!x)
    return Status::errorf("cuda runner: {} [{}, {}] at M = {} needs its fp32 x, which this step did not store",
                          weight_format_name(w.fmt), w.rows, w.cols, M);
  return gemm(x, M, ldx, w, y, ldy, false);
}

bool CudaForwardV4::x16_site(const DeviceWeight& w, int64_t T) {
  // DSINFER_PREFILL_X16=0: every projection rounds y itself again (a measurement switch, read once; the same bits)
  static const bool on = env_switch("DSINFER_PREFILL_X16", {"0", "1"}) != "0";
  return on && lt_bf16_call(w, T);
}

bool CudaForwardV4::y16_only(int64_t l, int64_t T, bool ffn) {
  const DeviceLayer& L = weights_.layer(l);
  std::vector<const DeviceWeight*> ws;
  if (ffn) {
    // the readers of ffn(): one rank (no exchange, no expert slots), the MoE in one call
    const int64_t k = cfg_.num_experts_per_tok;
    if (ep_size_ != 1 || core_.dp_ || moe_chunk_tokens(kernel_mode(), T, L.experts.experts, k) < T) return false;
    if (!moe_x16_suffices(moe_ws_, L.experts, L.has_shared, T, k, moe_path(kernel_mode(), T))) return false;
    ws = {&L.gate};
    if (L.has_shared) ws.insert(ws.end(), {&L.shared.w1, &L.shared.w3});
  } else {
    // attention(): gemm_segments over wq_a + wkv, then (compressed layers) the compressor's and indexer's
    const AttnType type = cfg_.layer_types[size_t(l)];
    ws = {&L.wq_a, &L.wkv};
    if (type != AttnType::Sliding) ws.insert(ws.end(), {&L.comp_wkv, &L.comp_wgate});
    if (type == AttnType::CSA) ws.insert(ws.end(), {&L.idx_wproj, &L.idx_wkv, &L.idx_wgate});
    const int sms = device_.multiprocessors;
    if (plan_gemm_segments(ws.data(), 2, T, kernel_mode(), gemm_settings_, sms).one_launch) return false;
    if (ws.size() > 2 &&
        plan_gemm_segments(ws.data() + 2, int(ws.size()) - 2, T, kernel_mode(), gemm_settings_, sms).one_launch)
      return false;
  }
  for (const DeviceWeight* w : ws)
    if (!lt_bf16_call(*w, T)) return false;
  return true;
}

Status CudaForwardV4::gemm_bf16_out(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, uint16_t* y16,
                                    int64_t ldy, bool& done) {
  done = lt_bf16_call(w, M) && lt_->gemm_bf16_out(x, M, ldx, w, y16, ldy, stream_).is_ok();
  return Status::ok();
}

Status CudaForwardV4::gemm_segments(const float* x, int64_t M, int64_t ldx, const GemmSegment* segs, int count,
                                    const uint16_t* x16) {
  const DeviceWeight* ws[kGemmMaxSegments] = {};
  for (int i = 0; i < count && i < kGemmMaxSegments; ++i) ws[i] = &segs[i].w;
  const GemmSegmentsPlan sp = plan_gemm_segments(ws, count, M, kernel_mode(), gemm_settings_, device_.multiprocessors);
  if (!sp.one_launch) {
    // Every segment on cuBLASLt (prefill sizes): where they all take a bf16 matmul, x rounded to bf16 once for all
    // of them (GemmLtEngine::gemm_same_x: the same bits as the calls below), or not at all where the caller has x16;
    // else one call each.
    bool same_x = !x16 && count >= 2;
    float* ys[kGemmMaxSegments] = {};
    int64_t ldys[kGemmMaxSegments] = {};
    for (int i = 0; i < count && same_x; ++i) {
      same_x = lt_bf16_call(segs[i].w, M);
      ys[i] = segs[i].y;
      ldys[i] = segs[i].ldy;
    }
    same_x = same_x && lt_->gemm_same_x(x, M, ldx, ws, ys, ldys, count, stream_).is_ok();
    for (int i = 0; i < count; ++i) {
      if (x16) DSI_RETURN_IF_ERROR(gemm_x16(x, x16, M, ldx, segs[i].w, segs[i].y, segs[i].ldy));
      else if (!same_x) DSI_RETURN_IF_ERROR(gemm(x, M, ldx, segs[i].w, segs[i].y, segs[i].ldy, false));
      if (segs[i].out_scale != 1.0f) {
        if (segs[i].ldy != segs[i].w.rows) return Status::error("gemm segments: a scaled output needs ldy == N");
        DSI_RETURN_IF_ERROR(scale_cuda(segs[i].y, M * segs[i].ldy, segs[i].out_scale, stream_));
      }
    }
    return Status::ok();
  }
  if (!x) return Status::error("cuda runner: gemm_segments' one launch needs the fp32 x, not stored this step");
  // Each weight's cuBLASLt setup as its own gemm() call does it (the engine is ready when a larger M takes it).
  for (int i = 0; i < count; ++i)
    if (plan_gemm_call(segs[i].w, M, kernel_mode(), gemm_settings_).lt_prepare)
      (void)lt_->prepare(segs[i].w, std::max(M, s_.tokens), stream_);
  return gemm_segments_cuda(x, M, ldx, segs, count, stream_, sp.precision);
}

// The grouped FP8 weight (wo_a) through the cuBLASLt engine's batched call (one strided-batched GEMM over every
// group), where plan_gemm_grouped_call says so. Any error comes before the first launch and leaves y untouched; the
// caller then takes the kernels.
Status CudaForwardV4::gemm_grouped_lt(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                   int64_t groups, float* y, int64_t ldy, int64_t yg) {
  DSI_RETURN_IF_ERROR(lt_->prepare_grouped(w, groups, std::max(M, s_.tokens), stream_));
  return lt_->gemm_grouped(x, M, ldx, xg, w, groups, y, ldy, yg, stream_);
}

Status CudaForwardV4::gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w, int64_t groups,
                                float* y, int64_t ldy, int64_t yg) {
  const GemmCallPlan p = plan_gemm_grouped_call(w, groups, M, kernel_mode(), gemm_settings_);
  if (p.fp8_skinny_terms > 0 &&
      gemm_fp8_skinny_cuda(x, M, ldx, xg, w, groups, y, ldy, yg, false, p.fp8_skinny_terms, fp8sk_ws_.data(),
                           fp8sk_ws_.size(), device_.multiprocessors, stream_)
          .is_ok())
    return Status::ok();
  if (p.lt && gemm_grouped_lt(x, M, ldx, xg, w, groups, y, ldy, yg).is_ok()) return Status::ok();
  const int64_t chunk = p.chunk_rows;
  const GemmPrecision prec = p.precision;
  for (int64_t r = 0; r < M; r += chunk)
    DSI_RETURN_IF_ERROR(gemm_grouped_cuda(x + r * ldx, std::min(chunk, M - r), ldx, xg, w, groups, y + r * ldy, ldy, yg,
                                          stream_, prec));
  return Status::ok();
}

Status CudaForwardV4::moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k,
                          const DeviceLayer& L, const uint16_t* x16, ops::RoutedSum* defer) {
  const MoeExpertsDevice& e = L.experts;
  const float limit = float(cfg_.swiglu_limit), shared_limit = num_.shared_expert_clamp ? limit : 0.0f;
  // Path and tokens per call: ops/moe/moe_plan.h (exact: chunks that keep every expert GEMM on the fp32 kernel;
  // batch-invariant: MoePath::Invariant in chunks of kMoeInvariantChunkT tokens; fast: the whole step).
  const MoePath path = moe_path(kernel_mode(), T);
  const int64_t chunk = moe_chunk_tokens(kernel_mode(), T, e.experts, k);
  const int64_t D = e.dim;
  float* out = s_.f.data();
  if (chunk < T) defer = nullptr;  // several calls: each sums its own rows into s_.f
  for (int64_t r = 0; r < T; r += chunk) {
    const int64_t n = std::min(chunk, T - r);
    // Expert parallelism: the shared expert on rank 0 only (the all-reduce adds it to every rank's sum once).
    const MoeSharedDevice* shared = L.has_shared && ep_rank_ == 0 ? &L.shared : nullptr;
    DSI_RETURN_IF_ERROR(moe_cuda(x + r * D, n, idx + r * k, w + r * k, k, e, shared, limit, shared_limit, out + r * D,
                                 moe_ws_, stream_, path, x16 ? x16 + r * D : nullptr, defer));
  }
  return Status::ok();
}

Status CudaForwardV4::comb_on_side(const HcNormParams& hp, int64_t T) {
  DSI_RETURN_IF_ERROR(hc_side_.fork(stream_));
  const Status st = hc_comb(hp, T, s_.post.data(), s_.comb.data(), hc_side_.stream());
  if (!st.is_ok()) (void)hc_side_.join(stream_);  // a captured forward never ends with the side stream unjoined
  return st;
}

Status CudaForwardV4::join_comb(bool defer, Status sublayer) {
  if (!defer) return sublayer;
  const Status joined = hc_side_.join(stream_);
  return sublayer.is_ok() ? joined : sublayer;
}

HcNormParams CudaForwardV4::site_params(int64_t l, bool ffn, int64_t T, bool defer) {
  const DeviceLayer& L = weights_.layer(l);
  const HcDevice& hc = ffn ? L.hc_ffn : L.hc_attn;
  HcNormParams hp{hc.fn, hc.base, hc.scale, cfg_.hc_mult, cfg_.hidden_size, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps),
                  float(cfg_.rms_norm_eps), ffn ? L.ffn_norm : L.attn_norm, batch_invariant_};
  hp.defer_comb = defer;
  const DeviceWeight& first = ffn ? (L.has_shared ? L.shared.w1 : L.gate) : L.wq_a;
  hp.y_bf16 = x16_site(first, T) ? s_.y16.data() : nullptr;
  hp.y_bf16_only = hp.y_bf16 && y16_only(l, T, ffn);
  return hp;
}

Status CudaForwardV4::post_site(HcNormParams* next, int64_t T, const float* f, const ops::RoutedSum* routed) {
  const int64_t n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (next && !routed && hc_post_mix_wanted(*next, T)) {
    next->premixed = true;
    return hc_post_mix(*next, T, f, s_.post.data(), s_.comb.data(), s_.X.data(), s_.y.data(), stream_);
  }
  if (routed) return hc_post_routed(T, n, D, *routed, s_.post.data(), s_.comb.data(), s_.X.data(), stream_);
  return hc_post(T, n, D, f, s_.post.data(), s_.comb.data(), s_.X.data(), stream_);
}

Status CudaForwardV4::run(const ops::StepDevice& st, const int32_t* rows, int64_t R) {
  const int64_t T = st.T, V = cfg_.vocab_size, D = cfg_.hidden_size, n = cfg_.hc_mult;
  const DeviceWeight& emb = weights_.embed();
  DSI_OP("embed", -1, embed(emb.data, emb.fmt == WeightFormat::BF16 ? EmbedDType::BF16 : EmbedDType::F32, V, D, st.tokens, T, n,
                            s_.X.data(), stream_));
  // Decode steps: each site's post / comb (the Sinkhorn) on hc_side_, off the collapse's critical path, joined before
  // its hc_post (ops/mhc/mhc_cuda.h hc_defer_comb; the same bits).
  const bool defer = hc_side_.usable() && hc_defer_comb(T);
  HcNormParams hp = site_params(0, false, T, defer);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    DSI_OP("hc_pre_attn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    if (defer) DSI_RETURN_IF_ERROR(comb_on_side(hp, T));
    DSI_RETURN_IF_ERROR(join_comb(defer, attention(l, st, hp.y_bf16_only ? nullptr : s_.y.data(), hp.y_bf16)));
    hp = site_params(l, true, T, defer);
    DSI_OP("hc_post_attn", l, post_site(&hp, T, s_.f.data(), nullptr));
    DSI_OP("hc_pre_ffn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    if (defer) DSI_RETURN_IF_ERROR(comb_on_side(hp, T));
    ops::RoutedSum f_sum;
    DSI_RETURN_IF_ERROR(
        join_comb(defer, ffn(l, st.tokens, T, hp.y_bf16_only ? nullptr : s_.y.data(), hp.y_bf16, f_sum)));
    // f_sum.yp set: the MoE's combine inside hc_post (the same bits as the two)
    const bool last = l + 1 == cfg_.num_hidden_layers;
    if (!last) hp = site_params(l + 1, false, T, defer);
    DSI_OP("hc_post_ffn", l,
           post_site(last ? nullptr : &hp, T, f_sum.yp ? nullptr : s_.f.data(), f_sum.yp ? &f_sum : nullptr));
    DSI_RETURN_IF_ERROR(core_.capture_hidden(l, s_.X.data(), T));  // speculative decoding: the drafter's tapped layers
  }
  if (R > 0) {
    // sinkhorn_iters is unused at the head (no comb there) but must be valid.
    const HcDevice& hc = weights_.hc_head();
    const HcNormParams hh{hc.fn, hc.base, hc.scale, n, D, 1, float(cfg_.hc_eps), float(cfg_.rms_norm_eps), weights_.final_norm(),
                          batch_invariant_};
    DSI_OP("hc_head", -1, hc_head_norm(hh, s_.X.data(), rows, R, s_.hid.data(), stream_));
    DSI_OP("lm_head", -1, gemm(s_.hid.data(), R, D, weights_.head(), s_.logits.data(), V, false));
  }
  return Status::ok();
}

Status CudaForwardV4::ffn(int64_t l, const int32_t* tokens, int64_t T, const float* y, const uint16_t* y16,
                          ops::RoutedSum& f_sum) {
  const DeviceLayer& L = weights_.layer(l);
  const int64_t D = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  DSI_OP("router", l, gemm_x16(y, y16, T, D, L.gate, s_.router.data(), E));
  RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob;
  rp.norm_eps = num_.router_norm_eps;
  rp.route_scale = float(cfg_.routed_scaling_factor);
  rp.hash_vocab = L.tid2eid ? cfg_.vocab_size : 0;
  DSI_OP("router", l, route_cuda(s_.router.data(), T, L.gate_bias, L.tid2eid, tokens, rp, s_.ridx.data(), s_.rw.data(), stream_));
  // DP attention + EP: the routed pairs go to the experts' ranks and come back (expert_exchange_cuda.cpp).
  if (core_.dp_) return moe_exchange(l, y, T, s_.ridx.data(), s_.rw.data(), s_.f.data());
  // EP under --batch-invariant: every pair's expert output gathered exactly, the one-rank combine on every rank
  // (backends/cuda/parallel/expert_slots_cuda.cpp).
  if (ep_size_ > 1 && batch_invariant_) return moe_slots(l, y, T, s_.ridx.data(), s_.rw.data(), s_.f.data());
  // Expert parallelism (docs/multi_gpu.md): global top-k ids -> this rank's local ids, -1 (skipped) for the others';
  // after the MoE every rank holds its partial sum in s_.f, summed over the ranks in place (fp32).
  if (ep_size_ > 1) DSI_OP("moe_remap", l, core_.remap_experts(s_.ridx.data(), l, T, k));
  // one rank: the combine is left to hc_post_ffn (moe_cuda's defer) where DSINFER_MOE_COMBINE_IN_POST is not 0
  static const bool fuse = env_switch("DSINFER_MOE_COMBINE_IN_POST", {"0", "1"}) != "0";
  ops::RoutedSum* defer = ep_size_ == 1 && fuse ? &f_sum : nullptr;
  DSI_OP("moe", l, moe(y, T, s_.ridx.data(), s_.rw.data(), k, L, y16, defer));
  if (ep_size_ > 1) {
    if (!comm_) return Status::error("cuda runner: expert parallelism without a communicator");
    DSI_OP("moe_allreduce", l, comm_->all_reduce_sum(s_.f.data(), size_t(T * D), stream_));
    core_.traffic_.bytes += T * D * int64_t(sizeof(float));
    ++core_.traffic_.calls;
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
