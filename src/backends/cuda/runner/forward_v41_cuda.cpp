// CudaForwardV41's forward, in the order of the CPU reference (model/deepseek_v41.cpp): embed -> per layer [Engram
// -> mHC mixes + collapse with the carried pre -> attn_norm -> attention (attention_v41_cuda.cpp) -> mHC post ->
// mixes + collapse with the attention site's pre -> ffn_norm -> MoE -> mHC post] -> collapse with the last pre ->
// norm -> head. Every op is named (timing for `dsinfer bench`); the scratch it all runs in is sized here.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include "backends/cuda/runner/forward_v41.h"
#include "cuda/cuda_common.h"
#include "ops/embed/embed_cuda.h"
#include "ops/engram/engram_cuda.h"
#include "ops/gemm/gemm_official_cuda.h"
#include "ops/gemm/gemm_widen_cuda.h"
#include "ops/gemm/gemm_widen_plan.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;

int64_t CudaForwardV41::attention_splits(int64_t l, int64_t T) const {
  if (official()) return 1;  // the official kernel: one split per (token, head)
  const int64_t keys = cfg_.sliding_window + (cfg_.ratio(l) > 0 ? cfg_.index_topk : 0);
  return plan_sparse_attention(kernel_mode(), T, cfg_.num_attention_heads, cfg_.head_dim, keys, device_.multiprocessors)
      .num_splits;
}

// Scratch (CudaForward::grow: growing waits for queued work and drops the decode graphs). The index scores' stride
// follows max_pos, which a fixed-shape (graphed) step sets from max_model_len, so a replay's shapes never change.
Status CudaForwardV41::prepare(int64_t T, int64_t R, int64_t max_pos) {
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, H = cfg_.num_attention_heads, hd = cfg_.head_dim;
  const int64_t Hi = std::max<int64_t>(cfg_.index_n_heads, 1), di = std::max<int64_t>(cfg_.index_head_dim, 1);
  const auto& v = cfg_.v41;
  int64_t min_ratio = 0;  // the most entries any index source sees: (max_pos + 1) / its ratio
  for (int64_t l : v.index_source_layer_ids)
    if (l < cfg_.num_hidden_layers && cfg_.ratio(l) > 0) min_ratio = min_ratio ? std::min(min_ratio, cfg_.ratio(l)) : cfg_.ratio(l);
  const int64_t stride = std::max<int64_t>(1, min_ratio ? (max_pos + 1) / min_ratio : 1);
  const size_t t = size_t(T), st = t * size_t(stride);
  const int64_t ecols = v.engram_layer_ids.empty() ? 1 : (v.engram_max_ngram_size - 1) * v.engram_n_heads;
  const int64_t elayers = std::max<int64_t>(int64_t(v.engram_layer_ids.size()), 1);
  DSI_RETURN_IF_ERROR(grow(s_.X, t * size_t(n * D), "residual streams"));
  DSI_RETURN_IF_ERROR(grow(s_.y, t * size_t(D), "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.f, t * size_t(D), "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.post, t * size_t(n), "mHC post"));
  DSI_RETURN_IF_ERROR(grow(s_.comb, t * size_t(n * n), "mHC comb"));
  for (auto* b : {&s_.pre_a, &s_.pre0, &s_.pre1}) DSI_RETURN_IF_ERROR(grow(*b, t * size_t(n), "mHC pre"));
  if (s_.onehot.size() < t * size_t(n)) {  // the first site collapses stream 0 only
    DSI_RETURN_IF_ERROR(sync());
    ++scratch_gen_;
    // Every row of the buffer (it is at least 64 floats): a later step of more tokens reuses it without upload.
    std::vector<float> h(std::max<size_t>(t * size_t(n), 64), 0.0f);
    for (size_t i = 0; i < h.size() / size_t(n); ++i) h[i * size_t(n)] = 1.0f;
    DSI_RETURN_IF_ERROR(s_.onehot.upload(h.data(), h.size(), "mHC one-hot pre"));
  }
  DSI_RETURN_IF_ERROR(grow(s_.cq, t * size_t(cfg_.q_lora_rank), "q latent"));
  DSI_RETURN_IF_ERROR(grow(s_.q, t * size_t(H * hd), "q"));
  for (auto* b : {&s_.kv, &s_.ckv, &s_.cg, &s_.latent}) DSI_RETURN_IF_ERROR(grow(*b, t * size_t(hd), "kv"));
  DSI_RETURN_IF_ERROR(grow(s_.key, t * size_t(di), "indexer keys"));
  DSI_RETURN_IF_ERROR(grow(s_.iq, t * size_t(Hi * di), "indexer q"));
  DSI_RETURN_IF_ERROR(grow(s_.iw, t * size_t(Hi), "indexer weights"));
  DSI_RETURN_IF_ERROR(grow(s_.scores, st, "indexer scores"));
  DSI_RETURN_IF_ERROR(grow(s_.blk, st, "candidate blocks"));
  DSI_RETURN_IF_ERROR(grow(s_.mask, st, "candidate mask"));
  DSI_RETURN_IF_ERROR(grow(s_.mask_n, t, "candidate mask"));
  DSI_RETURN_IF_ERROR(grow(s_.sel, t * size_t(std::max<int64_t>(cfg_.index_topk, 1)), "indexer selection"));
  DSI_RETURN_IF_ERROR(grow(s_.o, t * size_t(H * hd), "attention output"));
  DSI_RETURN_IF_ERROR(grow(s_.mid, t * size_t(cfg_.o_groups * cfg_.o_lora_rank), "output projection"));
  DSI_RETURN_IF_ERROR(grow(s_.router, t * size_t(cfg_.n_routed_experts), "router logits"));
  DSI_RETURN_IF_ERROR(grow(s_.ridx, t * size_t(cfg_.num_experts_per_tok), "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.rw, t * size_t(cfg_.num_experts_per_tok), "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.hashes, t * size_t(elayers * ecols), "engram hashes"));
  const size_t erow_layers = tables_on_host() ? size_t(elayers) : 1;  // the host placement fetches every layer at once
  DSI_RETURN_IF_ERROR(grow(s_.erows, erow_layers * t * size_t(ecols * std::max<int64_t>(v.engram_head_dim, 1)), "engram rows"));
  DSI_RETURN_IF_ERROR(grow(s_.ekv, t * size_t((n + 1) * D), "engram kv"));
  DSI_RETURN_IF_ERROR(grow(s_.hid, size_t(R) * size_t(D), "final hidden"));
  DSI_RETURN_IF_ERROR(grow(s_.logits, size_t(R) * size_t(cfg_.vocab_size), "logits"));
  if (official()) DSI_RETURN_IF_ERROR(grow(s_.pairs, st, "indexer selection pairs"));
  int64_t ws = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    ws = std::max(ws, sparse_attention_workspace_floats(T, H, hd, attention_splits(l, T), batch_invariant_));
  DSI_RETURN_IF_ERROR(grow(s_.attn_ws, size_t(ws) + 64, "attention workspace"));
  s_.stride = stride;
  DSI_RETURN_IF_ERROR(prepare_gemm(T));
  if (T > s_.tokens) {
    DSI_RETURN_IF_ERROR(sync());
    DSI_RETURN_IF_ERROR(moe_ws_.reserve(T, cfg_.num_experts_per_tok, D, cfg_.moe_intermediate_size, cfg_.n_routed_experts));
    s_.tokens = T;
    ++scratch_gen_;
  }
  return Status::ok();
}

// The fast mode's GEMM set-up: the settings and the cuBLASLt engine once, and, from the first step of
// GemmSettings::lt_min_m tokens on, the bf16 scratch for the largest FP8 weight gemm() widens (gemm_widen_plan.h).
Status CudaForwardV41::prepare_gemm(int64_t T) {
  if (!lt_) {
    DSI_ASSIGN_OR_RETURN(gemm_settings_, gemm_settings_from_env());
    lt_.emplace(gemm_settings_.lt_activations, gemm_settings_.lt_stack);
  }
  int64_t elems = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const DeviceLayerV41& L = weights_.layer(l);
    for (const DeviceWeight* w : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_b, &L.idx_wq_b, &L.engram_wkv})
      if (gemm_widen_wants(*w, T, kernel_mode(), gemm_settings_)) elems = std::max(elems, w->rows * w->cols);
  }
  return elems > 0 ? grow(widened_, size_t(elems), "widened FP8 weight") : Status::ok();
}

// Kernel choice: ops/gemm/gemm_plan.h plan_gemm_call (exact: chunks of kGemmSkinnyMaxM rows on the fp32 kernel;
// batch-invariant: the invariant kernels; fast: cuBLASLt where it takes the weight, else the GEMV / streaming
// kernels), plus, in the fast mode, the widened FP8 weights of gemm_widen_plan.h on cuBLASLt's bf16 GEMM. The
// engine's one-time setup runs on every eager call, so each weight is ready before a decode graph captures it; any
// engine error falls back to gemm_cuda (nothing accumulates here, so a half-done call is overwritten).
Status CudaForwardV41::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy) {
  const GemmCallPlan p = plan_gemm_call(w, M, kernel_mode(), gemm_settings_);
  const int64_t rows = std::max(M, s_.tokens);
  if (p.lt_prepare && lt_->prepare(w, rows, stream_).is_ok() && p.lt && lt_->gemm(x, M, ldx, w, y, ldy, false, stream_).is_ok())
    return Status::ok();
  if (gemm_widen_wants(w, M, kernel_mode(), gemm_settings_) && int64_t(widened_.size()) >= w.rows * w.cols) {
    const Result<DeviceWeight> v = widen_fp8_bf16(w, widened_.data(), int64_t(widened_.size()), stream_);
    if (v.is_ok() && lt_->prepare(v.value(), rows, stream_).is_ok() &&
        lt_->gemm(x, M, ldx, v.value(), y, ldy, false, stream_).is_ok())
      return Status::ok();
  }
  const int64_t chunk = p.chunk_rows;
  for (int64_t r = 0; r < M; r += chunk)
    DSI_RETURN_IF_ERROR(gemm_cuda(x + r * ldx, std::min(chunk, M - r), ldx, w, y + r * ldy, ldy, false, stream_,
                                  p.precision));
  return Status::ok();
}

// wo_a: plan_gemm_grouped_call's kernels, or one cuBLASLt call per BF16 group (gemm_grouped_bf16_lt_wants). The
// groups are independent, so a fallback after an engine error simply recomputes every group.
Status CudaForwardV41::gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                    int64_t groups, float* y, int64_t ldy, int64_t yg) {
  if (gemm_grouped_bf16_lt_wants(w, groups, M, kernel_mode(), gemm_settings_)) {
    Status st = Status::ok();
    for (int64_t g = 0; g < groups && st.is_ok(); ++g) {
      const DeviceWeight v = gemm_group_view_bf16(w, groups, g);
      st = lt_->prepare(v, std::max(M, s_.tokens), stream_);
      if (st.is_ok()) st = lt_->gemm(x + g * xg, M, ldx, v, y + g * yg, ldy, false, stream_);
    }
    if (st.is_ok()) return Status::ok();
  }
  const GemmCallPlan p = plan_gemm_grouped_call(w, groups, M, kernel_mode(), gemm_settings_);
  const int64_t chunk = p.chunk_rows;
  for (int64_t r = 0; r < M; r += chunk)
    DSI_RETURN_IF_ERROR(gemm_grouped_cuda(x + r * ldx, std::min(chunk, M - r), ldx, xg, w, groups, y + r * ldy, ldy, yg,
                                          stream_, p.precision));
  return Status::ok();
}

Status CudaForwardV41::linear(model::v41::Gemm g, const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y,
                              int64_t ldy) {
  using model::v41::Gemm;
  if (!official()) return gemm(x, M, ldx, w, y, ldy);
  const OfficialGemm mode = g == Gemm::F32 ? OfficialGemm::kF32 : g == Gemm::BF16 ? OfficialGemm::kBf16
                                                                                  : OfficialGemm::kQuantized;
  return gemm_official_cuda(x, M, ldx, w, y, ldy, mode, stream_);
}

Status CudaForwardV41::round(float* x, int64_t rows, int64_t ld, int64_t c0, int64_t c1) {
  return official() ? round_bf16_cuda(x, rows, ld, c0, c1, stream_) : Status::ok();
}

Status CudaForwardV41::dump(const char* name, int64_t l, const void* d, int64_t rows, int64_t cols, int64_t ld, bool i32) {
  if (dump_path_.empty() || rows <= 0 || cols <= 0) return Status::ok();
  const auto st = static_cast<cudaStream_t>(stream_);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  DSI_CUDA_TRY(cudaStreamIsCapturing(st, &cap));
  if (cap != cudaStreamCaptureStatusNone) return Status::ok();  // a graph capture cannot wait for a copy
  std::vector<float> h(size_t(rows * cols));
  DSI_CUDA_TRY(cudaMemcpy2DAsync(h.data(), size_t(cols) * 4, d, size_t(ld ? ld : cols) * 4, size_t(cols) * 4, size_t(rows),
                                 cudaMemcpyDeviceToHost, st));
  DSI_CUDA_TRY(cudaStreamSynchronize(st));
  std::ofstream f(dump_path_, std::ios::binary | std::ios::app);
  char head[48] = {};
  std::strncpy(head, name, sizeof(head) - 1);
  const int32_t meta[2] = {int32_t(l), i32 ? 1 : 0};
  const int64_t shape[2] = {rows, cols};
  f.write("V41D", 4);
  f.write(head, sizeof(head));
  f.write(reinterpret_cast<const char*>(meta), sizeof(meta));
  f.write(reinterpret_cast<const char*>(shape), sizeof(shape));
  f.write(reinterpret_cast<const char*>(h.data()), std::streamsize(h.size() * 4));
  if (!f) return Status::errorf("DSINFER_V41_DUMP: cannot append to {}", dump_path_);
  return Status::ok();
}

Status CudaForwardV41::run(const ops::StepDevice& st, const int32_t* rows, int64_t R) {
  const int64_t T = st.T, V = cfg_.vocab_size, D = cfg_.hidden_size, n = cfg_.hc_mult;
  const float eps = float(cfg_.rms_norm_eps);
  const DeviceWeight& emb = weights_.embed();
  DSI_OP("embed", -1, embed(emb.data, emb.fmt == WeightFormat::BF16 ? EmbedDType::BF16 : EmbedDType::F32, V, D, st.tokens,
                              T, n, s_.X.data(), stream_));
  DSI_OP("embed", -1, round(s_.X.data(), T * n, D, 0, D));
  DSI_RETURN_IF_ERROR(dump("embed", -1, s_.X.data(), T, n * D));
  if (!cfg_.v41.engram_layer_ids.empty()) {
    DSI_OP("engram_hash", -1, engram_hash(st, hash_, s_.hashes.data(), stream_));
    DSI_OP("engram_hash", -1, engram_history_write(st, hash_, stream_));
    if (tables_on_host()) DSI_RETURN_IF_ERROR(fetch_engram_rows(st));
  }
  const float* pre = s_.onehot.data();  // the carried pre; site outputs never alias their input
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const DeviceLayerV41& L = weights_.layer(l);
    if (L.engram) DSI_RETURN_IF_ERROR(engram(l, st));
    DSI_RETURN_IF_ERROR(dump("residual", l, s_.X.data(), T, n * D));
    // speculative decoding: a V4.1 tap of layer l is the block's input after the Engram (speculative/drafter.h)
    DSI_RETURN_IF_ERROR(core_.capture_hidden(l, s_.X.data(), T));
    HcNormParams hp{L.hc_attn.fn, L.hc_attn.base, L.hc_attn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), eps, L.attn_norm,
                    batch_invariant_};
    hp.pre_in = pre;
    hp.pre_out = s_.pre_a.data();
    hp.round_bf16 = official();
    DSI_OP("hc_pre_attn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    DSI_RETURN_IF_ERROR(dump("attn.in", l, s_.y.data(), T, D));
    DSI_RETURN_IF_ERROR(attention(l, st));
    DSI_OP("hc_post_attn", l, hc_post(T, n, D, s_.f.data(), s_.post.data(), s_.comb.data(), s_.X.data(), stream_,
                                      official()));  // + the bf16 rounding of the streams
    DSI_RETURN_IF_ERROR(dump("attn_out", l, s_.f.data(), T, D));
    float* next = (l % 2 ? s_.pre1 : s_.pre0).data();
    hp = {L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), eps, L.ffn_norm,
          batch_invariant_};
    hp.pre_in = s_.pre_a.data();
    hp.pre_out = next;
    hp.round_bf16 = official();
    DSI_OP("hc_pre_ffn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    DSI_RETURN_IF_ERROR(dump("ffn.in", l, s_.y.data(), T, D));
    DSI_RETURN_IF_ERROR(ffn(l, st));
    DSI_RETURN_IF_ERROR(dump("ffn_out", l, s_.f.data(), T, D));
    DSI_OP("hc_post_ffn", l, hc_post(T, n, D, s_.f.data(), s_.post.data(), s_.comb.data(), s_.X.data(), stream_,
                                      official()));  // + the bf16 rounding of the streams
    DSI_RETURN_IF_ERROR(dump("streams_out", l, s_.X.data(), T, n * D));
    DSI_RETURN_IF_ERROR(dump("pre_out", l, next, T, n));
    pre = next;
  }
  if (R > 0) {
    DSI_OP("final_collapse", -1, hc_collapse_norm(s_.X.data(), pre, rows, R, n, D, weights_.final_norm(), eps, s_.hid.data(),
                                                    stream_, official()));
    DSI_RETURN_IF_ERROR(dump("final_hidden", -1, s_.hid.data(), R, D));
    DSI_OP("lm_head", -1, gemm(s_.hid.data(), R, D, weights_.head(), s_.logits.data(), V));
  }
  return Status::ok();
}

// Engram before layer l: table rows of the token's hash ids -> wkv -> n keys + a shared value -> per-stream gate.
Status CudaForwardV41::engram(int64_t l, const ops::StepDevice& st) {
  const DeviceLayerV41& L = weights_.layer(l);
  const int64_t T = st.T, n = cfg_.hc_mult, D = cfg_.hidden_size, e = cfg_.engram_index(l);
  const int64_t cols = hash_.cols(), hd = cfg_.v41.engram_head_dim;
  float* rows = s_.erows.data();
  if (tables_on_host()) {
    rows += e * T * cols * hd;  // fetched by fetch_engram_rows
    DSI_OP("engram_fetch_wait", l, fetch_[size_t(e)].join(stream_));
  } else {
    DSI_OP("engram_lookup", l, engram_gather(s_.hashes.data(), T, hash_.layers, e, cols, L.engram_table, rows, stream_));
  }
  DSI_OP("engram_lookup", l, round(rows, T, cols * hd, 0, cols * hd));
  DSI_OP("engram_wkv", l, linear(model::v41::Gemm::FP8, rows, T, cols * hd, L.engram_wkv, s_.ekv.data(), (n + 1) * D));
  DSI_OP("engram_gate", l, engram_gate(s_.X.data(), T, n, D, s_.ekv.data(), L.engram_qk, float(cfg_.rms_norm_eps), stream_));
  DSI_OP("engram_gate", l, round(s_.X.data(), T * n, D, 0, D));
  DSI_RETURN_IF_ERROR(dump("engram.kv", l, s_.ekv.data(), T, (n + 1) * D));
  DSI_RETURN_IF_ERROR(dump("engram_streams_out", l, s_.X.data(), T, n * D));
  return Status::ok();
}

// MoE: router logits (gate already divided by gate_temp) -> top-k of scores + bias, +1e-20 renorm -> experts and
// the clamped shared expert. Exact mode keeps T * topk <= 8 * experts per call (fp32 expert kernels).
Status CudaForwardV41::ffn(int64_t l, const ops::StepDevice& st) {
  const DeviceLayerV41& L = weights_.layer(l);
  const int64_t T = st.T, D = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  // Official numerics: the router logits summed in double like route_ref (the routing weight is inside the
  // SwiGLU's bf16 rounding, so an fp32 ulp here moves a rounded value); otherwise the plain GEMM.
  DSI_OP("router", l, linear(model::v41::Gemm::F32, s_.y.data(), T, D, L.gate, s_.router.data(), E));
  RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob && k > 1;
  rp.norm_eps = 1e-20f;
  rp.route_scale = float(cfg_.routed_scaling_factor);
  DSI_OP("router", l, route_cuda(s_.router.data(), T, L.gate_bias, nullptr, st.tokens, rp, s_.ridx.data(), s_.rw.data(), stream_));
  DSI_RETURN_IF_ERROR(dump("ffn.ridx", l, s_.ridx.data(), T, k, 0, true));
  DSI_RETURN_IF_ERROR(dump("ffn.rw", l, s_.rw.data(), T, k));
  // DP attention + EP: the routed pairs go to the experts' ranks and come back (expert_exchange_cuda.cpp).
  if (core_.dp_) return moe_exchange(l, s_.y.data(), T, s_.ridx.data(), s_.rw.data(), s_.f.data());
  // EP under --batch-invariant: every pair's expert output gathered exactly, the one-rank combine on every rank
  // (backends/cuda/parallel/expert_slots_cuda.cpp), as V4's ffn. Official numerics never get here with several ranks
  // (cuda_numerics_refusal).
  if (ep_size_ > 1 && batch_invariant_) return moe_slots(l, s_.y.data(), T, s_.ridx.data(), s_.rw.data(), s_.f.data());
  // Expert parallelism (docs/multi_gpu.md): global top-k ids -> this rank's local slots (-1: another rank's), the
  // shared expert on rank 0 only, the partial sums added over the ranks in place after the MoE.
  if (ep_size_ > 1) DSI_OP("moe_remap", l, core_.remap_experts(s_.ridx.data(), l, T, k));
  const float limit = float(cfg_.swiglu_limit);
  const MoePath path = moe_path(kernel_mode(), T);  // ops/moe/moe_plan.h
  const int64_t chunk = moe_chunk_tokens(kernel_mode(), T, L.experts.experts, k);
  for (int64_t r = 0; r < T; r += chunk) {
    const int64_t m = std::min(chunk, T - r);
    const MoeSharedDevice* shared = ep_rank_ == 0 ? &L.shared : nullptr;
    if (official()) {
      DSI_OP("moe", l, moe_official_cuda(s_.y.data() + r * D, m, s_.ridx.data() + r * k, s_.rw.data() + r * k, k,
                                         L.experts, shared, limit, s_.f.data() + r * D, moe_ws_, stream_));
      continue;
    }
    DSI_OP("moe", l, moe_cuda(s_.y.data() + r * D, m, s_.ridx.data() + r * k, s_.rw.data() + r * k, k, L.experts,
                              shared, limit, limit, s_.f.data() + r * D, moe_ws_, stream_, path));
  }
  if (ep_size_ > 1) {
    if (!comm_) return Status::error("cuda runner: expert parallelism without a communicator");
    DSI_OP("moe_allreduce", l, comm_->all_reduce_sum(s_.f.data(), size_t(T * D), stream_));
    core_.traffic_.bytes += T * D * int64_t(sizeof(float));
    ++core_.traffic_.calls;
  }
  return Status::ok();
}

// The host placement: each Engram layer's rows are read from pinned host memory over PCIe by the same gather
// kernel (the table pointers are host memory the GPU addresses directly), on that layer's side stream, forked from
// the main stream once the hashes exist. The lookups depend only on the step's token ids, so the embedding and the
// layers before each Engram layer run meanwhile (docs/decisions.md 2026-12-02 "Engram placements").
Status CudaForwardV41::fetch_engram_rows(const ops::StepDevice& st) {
  const int64_t T = st.T, cols = hash_.cols(), hd = cfg_.v41.engram_head_dim;
  const auto& ids = cfg_.v41.engram_layer_ids;
  if (fetch_.size() != ids.size()) return Status::error("engram fetch: the side streams were not created at load");
  for (size_t e = 0; e < ids.size(); ++e) {
    ops::cuda::MoeSideStream& f = fetch_[e];
    DSI_RETURN_IF_ERROR(f.fork(stream_));
    DSI_RETURN_IF_ERROR(engram_gather(s_.hashes.data(), T, hash_.layers, int64_t(e), cols, weights_.layer(ids[e]).engram_table,
                                      s_.erows.data() + int64_t(e) * T * cols * hd, f.stream()));
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
