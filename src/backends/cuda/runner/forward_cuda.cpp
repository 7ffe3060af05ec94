// CudaRunner's forward — the DeepSeek-V4 forward on the GPU, in the order of the CPU reference
// (model/deepseek_v4.cpp): embed -> per layer [hc_pre+attn_norm -> attention -> hc_post -> hc_pre+ffn_norm ->
// MoE -> hc_post] -> hc_head+norm -> head. Every op is named (timing for `dsinfer bench`). The attention block is
// attention_cuda.cpp; the scratch it all runs in is sized here.
#include <algorithm>

#include "backends/cuda/runner/cuda_runner_impl.h"
#include "cuda/cuda_common.h"
#include "ops/embed/embed_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/expert_remap_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

// Batch-invariant mode: a fixed split size (each token's partition from its own key count) and as many splits as
// the step's longest key list needs; fast mode with head_dim 512: the tensor-core kernel's count (one block per
// SM); otherwise (exact mode) a count for ~2 blocks per SM. The last two depend on T and max_pos.
int64_t CudaRunner::attention_splits(AttnType type, int64_t m, int64_t T, int64_t max_pos) const {
  const int64_t max_keys = cfg_.sliding_window + (type == AttnType::CSA   ? cfg_.index_topk
                                                  : type == AttnType::HCA ? (max_pos + 1) / std::max<int64_t>(m, 1)
                                                                          : 0);
  if (batch_invariant_) return sparse_attention_fixed_splits(max_keys, kAttnInvariantSplitKeys);
  if (!exact_ && sparse_attention_tc_supported(cfg_.head_dim))
    return sparse_attention_tc_splits(T, cfg_.num_attention_heads, max_keys, device_.multiprocessors);
  return sparse_attention_splits(T, cfg_.num_attention_heads, max_keys, device_.multiprocessors);
}

Status CudaRunner::ensure_scratch(int64_t T, int64_t R, int64_t max_visible, int64_t max_pos) {
  // Element counts; at least 64 elements (256 bytes) per buffer.
  auto grow = [&](auto& b, size_t n, const char* what) -> Status {
    if (b.size() >= n) return Status::ok();
    // Asynchronous steps: the step launched before may still use the old buffer; let it finish first.
    DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
    DSI_RETURN_IF_ERROR(b.alloc(std::max<size_t>(n, 64), what));
    ++scratch_gen_;  // captured graphs hold the old pointers
    return Status::ok();
  };
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, H = cfg_.num_attention_heads, hd = cfg_.head_dim;
  const int64_t Hi = std::max<int64_t>(cfg_.index_n_heads, 1), di = std::max<int64_t>(cfg_.index_head_dim, 1);
  const size_t t = size_t(T);
  DSI_RETURN_IF_ERROR(grow(s_.X, t * size_t(n * D), "residual streams"));
  DSI_RETURN_IF_ERROR(grow(s_.y, t * size_t(D), "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.f, t * size_t(D), "activations"));
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
  DSI_RETURN_IF_ERROR(grow(s_.rw, t * size_t(cfg_.num_experts_per_tok), "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.hid, size_t(R) * size_t(D), "final hidden"));
  DSI_RETURN_IF_ERROR(grow(s_.logits, size_t(R) * size_t(cfg_.vocab_size), "logits"));
  int64_t ws = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    ws = std::max(ws, sparse_attention_workspace_floats(T, H, hd, attention_splits(cfg_.layer_types[size_t(l)], cfg_.ratio(l), T, max_pos),
                                                        batch_invariant_));
  DSI_RETURN_IF_ERROR(grow(s_.attn_ws, size_t(ws) + 64, "attention workspace"));
  if (T > s_.tokens) {
    DSI_RETURN_IF_ERROR(moe_ws_.reserve(T, cfg_.num_experts_per_tok, D, cfg_.moe_intermediate_size, cfg_.n_routed_experts));
    s_.tokens = T;
    ++scratch_gen_;
  }
  return Status::ok();
}

// GEMMs and the MoE in exact mode run in chunks small enough for the fp32 CUDA-core kernels (the tensor-core
// path rounds operands to bf16); check-reference uses it to test every other kernel at fp32 precision (and every
// row's sums are then independent of M: batch-invariant as they are). Batch-invariant mode otherwise takes
// GemmPrecision::kBatchInvariant (kernel and K split per weight; never cuBLASLt, whose algorithm depends on M).
// Otherwise GEMMs that GemmLtEngine::wants (FP8 weights at M >= gemm_lt_min_rows(), BF16 / F32 weights - the lm
// head, the compressors' wkv - at M >= kGemmLtMinMDense) run on cuBLASLt: block-scaled FP8 with the activations
// quantized 1x128 like official act_quant, in two terms by default, or bf16 with fp32 accumulation
// (gemm_lt_cuda.h); smaller FP8 GEMMs take GemmPrecision::kBf16 where gemm_stream_preferred says so (the GEMV
// kernel at M <= kGemmGemvMaxM, FP8 or BF16; the bf16 streaming kernel where it measured faster).
// The engine's one-time setup (weight scales, buffers for s_.tokens rows) runs on every eager call, so each weight
// is ready before a decode graph captures it; any engine error falls back to gemm_cuda (the runner never
// accumulates here, so even a half-done call is overwritten).
GemmPrecision CudaRunner::gemm_precision(int64_t M, int64_t N) const {
  if (exact_) return GemmPrecision::kFp32SmallM;
  if (batch_invariant_) return GemmPrecision::kBatchInvariant;
  return gemm_stream_preferred(M, N) ? GemmPrecision::kBf16 : GemmPrecision::kFp32SmallM;
}

Status CudaRunner::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool acc) {
  if (use_lt_ && !exact_ && !batch_invariant_ && GemmLtEngine::supports(w) &&
      lt_.prepare(w, std::max(M, s_.tokens), stream_).is_ok() && GemmLtEngine::wants(w, M) &&
      lt_.gemm(x, M, ldx, w, y, ldy, acc, stream_).is_ok())
    return Status::ok();
  const int64_t chunk = exact_ ? kGemmSkinnyMaxM : M;
  const GemmPrecision prec = gemm_precision(M, w.rows);
  for (int64_t r = 0; r < M; r += std::max<int64_t>(chunk, 1))
    DSI_RETURN_IF_ERROR(gemm_cuda(x + r * ldx, std::min(chunk, M - r), ldx, w, y + r * ldy, ldy, acc, stream_, prec));
  return Status::ok();
}

// A grouped FP8 weight whose groups are whole 128-row scale blocks (wo_a) through cuBLASLt, one call per group on
// a view of the group's rows (its own prepared scales): measured on the H200 (bench/NOTES.md wave 5) the default
// kernels ran wo_a at 12x its floor for M >= 64, but one cuBLASLt call per group costs more below prefill sizes
// (V4-Flash, 4 layers: 9.4 -> 6.4 ms at M = 4096, 0.49 -> 1.18 ms at M = 64), hence kGroupedLtMinM. Any error
// before the first launch leaves y untouched and the caller takes the kernels; the groups are independent, so a
// later fallback simply recomputes every group.
constexpr int64_t kGroupedLtMinM = 1024;

Status CudaRunner::gemm_grouped_lt(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                   int64_t groups, float* y, int64_t ldy, int64_t yg) {
  if (w.fmt != WeightFormat::FP8_BLOCK || groups <= 1 || w.rows % groups != 0 || (w.rows / groups) % w.block_n != 0)
    return Status::error("grouped cuBLASLt: not an FP8 weight of whole scale-block groups");
  const int64_t ng = w.rows / groups, kb = (w.cols + w.block_k - 1) / w.block_k;
  for (int64_t g = 0; g < groups; ++g) {
    DeviceWeight v = w;
    v.rows = ng;
    v.data = static_cast<const uint8_t*>(w.data) + g * ng * w.cols;
    v.scale = static_cast<const uint8_t*>(w.scale) + (g * ng / w.block_n) * kb * (w.scale_e8m0 ? 1 : 4);
    if (!GemmLtEngine::supports(v) || !GemmLtEngine::wants(v, M))
      return Status::error("grouped cuBLASLt: shape not taken by the engine");
    DSI_RETURN_IF_ERROR(lt_.prepare(v, std::max(M, s_.tokens), stream_));
    DSI_RETURN_IF_ERROR(lt_.gemm(x + g * xg, M, ldx, v, y + g * yg, ldy, false, stream_));
  }
  return Status::ok();
}

Status CudaRunner::gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w, int64_t groups,
                                float* y, int64_t ldy, int64_t yg) {
  // The streaming kernel measured slower than the default kernels for the grouped wo_a at every M
  // (gemm_stream_preferred): grouped GEMMs keep the default path (the tiled kernel in batch-invariant mode), except
  // the fast path's GEMV range (gemm_gemv_preferred), where kBf16 takes the GEMV kernel.
  if (use_lt_ && !exact_ && !batch_invariant_ && M >= kGroupedLtMinM &&
      gemm_grouped_lt(x, M, ldx, xg, w, groups, y, ldy, yg).is_ok())
    return Status::ok();
  const int64_t chunk = exact_ ? kGemmSkinnyMaxM : M;
  const GemmPrecision prec = exact_             ? GemmPrecision::kFp32SmallM
                             : batch_invariant_ ? GemmPrecision::kBatchInvariant
                             : gemm_gemv_preferred(M, w.rows / groups, true) ? GemmPrecision::kBf16
                                                      : GemmPrecision::kFp32SmallM;
  for (int64_t r = 0; r < M; r += std::max<int64_t>(chunk, 1))
    DSI_RETURN_IF_ERROR(gemm_grouped_cuda(x + r * ldx, std::min(chunk, M - r), ldx, xg, w, groups, y + r * ldy, ldy, yg,
                                          stream_, prec));
  return Status::ok();
}

Status CudaRunner::moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k, const DeviceLayer& L) {
  const MoeExpertsDevice& e = L.experts;
  const float limit = float(cfg_.swiglu_limit), shared_limit = num_.shared_expert_clamp ? limit : 0.0f;
  // Exact: moe_cuda takes the fp32 path for the routed experts when T * topk <= 8 * experts, and its shared
  // expert is a plain GEMM of T rows (fp32 path for T <= kGemmSkinnyMaxM). Otherwise the fast grouped FP4 kernels
  // (bf16 activations): moe_cuda takes the decode kernels up to kMoeGroupedMinT tokens (each touched expert read
  // once per 8 of its rows), beyond the grouped tensor-core prefill GEMMs (moe_grouped.cu, same numerics).
  // Batch-invariant: MoePath::Invariant for every T (the fast kernels in chunks of kMoeFastMaxT tokens, whose
  // per-token sums do not depend on the chunk; else the tiled GEMMs).
  constexpr int64_t kMoeFastMaxT = 1024;
  const MoePath path = exact_ ? MoePath::Exact : batch_invariant_ ? MoePath::Invariant : MoePath::Fast;
  const int64_t chunk =
      exact_ ? std::max<int64_t>(1, std::min<int64_t>(kGemmSkinnyMaxM, 8 * e.experts / std::max<int64_t>(k, 1)))
      : batch_invariant_ ? kMoeFastMaxT
                         : T;
  const int64_t D = e.dim;
  float* out = s_.f.data();
  for (int64_t r = 0; r < T; r += chunk) {
    const int64_t n = std::min(chunk, T - r);
    // Expert parallelism: the shared expert on rank 0 only (the all-reduce adds it to every rank's sum once).
    DSI_RETURN_IF_ERROR(moe_cuda(x + r * D, n, idx + r * k, w + r * k, k, e, L.has_shared && ep_rank_ == 0 ? &L.shared : nullptr,
                                 limit, shared_limit, out + r * D, moe_ws_, stream_, path));
  }
  return Status::ok();
}

Status CudaRunner::run_forward(const ops::StepDevice& st, const int32_t* rows, int64_t R) {
  const int64_t T = st.T, V = cfg_.vocab_size, D = cfg_.hidden_size, n = cfg_.hc_mult;
  const DeviceWeight& emb = weights_.embed();
  DSI_OP("embed", -1, embed(emb.data, emb.fmt == WeightFormat::BF16 ? EmbedDType::BF16 : EmbedDType::F32, V, D, st.tokens, T, n,
                            s_.X.data(), stream_));
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const DeviceLayer& L = weights_.layer(l);
    HcNormParams hp{L.hc_attn.fn, L.hc_attn.base, L.hc_attn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps),
                    float(cfg_.rms_norm_eps), L.attn_norm, batch_invariant_};
    DSI_OP("hc_pre_attn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    DSI_RETURN_IF_ERROR(attention(l, st));
    DSI_OP("hc_post_attn", l, hc_post(T, n, D, s_.f.data(), s_.post.data(), s_.comb.data(), s_.X.data(), stream_));
    hp = {L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps),
          float(cfg_.rms_norm_eps), L.ffn_norm, batch_invariant_};
    DSI_OP("hc_pre_ffn", l, hc_pre_norm(hp, s_.X.data(), T, s_.y.data(), s_.post.data(), s_.comb.data(), stream_));
    DSI_RETURN_IF_ERROR(ffn(l, st.tokens, T));
    DSI_OP("hc_post_ffn", l, hc_post(T, n, D, s_.f.data(), s_.post.data(), s_.comb.data(), s_.X.data(), stream_));
    DSI_RETURN_IF_ERROR(capture_hidden(l, T));  // speculative decoding: the drafter's tapped layers
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

Status CudaRunner::ffn(int64_t l, const int32_t* tokens, int64_t T) {
  const DeviceLayer& L = weights_.layer(l);
  const int64_t D = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  DSI_OP("router", l, gemm(s_.y.data(), T, D, L.gate, s_.router.data(), E, false));
  RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob;
  rp.norm_eps = num_.router_norm_eps;
  rp.route_scale = float(cfg_.routed_scaling_factor);
  rp.hash_vocab = L.tid2eid ? cfg_.vocab_size : 0;
  DSI_OP("router", l, route_cuda(s_.router.data(), T, L.gate_bias, L.tid2eid, tokens, rp, s_.ridx.data(), s_.rw.data(), stream_));
  // Expert parallelism (docs/multi_gpu.md): global top-k ids -> this rank's local ids, -1 (skipped) for the others';
  // after the MoE every rank holds its partial sum in s_.f, summed over the ranks in place (fp32).
  if (ep_size_ > 1) DSI_OP("moe_remap", l, remap_experts(l, T, k));
  DSI_OP("moe", l, moe(s_.y.data(), T, s_.ridx.data(), s_.rw.data(), k, L));
  if (ep_size_ > 1) {
    if (!comm_) return Status::error("cuda runner: expert parallelism without a communicator");
    DSI_OP("moe_allreduce", l, comm_->all_reduce_sum(s_.f.data(), size_t(T * D), stream_));
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
