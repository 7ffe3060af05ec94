// CudaRunner::step — the DeepSeek-V4 forward on the GPU, in the order of the CPU reference
// (model/deepseek_v4.cpp): embed -> per layer [hc_pre+attn_norm -> attention -> hc_post -> hc_pre+ffn_norm ->
// MoE -> hc_post] -> hc_head+norm -> head. Every op is named (timing for `dsinfer bench`).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/cuda_common.h"
#include "ops/compressor/compressor_cuda.h"
#include "ops/embed/embed_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/step_cuda.h"
#include "backends/cuda/cuda_runner_impl.h"
#include "backends/cuda/elementwise_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

namespace {
template <typename T>
T* ptr(const dsinfer::cuda::DeviceBuffer<uint8_t>& b) {
  return b.as<T>();
}
}  // namespace

int64_t CudaRunner::attention_splits(AttnType type, int64_t m, int64_t T, int64_t max_pos) const {
  const int64_t max_keys = cfg_.sliding_window + (type == AttnType::CSA   ? cfg_.index_topk
                                                  : type == AttnType::HCA ? (max_pos + 1) / std::max<int64_t>(m, 1)
                                                                          : 0);
  return sparse_attention_splits(T, cfg_.num_attention_heads, max_keys, device_.multiprocessors);
}

Status CudaRunner::ensure_scratch(int64_t T, int64_t R, int64_t max_visible, int64_t max_pos) {
  auto grow = [&](cuda::DeviceBuffer<uint8_t>& b, size_t bytes, const char* what) -> Status {
    if (b.bytes() >= bytes) return Status::ok();
    DSI_RETURN_IF_ERROR(b.alloc(std::max<size_t>(bytes, 256), what));
    ++scratch_gen_;  // captured graphs hold the old pointers
    return Status::ok();
  };
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, H = cfg_.num_attention_heads, hd = cfg_.head_dim;
  const int64_t Hi = std::max<int64_t>(cfg_.index_n_heads, 1), di = std::max<int64_t>(cfg_.index_head_dim, 1);
  const size_t t = size_t(T), f = 4;
  DSI_RETURN_IF_ERROR(grow(s_.X, t * size_t(n * D) * f, "residual streams"));
  DSI_RETURN_IF_ERROR(grow(s_.y, t * size_t(D) * f, "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.f, t * size_t(D) * f, "activations"));
  DSI_RETURN_IF_ERROR(grow(s_.post, t * size_t(n) * f, "mHC post"));
  DSI_RETURN_IF_ERROR(grow(s_.comb, t * size_t(n * n) * f, "mHC comb"));
  DSI_RETURN_IF_ERROR(grow(s_.cq, t * size_t(cfg_.q_lora_rank) * f, "q latent"));
  DSI_RETURN_IF_ERROR(grow(s_.q, t * size_t(H * hd) * f, "q"));
  DSI_RETURN_IF_ERROR(grow(s_.kv, t * size_t(hd) * f, "kv"));
  DSI_RETURN_IF_ERROR(grow(s_.ckv, t * size_t(2 * hd) * f, "compressor kv"));
  DSI_RETURN_IF_ERROR(grow(s_.cg, t * size_t(2 * hd) * f, "compressor gate"));
  DSI_RETURN_IF_ERROR(grow(s_.iq, t * size_t(Hi * di) * f, "indexer q"));
  DSI_RETURN_IF_ERROR(grow(s_.iw, t * size_t(Hi) * f, "indexer weights"));
  DSI_RETURN_IF_ERROR(grow(s_.ikv, t * size_t(2 * di) * f, "indexer kv"));
  DSI_RETURN_IF_ERROR(grow(s_.ig, t * size_t(2 * di) * f, "indexer gate"));
  DSI_RETURN_IF_ERROR(grow(s_.sel, t * size_t(std::max<int64_t>(cfg_.index_topk, 1)) * 4, "indexer selection"));
  DSI_RETURN_IF_ERROR(grow(s_.scores, size_t(indexer_scores_floats(T, std::max<int64_t>(max_visible, 1))) * f, "indexer scores"));
  DSI_RETURN_IF_ERROR(grow(s_.o, t * size_t(H * hd) * f, "attention output"));
  DSI_RETURN_IF_ERROR(grow(s_.mid, t * size_t(cfg_.o_groups * cfg_.o_lora_rank) * f, "output projection"));
  DSI_RETURN_IF_ERROR(grow(s_.router, t * size_t(cfg_.n_routed_experts) * f, "router logits"));
  DSI_RETURN_IF_ERROR(grow(s_.ridx, t * size_t(cfg_.num_experts_per_tok) * 4, "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.rw, t * size_t(cfg_.num_experts_per_tok) * f, "routing"));
  DSI_RETURN_IF_ERROR(grow(s_.hid, size_t(R) * size_t(D) * f, "final hidden"));
  DSI_RETURN_IF_ERROR(grow(s_.logits, size_t(R) * size_t(cfg_.vocab_size) * f, "logits"));
  int64_t ws = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    ws = std::max(ws, sparse_attention_workspace_floats(T, H, hd, attention_splits(cfg_.layer_types[size_t(l)], cfg_.ratio(l), T, max_pos)));
  DSI_RETURN_IF_ERROR(grow(s_.attn_ws, size_t(ws) * f + 256, "attention workspace"));
  if (T > s_.tokens) {
    DSI_RETURN_IF_ERROR(moe_ws_.reserve(T, cfg_.num_experts_per_tok, D, cfg_.moe_intermediate_size, cfg_.n_routed_experts));
    s_.tokens = T;
    ++scratch_gen_;
  }
  return Status::ok();
}

void CudaRunner::drop_graphs() {
  for (auto& [t, g] : graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  graphs_.clear();
}

Status CudaRunner::mark(const char* name, int64_t layer, bool begin) {
  if (!timing_) return Status::ok();
  auto key = std::make_pair(std::string(name), layer);
  auto it = events_.find(key);
  if (it == events_.end()) {
    cudaEvent_t a, b;
    DSI_CUDA_TRY(cudaEventCreate(&a));
    DSI_CUDA_TRY(cudaEventCreate(&b));
    it = events_.emplace(key, std::make_pair(static_cast<void*>(a), static_cast<void*>(b))).first;
  }
  if (begin) order_.push_back(key);
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(begin ? it->second.first : it->second.second),
                               static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

// GEMMs and the MoE in exact mode run in chunks small enough for the fp32 CUDA-core kernels (the tensor-core
// path rounds operands to bf16); check-reference uses it to test every other kernel at fp32 precision.
Status CudaRunner::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool acc,
                        void* stream) {
  const int64_t chunk = exact_ ? kGemmSkinnyMaxM : M;
  for (int64_t r = 0; r < M; r += std::max<int64_t>(chunk, 1))
    DSI_RETURN_IF_ERROR(gemm_cuda(x + r * ldx, std::min(chunk, M - r), ldx, w, y + r * ldy, ldy, acc, stream));
  return Status::ok();
}

Status CudaRunner::gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w, int64_t groups,
                                float* y, int64_t ldy, int64_t yg, void* stream) {
  const int64_t chunk = exact_ ? kGemmSkinnyMaxM : M;
  for (int64_t r = 0; r < M; r += std::max<int64_t>(chunk, 1))
    DSI_RETURN_IF_ERROR(gemm_grouped_cuda(x + r * ldx, std::min(chunk, M - r), ldx, xg, w, groups, y + r * ldy, ldy, yg, stream));
  return Status::ok();
}

Status CudaRunner::moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k, const MoeExpertsDevice& e,
                       const MoeSharedDevice* shared, float limit, float shared_limit, float* out, MoeWorkspace& ws,
                       void* stream) {
  // moe_cuda takes the fp32 path for the routed experts when T * topk <= 8 * experts, and its shared expert
  // is a plain GEMM of T rows (fp32 path for T <= kGemmSkinnyMaxM).
  const int64_t chunk =
      exact_ ? std::max<int64_t>(1, std::min<int64_t>(kGemmSkinnyMaxM, 8 * e.experts / std::max<int64_t>(k, 1))) : T;
  const int64_t D = e.dim;
  for (int64_t r = 0; r < T; r += chunk) {
    const int64_t n = std::min(chunk, T - r);
    DSI_RETURN_IF_ERROR(moe_cuda(x + r * D, n, idx + r * k, w + r * k, k, e, shared, limit, shared_limit, out + r * D, ws, stream));
  }
  return Status::ok();
}

Result<std::vector<engine::RunnerDiagnostics::OpTime>> CudaRunner::op_times() {
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  std::vector<OpTime> out;
  for (const auto& key : order_) {
    const auto& ev = events_.at(key);
    float ms = 0;
    DSI_CUDA_TRY(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(ev.first), static_cast<cudaEvent_t>(ev.second)));
    out.push_back({key.first, key.second, ms});
  }
  return out;
}

#define DSI_OP(name, layer, ...)                      \
  do {                                                \
    DSI_RETURN_IF_ERROR(mark(name, layer, true));     \
    DSI_RETURN_IF_ERROR(__VA_ARGS__);                 \
    DSI_RETURN_IF_ERROR(mark(name, layer, false));    \
  } while (0)

Status CudaRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  if (!slots_.data()) return Status::error("cuda runner: bind_state was not called");
  order_.clear();
  const int64_t T = plan.num_tokens(), S = plan.num_seqs(), R = plan.num_logits();
  const int64_t V = cfg_.vocab_size;
  if (T == 0) return Status::ok();
  // A decode step (one token per sequence, one logits row each) replays a CUDA graph of its batch size.
  const bool graph = graphs_enabled_ && !timing_ && max_model_len_ > 0 && T == S && R == S;
  // ---- upload the plan: one packed buffer, 16-byte aligned arrays ----
  int64_t stride = 1, max_pos = 0;
  for (const auto& s : plan.seqs) {
    stride = std::max<int64_t>(stride, int64_t(s.block_table.size()));
    max_pos = std::max<int64_t>(max_pos, s.start_pos + s.num_new_tokens - 1);
  }
  if (graph) {  // shapes fixed by max_model_len, so one graph serves every context length
    if (stride * layout_.block_size > max_model_len_ + layout_.block_size || max_pos >= max_model_len_)
      return Status::errorf("cuda runner: a sequence exceeds max_model_len {}", max_model_len_);
    stride = layout_.blocks_per_sequence(max_model_len_);
    max_pos = max_model_len_ - 1;
  }
  for (int32_t t : plan.token_ids)
    if (t < 0 || t >= V) return Status::errorf("cuda runner: token id {} outside the vocabulary [0, {})", t, V);
  size_t off = 0;
  auto reserve = [&](size_t bytes) {
    const size_t o = off;
    off = (off + bytes + 15) / 16 * 16;
    return o;
  };
  const size_t o_tok = reserve(size_t(T) * 4), o_pos = reserve(size_t(T) * 8), o_seq = reserve(size_t(T) * 4),
               o_cu = reserve(size_t(S + 1) * 4), o_start = reserve(size_t(S) * 8), o_slot = reserve(size_t(S) * 4),
               o_tab = reserve(size_t(S * stride) * 4), o_rows = reserve(size_t(std::max<int64_t>(R, 1)) * 4);
  if (plan_host_bytes_ < off) {
    if (plan_host_) cudaFreeHost(plan_host_);
    plan_host_ = nullptr;
    plan_host_bytes_ = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&plan_host_), std::max<size_t>(off, 4096)));
    plan_host_bytes_ = std::max<size_t>(off, 4096);
  }
  std::memset(plan_host_, 0, off);
  auto put = [&](size_t o, const void* src, size_t bytes) { std::memcpy(plan_host_ + o, src, bytes); };
  put(o_tok, plan.token_ids.data(), size_t(T) * 4);
  put(o_pos, plan.positions.data(), size_t(T) * 8);
  put(o_cu, plan.cu_seqlens.data(), size_t(S + 1) * 4);
  put(o_rows, plan.logits_token_index.data(), size_t(R) * 4);
  for (int64_t s = 0; s < S; ++s) {
    const scheduler::SeqPlan& sp = plan.seqs[size_t(s)];
    for (int32_t i = 0; i < sp.num_new_tokens; ++i) {
      const int32_t si = int32_t(s);
      put(o_seq + size_t(sp.token_offset + i) * 4, &si, 4);
    }
    put(o_start + size_t(s) * 8, &sp.start_pos, 8);
    put(o_slot + size_t(s) * 4, &sp.slot, 4);
    put(o_tab + size_t(s * stride) * 4, sp.block_table.data(), sp.block_table.size() * 4);
  }
  const int64_t max_visible = (max_pos + 1) / std::max<int64_t>(cfg_.csa_ratio, 1);
  DSI_RETURN_IF_ERROR(ensure_scratch(T, std::max<int64_t>(R, 1), max_visible, max_pos));
  if (s_.plan.bytes() < off) {
    DSI_RETURN_IF_ERROR(s_.plan.alloc(std::max<size_t>(off, 4096), "step plan"));
    ++scratch_gen_;
  }
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  DSI_CUDA_TRY(cudaMemcpyAsync(s_.plan.data(), plan_host_, off, cudaMemcpyHostToDevice, cs));
  uint8_t* base = ptr<uint8_t>(s_.plan);
  ops::StepDevice st;
  st.T = T;
  st.num_seqs = S;
  st.tokens = reinterpret_cast<const int32_t*>(base + o_tok);
  st.pos = reinterpret_cast<const int64_t*>(base + o_pos);
  st.seq_of_token = reinterpret_cast<const int32_t*>(base + o_seq);
  st.cu_seqlens = reinterpret_cast<const int32_t*>(base + o_cu);
  st.start_pos = reinterpret_cast<const int64_t*>(base + o_start);
  st.slot = reinterpret_cast<const int32_t*>(base + o_slot);
  st.block_tables = reinterpret_cast<const int32_t*>(base + o_tab);
  st.table_stride = stride;
  const int32_t* rows = reinterpret_cast<const int32_t*>(base + o_rows);
  T_ = T;
  s_.visible = max_visible;
  s_.max_pos = max_pos;

  if (graph) {
    if (graphs_gen_ != scratch_gen_) {
      drop_graphs();
      graphs_gen_ = scratch_gen_;
    }
    auto it = graphs_.find(T);
    if (it == graphs_.end()) {
      DSI_CUDA_TRY(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
      const Status fwd = run_forward(&st, rows, T, R);
      cudaGraph_t g = nullptr;
      const cudaError_t end = cudaStreamEndCapture(cs, &g);
      if (!fwd) {
        if (g) cudaGraphDestroy(g);
        return fwd.with_context("capturing the decode graph");
      }
      DSI_CUDA_TRY(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      DSI_CUDA_TRY(inst);
      it = graphs_.emplace(T, static_cast<void*>(exec)).first;
    }
    DSI_CUDA_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), cs));
  } else {
    DSI_RETURN_IF_ERROR(run_forward(&st, rows, T, R));
  }
  logits.resize(size_t(R) * size_t(V));
  if (R > 0) DSI_CUDA_TRY(cudaMemcpyAsync(logits.data(), s_.logits.data(), size_t(R * V) * 4, cudaMemcpyDeviceToHost, cs));
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  return Status::ok();
}

Status CudaRunner::run_forward(const void* step_dev, const int32_t* rows, int64_t T, int64_t R) {
  const ops::StepDevice& st = *static_cast<const ops::StepDevice*>(step_dev);
  const int64_t V = cfg_.vocab_size, D = cfg_.hidden_size, n = cfg_.hc_mult;
  DSI_OP("embed", -1, embed(embed_->data.data(), embed_->w.fmt == WeightFormat::BF16 ? EmbedDType::BF16 : EmbedDType::F32, V, D,
                            st.tokens, T, n, ptr<float>(s_.X), stream_));
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const DevLayer& L = layers_[size_t(l)];
    HcNormParams hp{L.hc_attn.fn, L.hc_attn.base, L.hc_attn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps),
                    float(cfg_.rms_norm_eps), L.attn_norm};
    DSI_OP("hc_pre_attn", l, hc_pre_norm(hp, ptr<float>(s_.X), T, ptr<float>(s_.y), ptr<float>(s_.post), ptr<float>(s_.comb), stream_));
    DSI_RETURN_IF_ERROR(attention(l, &st));
    DSI_OP("hc_post_attn", l, hc_post(T, n, D, ptr<float>(s_.f), ptr<float>(s_.post), ptr<float>(s_.comb), ptr<float>(s_.X), stream_));
    hp = {L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale, n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), float(cfg_.rms_norm_eps), L.ffn_norm};
    DSI_OP("hc_pre_ffn", l, hc_pre_norm(hp, ptr<float>(s_.X), T, ptr<float>(s_.y), ptr<float>(s_.post), ptr<float>(s_.comb), stream_));
    DSI_RETURN_IF_ERROR(ffn(l, st.tokens, T));
    DSI_OP("hc_post_ffn", l, hc_post(T, n, D, ptr<float>(s_.f), ptr<float>(s_.post), ptr<float>(s_.comb), ptr<float>(s_.X), stream_));
  }
  if (R > 0) {
    // sinkhorn_iters is unused at the head (no comb there) but must be valid.
    const HcNormParams hh{hc_head_.fn, hc_head_.base, hc_head_.scale, n, D, 1, float(cfg_.hc_eps), float(cfg_.rms_norm_eps), final_norm_};
    DSI_OP("hc_head", -1, hc_head_norm(hh, ptr<float>(s_.X), rows, R, ptr<float>(s_.hid), stream_));
    DSI_OP("lm_head", -1, gemm(ptr<float>(s_.hid), R, D, head_, ptr<float>(s_.logits), V, false, stream_));
  }
  return Status::ok();
}

Status CudaRunner::attention(int64_t l, const void* step_dev) {
  const ops::StepDevice& st = *static_cast<const ops::StepDevice*>(step_dev);
  const DevLayer& L = layers_[size_t(l)];
  const AttnType type = cfg_.layer_types[size_t(l)];
  const int64_t T = T_, D = cfg_.hidden_size, H = cfg_.num_attention_heads, hd = cfg_.head_dim, qr = cfg_.q_lora_rank;
  const int64_t rd = cfg_.qk_rope_head_dim, nope = hd - rd, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps), af = float(cfg_.rope_for_layer(l).attention_factor);
  const float* inv = (type == AttnType::Sliding ? inv_main_dev_ : inv_comp_dev_).as<const float>();
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  const ops::LayerStateView view = model::layer_view(pool, l);
  float *y = ptr<float>(s_.y), *cq = ptr<float>(s_.cq), *q = ptr<float>(s_.q), *kv = ptr<float>(s_.kv);
  // Main (d = head_dim) and indexer (d = index_head_dim) compressors share everything but these.
  auto compressor_params = [&](bool overlap, int64_t d, bool indexer, const float* ape, const float* norm) {
    CompressorCudaParams p;
    p.m = m;
    p.overlap = overlap;
    p.d = d;
    p.indexer = indexer;
    p.ape = ape;
    p.norm_w = norm;
    p.eps = eps;
    p.rope_dim = rd;
    p.inv_freq = inv;
    p.attention_factor = af;
    return p;
  };

  DSI_OP("wq_a", l, gemm(y, T, D, L.wq_a, cq, qr, false, stream_));
  DSI_OP("q_norm", l, rmsnorm(cq, T, qr, L.q_norm, eps, cq, stream_));
  DSI_OP("wq_b", l, gemm(cq, T, qr, L.wq_b, q, H * hd, false, stream_));
  DSI_OP("wkv", l, gemm(y, T, D, L.wkv, kv, hd, false, stream_));
  HeadNormRopeParams rp{T, H, hd, HeadNorm::Unweighted, nullptr, eps, rd, inv, af, false};
  DSI_OP("q_norm_rope", l, head_norm_rope(rp, q, st.pos, stream_));
  rp = {T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, rd, inv, af, false};
  DSI_OP("kv_norm_rope", l, head_norm_rope(rp, kv, st.pos, stream_));
  if (num_.kv_fp8_sim) DSI_OP("kv_fp8_sim", l, fp8_block_sim(kv, T, hd, nope, 64, stream_));

  if (type != AttnType::Sliding) {
    const int64_t c = type == AttnType::CSA ? 2 : 1;
    DSI_OP("compressor_proj", l, gemm(y, T, D, L.comp_wkv, ptr<float>(s_.ckv), c * hd, false, stream_));
    DSI_OP("compressor_proj", l, gemm(y, T, D, L.comp_wgate, ptr<float>(s_.cg), c * hd, false, stream_));
    CompressorCudaParams cp = compressor_params(type == AttnType::CSA, hd, false, L.comp_ape, L.comp_norm);
    cp.sim = num_.kv_fp8_sim ? CompressorSim::Fp8Nope : CompressorSim::None;
    cp.fp8_dims = nope;
    DSI_OP("compressor", l, compressor_step(st, view, cp, ptr<float>(s_.ckv), ptr<float>(s_.cg), stream_));
  }
  const int32_t* selected = nullptr;
  if (type == AttnType::CSA) {
    const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
    float *iq = ptr<float>(s_.iq), *iw = ptr<float>(s_.iw);
    DSI_OP("indexer_q", l, gemm(cq, T, qr, L.idx_wq_b, iq, Hi * di, false, stream_));
    rp = {T, Hi, di, HeadNorm::None, nullptr, eps, rd, inv, af, false};
    DSI_OP("indexer_q_rope", l, head_norm_rope(rp, iq, st.pos, stream_));
    if (num_.indexer_fp4_sim) DSI_OP("indexer_fp4_sim", l, hadamard_fp4_sim(iq, T * Hi, di, 32, stream_));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wproj, iw, Hi, false, stream_));
    DSI_OP("indexer_proj", l, scale_cuda(iw, T * Hi, float(1.0 / std::sqrt(double(Hi))), stream_));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wkv, ptr<float>(s_.ikv), 2 * di, false, stream_));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wgate, ptr<float>(s_.ig), 2 * di, false, stream_));
    CompressorCudaParams ip = compressor_params(true, di, true, L.idx_ape, L.idx_norm);
    ip.sim = num_.indexer_fp4_sim ? CompressorSim::HadamardFp4 : CompressorSim::None;
    DSI_OP("indexer_compressor", l, compressor_step(st, view, ip, ptr<float>(s_.ikv), ptr<float>(s_.ig), stream_));
    const IndexerCudaParams xp{Hi, di, m, cfg_.index_topk};
    DSI_OP("indexer_topk", l, indexer_topk(st, view, xp, iq, iw, std::max<int64_t>(s_.visible, 1), ptr<float>(s_.scores),
                                           ptr<int32_t>(s_.sel), stream_));
    selected = ptr<int32_t>(s_.sel);
  }
  SparseAttentionCudaParams ap;
  ap.heads = H;
  ap.head_dim = hd;
  ap.scale = float(1.0 / std::sqrt(double(hd)));
  ap.sinks = L.sink;
  ap.window = cfg_.sliding_window;
  ap.m = type == AttnType::Sliding ? 0 : m;
  ap.topk_idx = selected;
  ap.topk = cfg_.index_topk;
  ap.rope_dim = rd;  // the inverse RoPE of the output is fused into the kernel's final write
  ap.inv_freq = inv;
  ap.attention_factor = af;
  ap.num_splits = attention_splits(type, m, T, s_.max_pos);  // workspace sized by ensure_scratch
  float* o = ptr<float>(s_.o);
  DSI_OP("sparse_attention", l, sparse_attention(st, view, ap, q, kv, o, ptr<float>(s_.attn_ws), stream_));
  DSI_OP("ring_write", l, ring_write(st, view, kv, stream_));
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, gin = H * hd / G;
  DSI_OP("wo_a", l, gemm_grouped(o, T, H * hd, gin, L.wo_a, G, ptr<float>(s_.mid), G * r, r, stream_));
  DSI_OP("wo_b", l, gemm(ptr<float>(s_.mid), T, G * r, L.wo_b, ptr<float>(s_.f), D, false, stream_));
  return Status::ok();
}

Status CudaRunner::ffn(int64_t l, const int32_t* tokens, int64_t T) {
  const DevLayer& L = layers_[size_t(l)];
  const int64_t D = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  DSI_OP("router", l, gemm(ptr<float>(s_.y), T, D, L.gate, ptr<float>(s_.router), E, false, stream_));
  RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob;
  rp.norm_eps = num_.router_norm_eps;
  rp.route_scale = float(cfg_.routed_scaling_factor);
  rp.hash_vocab = L.tid2eid ? cfg_.vocab_size : 0;
  DSI_OP("router", l, route_cuda(ptr<float>(s_.router), T, L.gate_bias, L.tid2eid, tokens, rp, ptr<int32_t>(s_.ridx),
                                 ptr<float>(s_.rw), stream_));
  const float limit = float(cfg_.swiglu_limit);
  DSI_OP("moe", l, moe(ptr<float>(s_.y), T, ptr<int32_t>(s_.ridx), ptr<float>(s_.rw), k, L.experts,
                            L.has_shared ? &L.shared : nullptr, limit, num_.shared_expert_clamp ? limit : 0.0f,
                            ptr<float>(s_.f), moe_ws_, stream_));
  return Status::ok();
}

}  // namespace dsinfer::backends
