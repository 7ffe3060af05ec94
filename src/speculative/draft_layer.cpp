// Drafter decoder layer (see draft_layer.h); mirrors model/deepseek_v4.cpp's sliding layer with explicit keys.
#include "speculative/draft_layer.h"

#include <cmath>

#include "ops/linear/linear.h"
#include "ops/mhc/mhc.h"
#include "ops/moe/moe.h"
#include "ops/qat/qat.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace dsinfer::speculative {

namespace {

constexpr float kRouterNormEps = 1e-20f;  // transformers' renormalization epsilon

ops::HcParams hc_params(const io::ModelConfig& c, const model::HcWeights& h) {
  return ops::HcParams{h.fn.p(), h.base.data(), h.scale.data(), c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters,
                       float(c.hc_eps), float(c.rms_norm_eps)};
}

void attention(const DraftLayerCtx& ctx, const model::LayerWeights& L, const std::vector<float>& x, int64_t T,
               const int64_t* pos, const KeyFn& keys, std::vector<float>& out) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, rd = c.qk_rope_head_dim;
  const int64_t qr = c.q_lora_rank;
  const float eps = float(c.rms_norm_eps), af = float(c.rope_main.attention_factor);
  std::vector<float> cq(size_t(T * qr)), q(size_t(T * H * hd)), kv(size_t(T * hd));
  ops::linear_ref(x.data(), T, D, L.wq_a.p(), qr, cq.data());
  ops::rmsnorm_ref(cq.data(), T, qr, L.q_norm.data(), eps, cq.data());
  ops::linear_ref(cq.data(), T, qr, L.wq_b.p(), H * hd, q.data());
  if (!ctx.v41) ops::rmsnorm_ref(q.data(), T * H, hd, nullptr, eps, q.data());  // V4.1: no per-head q norm
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) ops::rope_apply_ref(q.data() + (t * H + h) * hd, hd, rd, ctx.inv_freq, pos[t], false, af);
  ops::linear_ref(x.data(), T, D, L.wkv.p(), hd, kv.data());
  ops::rmsnorm_ref(kv.data(), T, hd, L.kv_norm.data(), eps, kv.data());
  for (int64_t t = 0; t < T; ++t) {
    ops::rope_apply_ref(kv.data() + t * hd, hd, rd, ctx.inv_freq, pos[t], false, af);
    if (ctx.v41) ops::fp8_qat_ref(kv.data() + t * hd, hd, 32);  // the window KV's QAT
  }

  std::vector<float> o(size_t(T * H * hd));
  std::vector<const float*> ks;
  const ops::SparseAttentionParams ap{H, hd, float(1.0 / std::sqrt(double(hd))), L.attn_sink.data()};
  for (int64_t t = 0; t < T; ++t) {
    ks.clear();
    keys(t, kv.data(), ks);
    float* ot = o.data() + t * H * hd;
    ops::sparse_attention_ref(ap, q.data() + t * H * hd, ks.data(), int64_t(ks.size()), ot);
    for (int64_t h = 0; h < H; ++h) ops::rope_apply_ref(ot + h * hd, hd, rd, ctx.inv_freq, pos[t], true, af);
  }
  const int64_t G = c.o_groups, r = c.o_lora_rank, gin = H * hd / G;
  std::vector<float> mid(size_t(T * G * r));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g)
      ops::linear_ref(o.data() + t * H * hd + g * gin, 1, gin, L.wo_a.p() + g * r * gin, r, mid.data() + (t * G + g) * r);
  ops::linear_ref(mid.data(), T, G * r, L.wo_b.p(), D, out.data());
}

void moe(const io::ModelConfig& c, const model::LayerWeights& L, const std::vector<float>& x, int64_t T,
         std::vector<float>& out) {
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size, k = c.num_experts_per_tok;
  ops::RouterParams rp;
  rp.gate = L.gate.p();
  rp.bias = L.gate_bias.data();
  rp.experts = c.n_routed_experts;
  rp.dim = D;
  rp.topk = k;
  rp.score = c.scoring_func;
  rp.renormalize = c.norm_topk_prob;
  rp.norm_eps = kRouterNormEps;
  rp.route_scale = float(c.routed_scaling_factor);
  const float limit = float(c.swiglu_limit);
  std::vector<int32_t> idx(static_cast<size_t>(k));
  std::vector<float> wt(static_cast<size_t>(k));
  std::vector<double> acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * D;
    ops::route_ref(rp, xt, nullptr, idx.data(), wt.data());
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const model::ExpertWeights& e = L.experts[size_t(idx[size_t(j)])];
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, limit}, xt, wt[size_t(j)], acc.data());
    }
    if (L.shared) {
      const model::ExpertWeights& e = *L.shared;
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, limit}, xt, 1.0f, acc.data());
    }
    for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] = float(acc[size_t(d)]);
  }
}

}  // namespace

DraftLayerCtx::DraftLayerCtx(const io::ModelConfig& c)
    : cfg(&c), inv_freq(ops::rope_inv_freq(c.rope_main, c.qk_rope_head_dim)), v41(c.is_v41()) {}

void draft_layer_forward(const DraftLayerCtx& ctx, const model::LayerWeights& L, std::vector<float>& X, int64_t T,
                         const int64_t* pos, const KeyFn& keys) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, n = c.hc_mult;
  const float eps = float(c.rms_norm_eps);
  std::vector<float> y(size_t(T * D)), f(size_t(T * D)), post(size_t(T * n)), comb(size_t(T * n * n));
  auto site = [&](const model::HcWeights& hc, const model::Vec& norm_w, auto&& sublayer) {
    const ops::HcParams hp = hc_params(c, hc);
    for (int64_t t = 0; t < T; ++t)
      ops::hc_pre_ref(hp, X.data() + t * n * D, y.data() + t * D, post.data() + t * n, comb.data() + t * n * n);
    ops::rmsnorm_ref(y.data(), T, D, norm_w.data(), eps, y.data());
    sublayer();
    for (int64_t t = 0; t < T; ++t)
      ops::hc_post_ref(n, D, f.data() + t * D, post.data() + t * n, comb.data() + t * n * n, X.data() + t * n * D);
  };
  site(L.hc_attn, L.attn_norm, [&] { attention(ctx, L, y, T, pos, keys, f); });
  site(L.hc_ffn, L.ffn_norm, [&] { moe(c, L, y, T, f); });
}

void draft_context_kv(const DraftLayerCtx& ctx, const model::LayerWeights& L, const float* x, int64_t T,
                      const int64_t* pos, float* kv) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, hd = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  std::vector<float> y(x, x + T * D);
  if (!ctx.v41) ops::rmsnorm_ref(x, T, D, L.attn_norm.data(), eps, y.data());
  ops::linear_ref(y.data(), T, D, L.wkv.p(), hd, kv);
  ops::rmsnorm_ref(kv, T, hd, L.kv_norm.data(), eps, kv);
  for (int64_t t = 0; t < T; ++t) {
    ops::rope_apply_ref(kv + t * hd, hd, c.qk_rope_head_dim, ctx.inv_freq, pos[t], false, float(c.rope_main.attention_factor));
    if (ctx.v41) ops::fp8_qat_ref(kv + t * hd, hd, 32);
  }
}

void draft_layer_forward_v41(const DraftLayerCtx& ctx, const model::LayerWeights& L, std::vector<float>& X, int64_t T,
                             const int64_t* pos, const KeyFn& keys, std::vector<float>& pre) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, n = c.hc_mult;
  const float eps = float(c.rms_norm_eps);
  std::vector<float> y(size_t(T * D)), f(size_t(T * D)), post(size_t(T * n)), comb(size_t(T * n * n));
  std::vector<float> pre_a(size_t(T * n)), pre_f(size_t(T * n));
  // One site (model/deepseek_v41.cpp): its own coefficients from X, the sublayer's input collapsed with pre_in.
  auto site = [&](const model::HcWeights& hc, const model::Vec& norm_w, const std::vector<float>& pre_in,
                  std::vector<float>& pre_out, auto&& sublayer) {
    const ops::HcParams hp = hc_params(c, hc);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = X.data() + t * n * D;
      ops::hc_mixes_ref(hp, xt, pre_out.data() + t * n, post.data() + t * n, comb.data() + t * n * n);
      ops::hc_collapse_ref(n, D, xt, pre_in.data() + t * n, y.data() + t * D);
    }
    ops::rmsnorm_ref(y.data(), T, D, norm_w.data(), eps, y.data());
    sublayer();
    for (int64_t t = 0; t < T; ++t)
      ops::hc_post_ref(n, D, f.data() + t * D, post.data() + t * n, comb.data() + t * n * n, X.data() + t * n * D);
  };
  site(L.hc_attn, L.attn_norm, pre, pre_a, [&] { attention(ctx, L, y, T, pos, keys, f); });
  site(L.hc_ffn, L.ffn_norm, pre_a, pre_f, [&] { moe(c, L, y, T, f); });
  pre = std::move(pre_f);
}

void draft_collapse_hidden(const DraftLayerCtx& ctx, const std::vector<float>& pre, const model::Vec& norm,
                           const std::vector<float>& X, int64_t T, std::vector<float>& hb, std::vector<float>& h) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, n = c.hc_mult;
  hb.assign(size_t(T * D), 0.0f);
  for (int64_t t = 0; t < T; ++t) ops::hc_collapse_ref(n, D, X.data() + t * n * D, pre.data() + t * n, hb.data() + t * D);
  h.assign(size_t(T * D), 0.0f);
  ops::rmsnorm_ref(hb.data(), T, D, norm.data(), float(c.rms_norm_eps), h.data());
}

void draft_head_hidden(const DraftLayerCtx& ctx, const model::HcWeights& hc, const model::Vec& norm,
                       const std::vector<float>& X, int64_t T, std::vector<float>& h) {
  const io::ModelConfig& c = *ctx.cfg;
  const int64_t D = c.hidden_size, n = c.hc_mult;
  const ops::HcParams hp = hc_params(c, hc);
  h.assign(size_t(T * D), 0.0f);
  for (int64_t t = 0; t < T; ++t) ops::hc_head_ref(hp, X.data() + t * n * D, h.data() + t * D);
  ops::rmsnorm_ref(h.data(), T, D, norm.data(), float(c.rms_norm_eps), h.data());
}

}  // namespace dsinfer::speculative
