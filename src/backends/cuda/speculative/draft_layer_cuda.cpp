// One drafter decoder layer on the GPU (see draft_cuda.h; CPU reference speculative/draft_layer.cpp): mHC around
// sliding-window attention over explicit key ranges (sink, grouped output projection, inverse RoPE of the output)
// and a score-routed MoE; transformers numerics like the reference (no FP8 KV simulation, router eps 1e-20).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backends/cuda/speculative/draft_cuda.h"
#include "core/env_switch.h"
#include "cuda/cuda_common.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;

namespace {
constexpr float kRouterNormEps = 1e-20f;  // transformers' renormalization epsilon (speculative/draft_layer.cpp)
}

DraftForward::DraftForward(const io::ModelConfig& lc, const DraftDeviceContext& ctx) : c_(lc), ctx_(ctx) {
  // The fused MoE (draft_moe_cuda) wherever it applies; DSINFER_DSPARK_FUSED_MOE=0 runs moe_cuda's launches (the A/B
  // switch). H200, session 26: the b1 propose graph 84 -> 56 kernels with the fused picks, 0.288 -> 0.218 ms.
  fused_moe_ = env_switch("DSINFER_DSPARK_FUSED_MOE", {"0", "1"}) != "0";
}

DraftForward::~DraftForward() = default;

bool draft_side_streams() {
  return env_switch("DSINFER_DSPARK_CONCURRENT", {"0", "1"}) != "0";
}

DraftSideStream::~DraftSideStream() {
  if (stream) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  if (fork_event) cudaEventDestroy(static_cast<cudaEvent_t>(fork_event));
  for (void* j : joins) cudaEventDestroy(static_cast<cudaEvent_t>(j));
}

Status DraftSideStream::create(size_t num_joins) {
  cudaStream_t s = nullptr;
  cudaEvent_t f = nullptr;
  DSI_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream = s;
  DSI_CUDA_TRY(cudaEventCreateWithFlags(&f, cudaEventDisableTiming));
  fork_event = f;
  for (size_t i = 0; i < std::max<size_t>(num_joins, 1); ++i) {
    cudaEvent_t j = nullptr;
    DSI_CUDA_TRY(cudaEventCreateWithFlags(&j, cudaEventDisableTiming));
    joins.push_back(j);
  }
  return Status::ok();
}

Status DraftSideStream::fork(void* main_stream) {
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(fork_event), static_cast<cudaStream_t>(main_stream)));
  return stream_wait(stream, fork_event);
}

Status DraftSideStream::done(size_t i) {
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(joins.at(i)), static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status DraftSideStream::join(void* main_stream, size_t i) const { return stream_wait(main_stream, joins.at(i)); }

Status stream_wait(void* stream, void* event) {
  DSI_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  return Status::ok();
}

Status DraftForward::init() {
  if (draft_side_streams()) {
    DSI_RETURN_IF_ERROR(kv_side_.create());
    DSI_RETURN_IF_ERROR(comb_side_.create());
  }
  const std::vector<float> inv = ops::rope_inv_freq(c_.rope_main, c_.qk_rope_head_dim);
  return inv_freq_.upload(inv.data(), inv.size(), "drafter rope inv_freq");
}

Status DraftForward::reserve(int64_t T, int64_t max_keys) {
  if (max_keys > 4096) return Status::errorf("drafter attention: {} keys per token", max_keys);
  if (T <= T_) return Status::ok();
  // Queued kernels may still read the old scratch.
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.stream)));
  ++gen_;  // captured propose graphs hold the old pointers
  const size_t t = size_t(std::max<int64_t>(T, 8));
  const int64_t D = c_.hidden_size, n = c_.hc_mult, H = c_.num_attention_heads, hd = c_.head_dim;
  const int64_t E = c_.n_routed_experts, k = c_.num_experts_per_tok;
  DSI_RETURN_IF_ERROR(y_.alloc(t * size_t(D), "drafter activations"));
  DSI_RETURN_IF_ERROR(f_.alloc(t * size_t(D), "drafter activations"));
  DSI_RETURN_IF_ERROR(post_.alloc(t * size_t(n), "drafter mHC post"));
  DSI_RETURN_IF_ERROR(comb_.alloc(t * size_t(n * n), "drafter mHC comb"));
  DSI_RETURN_IF_ERROR(cq_.alloc(t * size_t(c_.q_lora_rank), "drafter q latent"));
  DSI_RETURN_IF_ERROR(q_.alloc(t * size_t(H * hd), "drafter q"));
  DSI_RETURN_IF_ERROR(kv_.alloc(t * size_t(hd), "drafter kv"));
  DSI_RETURN_IF_ERROR(o_.alloc(t * size_t(H * hd), "drafter attention output"));
  DSI_RETURN_IF_ERROR(mid_.alloc(t * size_t(c_.o_groups * c_.o_lora_rank), "drafter output projection"));
  DSI_RETURN_IF_ERROR(router_.alloc(t * size_t(E), "drafter router"));
  DSI_RETURN_IF_ERROR(rw_.alloc(t * size_t(k), "drafter routing"));
  DSI_RETURN_IF_ERROR(ridx_.alloc(t * size_t(k), "drafter routing"));
  std::vector<int32_t> iota(t);
  std::iota(iota.begin(), iota.end(), 0);
  DSI_RETURN_IF_ERROR(rows_.upload(iota.data(), iota.size(), "drafter rows"));
  DSI_RETURN_IF_ERROR(moe_ws_.reserve(int64_t(t), k, D, c_.moe_intermediate_size, E));
  // The fused MoE's h rows: chunks of at most 8 tokens (draft_moe_supported), k + 1 slots of the widest expert.
  moe_h_ld_ = c_.moe_intermediate_size * std::max<int64_t>(1, c_.n_shared_experts);
  DSI_RETURN_IF_ERROR(moe_h_.alloc(size_t(8 * (k + 1) * moe_h_ld_), "drafter fused MoE"));
  T_ = int64_t(t);
  return Status::ok();
}

// The kernel-choice plans' mode (ops/kernel_mode.h): exact, else the default kernels.
static ops::KernelMode draft_mode(bool exact) { return exact ? ops::KernelMode::kExact : ops::KernelMode::kDefault; }

Status DraftForward::gemm(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool acc) {
  const GemmCallPlan p = plan_gemm_call(w, M, draft_mode(ctx_.exact), GemmSettings{});
  const int64_t chunk = p.chunk_rows;
  for (int64_t r = 0; r < M; r += chunk)
    DSI_RETURN_IF_ERROR(gemm_cuda(x + r * ldx, std::min(chunk, M - r), ldx, w, y + r * ldy, ldy, acc, st(),
                                  p.precision));
  return Status::ok();
}

Status DraftForward::rmsnorm_rows(const float* x, int64_t rows, int64_t dim, const float* w, float* y) {
  return rmsnorm(x, rows, dim, w, float(c_.rms_norm_eps), y, st());
}

Status DraftForward::attention(const DeviceLayer& L, int64_t T, const int64_t* pos, const ops::cuda::DraftKeys* keys,
                               int64_t max_keys, const float* ring, int64_t slot_stride) {
  const int64_t D = c_.hidden_size, H = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim;
  const int64_t qr = c_.q_lora_rank, G = c_.o_groups, r = c_.o_lora_rank, gin = H * hd / G;
  const float eps = float(c_.rms_norm_eps), af = float(c_.rope_main.attention_factor);
  void* s = st();
  // The K=V path (wkv, kv_norm + RoPE) on the side stream beside the q path (both read y_ only; the profile's eager
  // stages run them in order): joined before the core.
  void* const kv_side = kv_side_.stream && !mark && !stream_ ? kv_side_.stream : nullptr;
  auto kv_path = [&]() -> Status {
    DSI_RETURN_IF_ERROR(gemm(y_.data(), T, D, L.wkv, kv_.data(), hd, false));
    const HeadNormRopeParams kp{T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, rd, inv_freq_.data(), af, false};
    return head_norm_rope(kp, kv_.data(), pos, st());
  };
  if (kv_side) {
    DSI_RETURN_IF_ERROR(kv_side_.fork(s));
    stream_ = kv_side;
    const Status kv = kv_path();
    stream_ = nullptr;
    DSI_RETURN_IF_ERROR(kv);
    DSI_RETURN_IF_ERROR(kv_side_.done());
  }
  DSI_RETURN_IF_ERROR(gemm(y_.data(), T, D, L.wq_a, cq_.data(), qr, false));
  DSI_RETURN_IF_ERROR(rmsnorm(cq_.data(), T, qr, L.q_norm, eps, cq_.data(), s));
  DSI_RETURN_IF_ERROR(gemm(cq_.data(), T, qr, L.wq_b, q_.data(), H * hd, false));
  if (mark) mark("attn q (wq_a, q_norm, wq_b)");
  DSI_RETURN_IF_ERROR(kv_side ? kv_side_.join(s) : kv_path());
  if (mark) mark("attn kv (wkv, kv_norm + rope)");
  ops::cuda::DraftAttnArgs a;
  a.q = q_.data();
  a.kv = kv_.data();
  a.ring = ring;
  a.slot_stride = slot_stride;
  a.window = c_.sliding_window;
  a.keys = keys;
  a.sinks = L.sink;
  a.scale = float(1.0 / std::sqrt(double(hd)));
  a.T = T;
  a.heads = H;
  a.dim = hd;
  a.max_keys = max_keys;
  a.out = o_.data();
  // The query's per-head norm + RoPE and the output's inverse RoPE in the core's launch (head_norm_rope's bits).
  a.pos = pos;
  a.inv_freq = inv_freq_.data();
  a.rope_dim = rd;
  a.attention_factor = af;
  a.q_eps = eps;
  a.q_norm_rope = true;
  a.out_rope = true;
  if (!joins_before_core.empty()) {  // this layer's context rows were written on another stream (DsparkCuda)
    void* const j = joins_before_core.front();
    joins_before_core.erase(joins_before_core.begin());
    DSI_RETURN_IF_ERROR(stream_wait(s, j));
  }
  DSI_RETURN_IF_ERROR(draft_attention_cuda(a, s));
  if (mark) mark("attn core (q norm + rope, the output's inverse rope)");
  const GemmCallPlan gp = plan_gemm_grouped_call(L.wo_a, G, T, draft_mode(ctx_.exact), GemmSettings{});
  const int64_t chunk = gp.chunk_rows;
  for (int64_t i = 0; i < T; i += chunk)
    DSI_RETURN_IF_ERROR(gemm_grouped_cuda(o_.data() + i * H * hd, std::min(chunk, T - i), H * hd, gin, L.wo_a, G,
                                          mid_.data() + i * G * r, G * r, r, s, gp.precision));
  return gemm(mid_.data(), T, G * r, L.wo_b, f_.data(), D, false);
}

Status DraftForward::moe(const DeviceLayer& L, int64_t T) {
  const int64_t D = c_.hidden_size, E = c_.n_routed_experts, k = c_.num_experts_per_tok;
  RouterCudaParams rp;
  rp.experts = E;
  rp.topk = k;
  rp.score = c_.scoring_func;
  rp.renormalize = c_.norm_topk_prob;
  rp.norm_eps = kRouterNormEps;
  rp.route_scale = float(c_.routed_scaling_factor);
  // Exact: chunks small enough for moe_cuda's fp32 streaming path (ops/moe/moe_plan.h moe_chunk_tokens).
  const float limit = float(c_.swiglu_limit);
  const int64_t chunk = moe_chunk_tokens(draft_mode(ctx_.exact), T, E, k);
  // Chunks on that path's skinny kernels: the two fused launches (draft_moe_cuda), the same bits.
  const int64_t Is = L.has_shared ? L.shared.w1.rows : 0;
  const bool fused = fused_moe_ && L.experts.w1.fmt == WeightFormat::F32 && L.experts.w3.fmt == WeightFormat::F32 &&
                     L.experts.w2.fmt == WeightFormat::F32 &&
                     (!L.has_shared || (L.shared.w1.fmt == WeightFormat::F32 && L.shared.w3.fmt == WeightFormat::F32 &&
                                        L.shared.w2.fmt == WeightFormat::F32)) &&
                     std::max(L.experts.inter, Is) <= moe_h_ld_ &&
                     draft_moe_supported(std::min(chunk, T), k, E, D, L.experts.inter, Is);
  // The router in the fused MoE's first launch (no GEMM and route launches) where its GEMM is the skinny kernel's:
  // F32 at <= kGemmSkinnyMaxM rows on the fp32 plan (gemm_plan.h), so the kernel's logits are gemm_cuda's bits.
  const bool routes = fused && T <= kGemmSkinnyMaxM && L.gate.fmt == WeightFormat::F32 &&
                      plan_gemm_call(L.gate, T, draft_mode(ctx_.exact), GemmSettings{}).precision ==
                          GemmPrecision::kFp32SmallM &&
                      draft_moe_routes(T, E, k, rp);
  if (!routes) {
    DSI_RETURN_IF_ERROR(gemm(y_.data(), T, D, L.gate, router_.data(), E, false));
    DSI_RETURN_IF_ERROR(
        route_cuda(router_.data(), T, L.gate_bias, nullptr, nullptr, rp, ridx_.data(), rw_.data(), st()));
    if (mark) mark("moe gate + route");
  }
  if (fused) {
    for (int64_t r = 0; r < T; r += chunk) {
      DraftMoeArgs a;
      a.x = y_.data() + r * D;
      a.T = std::min(chunk, T - r);
      a.dim = D;
      a.topk = k;
      a.experts = E;
      a.inter = L.experts.inter;
      a.shared_inter = Is;
      a.idx = ridx_.data() + r * k;
      a.weight = rw_.data() + r * k;
      if (routes) {
        a.gate = static_cast<const float*>(L.gate.data);
        a.gate_bias = L.gate_bias;
        a.router = rp;
      }
      a.w1 = L.experts.w1.data;
      a.w3 = L.experts.w3.data;
      a.w2 = L.experts.w2.data;
      if (L.has_shared) {
        a.sw1 = static_cast<const float*>(L.shared.w1.data);
        a.sw3 = static_cast<const float*>(L.shared.w3.data);
        a.sw2 = static_cast<const float*>(L.shared.w2.data);
      }
      a.limit = limit;
      a.shared_limit = limit;
      a.h = moe_h_.data();
      a.h_ld = moe_h_ld_;
      a.out = f_.data() + r * D;
      DSI_RETURN_IF_ERROR(draft_moe_cuda(a, st()));
    }
    return Status::ok();
  }
  for (int64_t r = 0; r < T; r += chunk) {
    const int64_t m = std::min(chunk, T - r);
    DSI_RETURN_IF_ERROR(moe_cuda(y_.data() + r * D, m, ridx_.data() + r * k, rw_.data() + r * k, k, L.experts,
                                 L.has_shared ? &L.shared : nullptr, limit, limit, f_.data() + r * D, moe_ws_,
                                 st(), MoePath::Exact));
  }
  return Status::ok();
}

Status DraftForward::layer(const DeviceLayer& L, float* X, int64_t T, const int64_t* pos, const ops::cuda::DraftKeys* keys,
                           int64_t max_keys, const float* ring, int64_t slot_stride) {
  if (T > T_) return Status::errorf("drafter layer: {} tokens, scratch for {}", T, T_);
  if (T == 0) return Status::ok();
  const int64_t D = c_.hidden_size, n = c_.hc_mult;
  const float hc_eps = float(c_.hc_eps), eps = float(c_.rms_norm_eps);
  void* s = st();
  // Each site's post / comb (the Sinkhorn) on comb_side_ beside the sublayer, joined before its hc_post, where the
  // V4 forward defers them too (ops/mhc/mhc_cuda.h hc_defer_comb: the same bits); not in the profile's eager stages.
  void* const side = comb_side_.stream && !mark && !stream_ && hc_defer_comb(T) ? comb_side_.stream : nullptr;
  // One site: hc_pre_norm, the sublayer, hc_post; names: the profile's marks after each.
  const auto site = [&](HcNormParams hp, const auto& sublayer, const char* const (&names)[3]) -> Status {
    hp.defer_comb = side != nullptr;
    DSI_RETURN_IF_ERROR(hc_pre_norm(hp, X, T, y_.data(), post_.data(), comb_.data(), s));
    if (side) {
      DSI_RETURN_IF_ERROR(comb_side_.fork(s));
      const Status comb = hc_comb(hp, T, post_.data(), comb_.data(), side);
      DSI_RETURN_IF_ERROR(comb_side_.done());
      DSI_RETURN_IF_ERROR(comb);
    }
    if (mark) mark(names[0]);
    const Status sub = sublayer();
    if (side) DSI_RETURN_IF_ERROR(comb_side_.join(s));  // after a failure too: a capture never ends unjoined
    DSI_RETURN_IF_ERROR(sub);
    if (mark) mark(names[1]);
    DSI_RETURN_IF_ERROR(hc_post(T, n, D, f_.data(), post_.data(), comb_.data(), X, s));
    if (mark) mark(names[2]);
    return Status::ok();
  };
  DSI_RETURN_IF_ERROR(site({L.hc_attn.fn, L.hc_attn.base, L.hc_attn.scale, n, D, c_.hc_sinkhorn_iters, hc_eps, eps,
                            L.attn_norm},
                           [&] { return attention(L, T, pos, keys, max_keys, ring, slot_stride); },
                           {"hc_pre attn", "attn wo (grouped wo_a, wo_b)", "hc_post attn"}));
  DSI_RETURN_IF_ERROR(site({L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale, n, D, c_.hc_sinkhorn_iters, hc_eps, eps,
                            L.ffn_norm},
                           [&] { return moe(L, T); }, {"hc_pre ffn", "moe experts", "hc_post ffn"}));
  return Status::ok();
}

Status DraftForward::context_kv(const DeviceLayer& L, const float* x, int64_t T, const int64_t* pos, float* kv,
                                float* normed) {
  if (T > T_) return Status::errorf("drafter context kv: {} tokens, scratch for {}", T, T_);
  if (T == 0) return Status::ok();
  const int64_t D = c_.hidden_size, hd = c_.head_dim;
  const float eps = float(c_.rms_norm_eps), af = float(c_.rope_main.attention_factor);
  float* xn = normed ? normed : y_.data();
  DSI_RETURN_IF_ERROR(rmsnorm(x, T, D, L.attn_norm, eps, xn, st()));
  DSI_RETURN_IF_ERROR(gemm(xn, T, D, L.wkv, kv, hd, false));
  const HeadNormRopeParams rp{T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, c_.qk_rope_head_dim, inv_freq_.data(), af, false};
  return head_norm_rope(rp, kv, pos, st());
}

Status DraftForward::head_hidden(const HcDevice& hc, const float* norm, const float* X, const int32_t* rows, int64_t T,
                                 float* h) {
  if (T > T_) return Status::errorf("drafter head: {} rows, scratch for {}", T, T_);
  if (T == 0) return Status::ok();
  // sinkhorn_iters is unused at the head (no comb there) but must be valid.
  const HcNormParams hh{hc.fn, hc.base, hc.scale, c_.hc_mult, c_.hidden_size, 1, float(c_.hc_eps), float(c_.rms_norm_eps), norm};
  return hc_head_norm(hh, X, rows ? rows : rows_.data(), T, h, st());
}

}  // namespace dsinfer::backends
