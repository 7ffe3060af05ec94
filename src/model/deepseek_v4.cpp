// DeepSeek-V4 CPU reference forward (see deepseek_v4.h). Read top to bottom: embed -> per layer
// [mHC pre -> attn_norm -> attention -> mHC post -> mHC pre -> ffn_norm -> MoE -> mHC post] -> hc_head -> norm
// -> head. Stateless parts run over all T tokens of the step at once; the stateful part of attention (ring
// write, compressors, indexer, sparse attention) walks each sequence's tokens in order, exactly the official
// decode state machine, which is what makes chunking invisible in the results.
#include "model/deepseek_v4.h"

#include <algorithm>
#include <cmath>

#include "io/safetensors.h"
#include "ops/compressor/compressor.h"
#include "ops/indexer/indexer.h"
#include "ops/linear/linear.h"
#include "ops/mhc/mhc.h"
#include "ops/moe/moe.h"
#include "ops/quant_sim/quant_sim.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace dsinfer::model {

using io::AttnType;

DeepseekV4Cpu::DeepseekV4Cpu(io::ModelConfig cfg, Weights w, Numerics num)
    : cfg_(std::move(cfg)), w_(std::move(w)), num_(std::move(num)) {
  inv_freq_main_ = ops::rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  inv_freq_compress_ = ops::rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
}

Result<std::unique_ptr<DeepseekV4Cpu>> DeepseekV4Cpu::load(const std::string& model_dir, const Numerics& num) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(model_dir));
  if (num.indexer_fp4_sim && cfg.index_head_dim > 0 && (cfg.index_head_dim & (cfg.index_head_dim - 1)))
    return Status::errorf("{}: index_head_dim = {} is not a power of two, which the official indexer Hadamard "
                          "transform needs (use --numerics hf)", model_dir, cfg.index_head_dim);
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(model_dir));
  auto w = load_weights(cfg, ckpt);
  if (!w.is_ok()) return w.status().with_context(model_dir);
  return std::make_unique<DeepseekV4Cpu>(std::move(cfg), std::move(w).value(), num);
}

// Flattened view of one step: token t belongs to sequence seq[t] at absolute position pos[t].
struct DeepseekV4Cpu::Step : StepTokens {};

Status flatten_step(const io::ModelConfig& cfg, const StatePool& state, std::span<const SeqChunk> chunks,
                    StepTokens& out) {
  if (!state.layout || !state.slots || !state.blocks) return Status::error("forward: no state pool");
  if (state.layout->kv_elem_bytes != 4 || state.layout->layers.size() < size_t(cfg.num_hidden_layers))
    return Status::error("forward: the CPU reference needs an fp32 state layout of this model");
  out.state = &state;
  out.chunks = chunks;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SeqChunk& ch = chunks[c];
    const int64_t end = ch.start_pos + int64_t(ch.tokens.size());
    if (ch.slot < 0 || ch.start_pos < 0) return Status::errorf("sequence {} of the step has no slot or a negative position", c);
    if (int64_t(ch.block_table.size()) * state.layout->block_size < end)
      return Status::errorf("sequence {}: block table covers {} tokens, the step needs {}", c,
                            int64_t(ch.block_table.size()) * state.layout->block_size, end);
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const int32_t t = ch.tokens[i];
      if (t < 0 || t >= cfg.vocab_size)
        return Status::errorf("sequence {} token {}: id {} is outside the vocabulary [0, {})", c, i, t, cfg.vocab_size);
      out.tok.push_back(t);
      out.pos.push_back(ch.start_pos + int64_t(i));
      out.seq.push_back(c);
    }
  }
  out.T = int64_t(out.tok.size());
  return Status::ok();
}

void DeepseekV4Cpu::tap(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows) const {
  if (tap_) tap_(name, layer, v.data(), rows, rows ? int64_t(v.size()) / rows : 0);
}

Status DeepseekV4Cpu::forward(const StatePool& state, std::span<const SeqChunk> chunks, std::vector<float>& logits) {
  Step s;
  DSI_RETURN_IF_ERROR(flatten_step(cfg_, state, chunks, s));
  if (s.T == 0 && shard_.exchange) {  // DP: a rank without tokens still serves its experts in every MoE layer
    std::vector<float> none;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) DSI_RETURN_IF_ERROR(moe(l, s, none, none));
    logits.clear();
    return Status::ok();
  }
  const int64_t T = s.T, D = cfg_.hidden_size, n = cfg_.hc_mult;
  const float eps = float(cfg_.rms_norm_eps);

  // embed -> X [T, n, D]: every stream starts as the token embedding
  std::vector<float> X(size_t(T * n * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      std::copy_n(w_.embed.p() + int64_t(s.tok[size_t(t)]) * D, D, X.data() + (t * n + j) * D);

  std::vector<float> y(size_t(T * D)), f(size_t(T * D)), post(size_t(T * n)), comb(size_t(T * n * n));
  auto hc_params = [&](const HcWeights& h) {
    return ops::HcParams{h.fn.p(), h.base.data(), h.scale.data(), n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), eps};
  };
  // One residual site: y = norm(hc_pre(X)); f = sublayer(y); X = hc_post(f).
  auto site = [&](const HcWeights& hc, const Vec& norm_w, auto&& sublayer) {
    const ops::HcParams hp = hc_params(hc);
    for (int64_t t = 0; t < T; ++t)
      ops::hc_pre_ref(hp, X.data() + t * n * D, y.data() + t * D, post.data() + t * n, comb.data() + t * n * n);
    ops::rmsnorm_ref(y.data(), T, D, norm_w.data(), eps, y.data());
    sublayer(y, f);
    for (int64_t t = 0; t < T; ++t)
      ops::hc_post_ref(n, D, f.data() + t * D, post.data() + t * n, comb.data() + t * n * n, X.data() + t * n * D);
  };

  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    Status attn_st = Status::ok();  // a tensor-parallel reduction can fail (another rank failed)
    site(L.hc_attn, L.attn_norm,
         [&](const std::vector<float>& x, std::vector<float>& out) { attn_st = attention(l, s, x, out); });
    DSI_RETURN_IF_ERROR(attn_st);
    tap("attn_out", l, f, T);
    Status moe_st = Status::ok();  // an expert-parallel reduction can fail (another rank failed)
    site(L.hc_ffn, L.ffn_norm,
         [&](const std::vector<float>& x, std::vector<float>& out) { moe_st = moe(l, s, x, out); });
    DSI_RETURN_IF_ERROR(moe_st);
    tap("ffn_out", l, f, T);
    tap("residual", l, X, T);
  }

  // hc_head -> norm -> head, only for the rows that need logits
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < T; ++t) {
    const size_t c = s.seq[size_t(t)];
    const bool last = t + 1 == T || s.seq[size_t(t + 1)] != c;
    if (chunks[c].all_logits || last) rows.push_back(t);
  }
  const ops::HcParams hp = hc_params(w_.hc_head);
  std::vector<float> h(rows.size() * size_t(D));
  for (size_t r = 0; r < rows.size(); ++r) ops::hc_head_ref(hp, X.data() + rows[r] * n * D, h.data() + r * size_t(D));
  ops::rmsnorm_ref(h.data(), int64_t(rows.size()), D, w_.norm.data(), eps, h.data());
  tap("final_hidden", -1, h, int64_t(rows.size()));
  logits.assign(rows.size() * size_t(cfg_.vocab_size), 0.0f);
  ops::linear_ref(h.data(), int64_t(rows.size()), D, w_.head.p(), cfg_.vocab_size, logits.data());
  return Status::ok();
}

Status DeepseekV4Cpu::attention(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const {
  const LayerWeights& L = w_.layers[size_t(l)];
  const AttnType type = cfg_.layer_types[size_t(l)];
  const int64_t T = s.T, D = cfg_.hidden_size, hd = cfg_.head_dim;
  // This rank's query heads [h0, h1) (all of them on one rank; tensor parallelism: a slice, see HeadShard).
  const int64_t h0 = heads_.lo, h1 = heads_.hi < 0 ? cfg_.num_attention_heads : heads_.hi, H = h1 - h0;
  const int64_t rd = cfg_.qk_rope_head_dim, nope = hd - rd, qr = cfg_.q_lora_rank, W = cfg_.sliding_window;
  const int64_t m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps);
  const std::vector<float>& inv_freq = type == AttnType::Sliding ? inv_freq_main_ : inv_freq_compress_;
  const float attn_factor = float(cfg_.rope_for_layer(l).attention_factor);

  // q: [T, H, hd] = per-head RMS(q_norm(x wq_a) wq_b), RoPE on the trailing rd dims
  std::vector<float> cq(size_t(T * qr)), q(size_t(T * H * hd));
  ops::linear_ref(x.data(), T, D, L.wq_a.p(), qr, cq.data());
  ops::rmsnorm_ref(cq.data(), T, qr, L.q_norm.data(), eps, cq.data());
  ops::linear_ref(cq.data(), T, qr, L.wq_b.p() + h0 * hd * qr, H * hd, q.data());
  ops::rmsnorm_ref(q.data(), T * H, hd, nullptr, eps, q.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      ops::rope_apply_ref(q.data() + (t * H + h) * hd, hd, rd, inv_freq, s.pos[size_t(t)], false, attn_factor);
  tap("attn.q", l, q, T);

  // kv: [T, hd] single shared K=V latent
  std::vector<float> kv(size_t(T * hd));
  ops::linear_ref(x.data(), T, D, L.wkv.p(), hd, kv.data());
  ops::rmsnorm_ref(kv.data(), T, hd, L.kv_norm.data(), eps, kv.data());
  for (int64_t t = 0; t < T; ++t) {
    ops::rope_apply_ref(kv.data() + t * hd, hd, rd, inv_freq, s.pos[size_t(t)], false, attn_factor);
    if (num_.kv_fp8_sim) ops::fp8_block_sim_ref(kv.data() + t * hd, nope, 64);
  }
  tap("attn.kv", l, kv, T);

  // compressor projections [T, c*d]; indexer queries [T, Hi, di] and head weights [T, Hi]
  const int64_t c = type == AttnType::CSA ? 2 : 1, Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
  std::vector<float> ckv, cg, iq, iw, ikv, ig;
  if (L.compressor) {
    ckv.resize(size_t(T * c * hd));
    cg.resize(size_t(T * c * hd));
    ops::linear_ref(x.data(), T, D, L.compressor->wkv.p(), c * hd, ckv.data());
    ops::linear_ref(x.data(), T, D, L.compressor->wgate.p(), c * hd, cg.data());
  }
  if (type == AttnType::CSA) {
    iq.resize(size_t(T * Hi * di));
    iw.resize(size_t(T * Hi));
    ikv.resize(size_t(T * 2 * di));
    ig.resize(size_t(T * 2 * di));
    ops::linear_ref(cq.data(), T, qr, L.idx_wq_b.p(), Hi * di, iq.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hi; ++h) {
        float* v = iq.data() + (t * Hi + h) * di;
        ops::rope_apply_ref(v, di, rd, inv_freq, s.pos[size_t(t)], false, attn_factor);
        if (num_.indexer_fp4_sim) {
          ops::hadamard_ref(v, di);
          ops::fp4_block_sim_ref(v, di, 32);
        }
      }
    ops::linear_ref(x.data(), T, D, L.idx_weights_proj.p(), Hi, iw.data());
    for (auto& v : iw) v *= float(1.0 / std::sqrt(double(Hi)));
    ops::linear_ref(x.data(), T, D, L.idx_compressor->wkv.p(), 2 * di, ikv.data());
    ops::linear_ref(x.data(), T, D, L.idx_compressor->wgate.p(), 2 * di, ig.data());
  }

  // Stateful part: walk each sequence's tokens in order.
  const ops::LayerStateView v = layer_view(*s.state, l);
  std::vector<float> o(static_cast<size_t>(T * H * hd)), entry(static_cast<size_t>(std::max(hd, di))), keybuf;
  std::vector<const float*> keys;
  const ops::SparseAttentionParams ap{H, hd, float(1.0 / std::sqrt(double(hd))), L.attn_sink.data() + h0};
  for (int64_t t = 0; t < T; ++t) {
    const SeqChunk& ch = s.chunks[s.seq[size_t(t)]];
    const int32_t* table = ch.block_table.data();
    const int64_t p = s.pos[size_t(t)];
    std::copy_n(kv.data() + t * hd, hd, v.ring_row(ch.slot, p));
    if (L.compressor) {
      const ops::CompressorParams cp{m, type == AttnType::CSA, hd, L.compressor->ape.p(), v.frontier_rows};
      if (ops::compressor_step_ref(cp, v.frontier(ch.slot), ckv.data() + t * c * hd, cg.data() + t * c * hd, p,
                                   entry.data())) {
        ops::rmsnorm_ref(entry.data(), 1, hd, L.compressor->norm.data(), eps, entry.data());
        ops::rope_apply_ref(entry.data(), hd, rd, inv_freq, p + 1 - m, false, attn_factor);
        if (num_.kv_fp8_sim) ops::fp8_block_sim_ref(entry.data(), nope, 64);
        std::copy_n(entry.data(), hd, v.entry(table, p / m));
      }
    }
    std::vector<int32_t> selected;
    if (type == AttnType::CSA) {
      const ops::CompressorParams ip{m, true, di, L.idx_compressor->ape.p(), v.frontier_rows};
      if (ops::compressor_step_ref(ip, v.index_frontier(ch.slot), ikv.data() + t * 2 * di, ig.data() + t * 2 * di, p,
                                   entry.data())) {
        ops::rmsnorm_ref(entry.data(), 1, di, L.idx_compressor->norm.data(), eps, entry.data());
        ops::rope_apply_ref(entry.data(), di, rd, inv_freq, p + 1 - m, false, attn_factor);
        if (num_.indexer_fp4_sim) {
          ops::hadamard_ref(entry.data(), di);
          ops::fp4_block_sim_ref(entry.data(), di, 32);
        }
        std::copy_n(entry.data(), di, v.index_key(table, p / m));
      }
      const int64_t visible = (p + 1) / m;
      keybuf.resize(size_t(visible * di));
      for (int64_t j = 0; j < visible; ++j) std::copy_n(v.index_key(table, j), di, keybuf.data() + j * di);
      const ops::IndexerQuery qq{iq.data() + t * Hi * di, iw.data() + t * Hi, Hi, di};
      selected = ops::indexer_topk_ref(qq, keybuf.data(), visible, cfg_.index_topk);
    }
    // keys: the window (positions p-W+1..p, oldest first), then the compressed entries
    keys.clear();
    for (int64_t q_ = std::max<int64_t>(0, p - W + 1); q_ <= p; ++q_) keys.push_back(v.ring_row(ch.slot, q_));
    if (type == AttnType::HCA)
      for (int64_t j = 0; j < (p + 1) / m; ++j) keys.push_back(v.entry(table, j));
    for (int32_t j : selected) keys.push_back(v.entry(table, j));
    float* ot = o.data() + t * H * hd;
    ops::sparse_attention_ref(ap, q.data() + t * H * hd, keys.data(), int64_t(keys.size()), ot);
    for (int64_t h = 0; h < H; ++h) ops::rope_apply_ref(ot + h * hd, hd, rd, inv_freq, p, true, attn_factor);
  }
  tap("attn.o", l, o, T);
  return output_projection(L, o, T, h0, h1, out);
}

namespace {

// y [T, out] = x [T, n] (row stride xs) times columns [c0, c0 + n) of w [out, ld], accumulated in fp64 in column
// order and rounded once: linear_ref's arithmetic on a column slice (the whole matrix gives linear_ref's bits).
void linear_cols(const float* x, int64_t T, int64_t xs, int64_t n, const float* w, int64_t ld, int64_t c0,
                 int64_t out, float* y) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      const float* xr = x + t * xs;
      const float* wr = w + o * ld + c0;
      double acc = 0.0;
      for (int64_t i = 0; i < n; ++i) acc += double(xr[i]) * double(wr[i]);
      y[t * out + o] = float(acc);
    }
}

}  // namespace

// wo_a of the heads [h0, h1) (o [T, (h1 - h0) * hd]): group g's heads [H/G * hd] -> wo_a rows [g*r, (g+1)*r),
// written at columns [(g - base) * r, (g - base + 1) * r) of mid [T, width * r]. A group this rank holds only part
// of (HeadShard) multiplies its heads' columns of wo_a.
void DeepseekV4Cpu::group_outputs(const LayerWeights& L, const float* o, int64_t T, int64_t h0, int64_t h1,
                                  int64_t base, int64_t width, float* mid) const {
  const int64_t H = cfg_.num_attention_heads, hd = cfg_.head_dim;
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, hpg = H / G, gin = hpg * hd, Hr = h1 - h0;
  const int64_t g0 = h0 / hpg, g1 = h1 > h0 ? (h1 + hpg - 1) / hpg : g0;  // groups touched
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t a = std::max(h0, g * hpg), b = std::min(h1, (g + 1) * hpg);  // this rank's heads of group g
    for (int64_t t = 0; t < T; ++t)
      linear_cols(o + (t * Hr + a - h0) * hd, 1, 0, (b - a) * hd, L.wo_a.p() + g * r * gin, gin, (a - g * hpg) * hd,
                  r, mid + (t * width + g - base) * r);
  }
}

// Grouped output projection of heads [h0, h1): wo_a per group (group_outputs), then wo_b over the groups. One rank:
// every group, no collective. HeadShard: partial sums reduced over the ranks, or (exact) the projection's input
// gathered whole and wo_b run here over every group in the one-rank order (see HeadShard).
Status DeepseekV4Cpu::output_projection(const LayerWeights& L, const std::vector<float>& o, int64_t T, int64_t h0,
                                        int64_t h1, std::vector<float>& out) const {
  const int64_t H = cfg_.num_attention_heads, hd = cfg_.head_dim, D = cfg_.hidden_size;
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, hpg = H / G;
  if (!heads_.exact) {
    const int64_t g0 = h0 / hpg, g1 = h1 > h0 ? (h1 + hpg - 1) / hpg : g0, ng = g1 - g0;  // groups touched
    std::vector<float> mid(size_t(T * ng * r));
    group_outputs(L, o.data(), T, h0, h1, g0, ng, mid.data());
    linear_cols(mid.data(), T, ng * r, ng * r, L.wo_b.p(), G * r, g0 * r, D, out.data());
    return heads_.reduce ? heads_.reduce(out) : Status::ok();
  }
  std::vector<float> mid(size_t(T * G * r), 0.0f);
  if (heads_.whole_groups) {  // this rank's groups' wo_a outputs, zero elsewhere, summed over the ranks: exact
    group_outputs(L, o.data(), T, h0, h1, 0, G, mid.data());
    DSI_RETURN_IF_ERROR(heads_.gather(mid));
  } else {  // a group split between ranks: gather the heads' outputs, run every group's wo_a here
    const int64_t Hr = h1 - h0;
    std::vector<float> heads(size_t(T * H * hd), 0.0f);
    for (int64_t t = 0; t < T; ++t) std::copy_n(o.data() + t * Hr * hd, Hr * hd, heads.data() + (t * H + h0) * hd);
    DSI_RETURN_IF_ERROR(heads_.gather(heads));
    group_outputs(L, heads.data(), T, 0, H, 0, G, mid.data());
  }
  linear_cols(mid.data(), T, G * r, G * r, L.wo_b.p(), G * r, 0, D, out.data());
  return Status::ok();
}

// The router of MoE layer l (hash layers route by token id and have no bias), for moe() and moe_exchange().
ops::RouterParams DeepseekV4Cpu::router_params(int64_t l) const {
  const LayerWeights& L = w_.layers[size_t(l)];
  ops::RouterParams rp;
  rp.gate = L.gate.p();
  rp.bias = cfg_.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE ? nullptr : L.gate_bias.data();
  rp.experts = cfg_.n_routed_experts;
  rp.dim = cfg_.hidden_size;
  rp.topk = cfg_.num_experts_per_tok;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob;
  rp.norm_eps = num_.router_norm_eps;
  rp.route_scale = float(cfg_.routed_scaling_factor);
  return rp;
}

Status DeepseekV4Cpu::moe(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const {
  if (shard_.exchange) return moe_exchange(l, s, x, out);
  const LayerWeights& L = w_.layers[size_t(l)];
  const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size, k = cfg_.num_experts_per_tok;
  const bool hash = cfg_.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE;
  const ops::RouterParams rp = router_params(l);
  const float limit = float(cfg_.swiglu_limit);
  std::vector<int32_t> idx(static_cast<size_t>(k));
  std::vector<float> wt(static_cast<size_t>(k));
  std::vector<double> acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < s.T; ++t) {
    const float* xt = x.data() + t * D;
    ops::route_ref(rp, xt, hash ? L.tid2eid.data() + int64_t(s.tok[size_t(t)]) * k : nullptr, idx.data(), wt.data());
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t eid = idx[size_t(j)];
      if (eid < shard_.lo || (shard_.hi >= 0 && eid >= shard_.hi)) continue;  // another rank's expert
      const ExpertWeights& e = L.experts[size_t(eid)];
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, limit}, xt, wt[size_t(j)], acc.data());
    }
    if (L.shared && shard_.shared) {
      const ExpertWeights& e = *L.shared;
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, num_.shared_expert_clamp ? limit : 0.0f}, xt, 1.0f,
                                 acc.data());
    }
    for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] = float(acc[size_t(d)]);
  }
  return shard_.reduce ? shard_.reduce(out) : Status::ok();
}

// DP attention + EP, or EP / TP under --batch-invariant: route every token here, have each pair's expert output
// computed by the expert's rank (shard_.exchange), then the same fp64 accumulation as moe(): sum_j double(w_j) * double(y_j) in top-k order, the
// shared expert last, one rounding to fp32. expert_accumulate_ref adds double(scale) * double(float(acc)) per
// expert, so y_j = its output at scale 1 carries exactly that float: bit-identical to one rank.
Status DeepseekV4Cpu::moe_exchange(int64_t l, const Step& s, const std::vector<float>& x,
                                   std::vector<float>& out) const {
  const LayerWeights& L = w_.layers[size_t(l)];
  const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size, k = cfg_.num_experts_per_tok, T = s.T;
  const bool hash = cfg_.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE;
  const ops::RouterParams rp = router_params(l);
  const float limit = float(cfg_.swiglu_limit);
  std::vector<int32_t> idx(size_t(T * k));
  std::vector<float> wt(size_t(T * k));
  for (int64_t t = 0; t < T; ++t)
    ops::route_ref(rp, x.data() + t * D, hash ? L.tid2eid.data() + int64_t(s.tok[size_t(t)]) * k : nullptr,
                   idx.data() + t * k, wt.data() + t * k);
  const ExpertCompute compute = [&](int32_t e, float, const float* xi, float* yi) {  // at scale 1: weighted below
    const ExpertWeights& ew = L.experts[size_t(e)];
    std::vector<double> acc(static_cast<size_t>(D), 0.0);
    ops::expert_accumulate_ref({ew.w1.p(), ew.w3.p(), ew.w2.p(), D, I, limit}, xi, 1.0f, acc.data());
    for (int64_t d = 0; d < D; ++d) yi[d] = float(acc[size_t(d)]);
  };
  std::vector<float> y;
  DSI_RETURN_IF_ERROR(shard_.exchange(l, std::span<const float>(x.data(), size_t(T * D)), idx, wt, compute, y));
  std::vector<double> acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const float* yj = y.data() + (t * k + j) * D;
      for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += double(wt[size_t(t * k + j)]) * double(yj[d]);
    }
    if (L.shared) {
      const ExpertWeights& e = *L.shared;
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, num_.shared_expert_clamp ? limit : 0.0f},
                                 x.data() + t * D, 1.0f, acc.data());
    }
    for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] = float(acc[size_t(d)]);
  }
  return Status::ok();
}

}  // namespace dsinfer::model
