// DeepSeek-V4.1 MoE and Engram of the CPU reference (see deepseek_v41.h; research/dsv41-architecture.md §2.2,
// §2.5). MoE: sqrt-softplus scores of gate(x) / gate_temp, top-k of scores + bias (bias_vl for image-span
// tokens; a text-only step has none), weights renormalised with +1e-20 and scaled, SwiGLU experts clamped at
// swiglu_limit, the shared expert clamped too. Engram: per position the hash rows of the layer's table,
// projected by wkv into one key per stream and a shared value, gated into every stream before the block.
#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_step.h"
#include "ops/moe/moe.h"

namespace dsinfer::model {

using v41::Gemm;

namespace {

// Official expert (FP4 or FP8 kernels): w2(bf16(weight * silu(min(w1 x, l)) * clamp(w3 x, -l, l))), bf16 output.
void expert_official(const v41::Num& num, Gemm g, const ExpertWeights& e, const float* x, int64_t D, float weight,
                     float limit, float* y) {
  const int64_t I = e.w1.rows;
  std::vector<float> gate(static_cast<size_t>(I)), up(static_cast<size_t>(I));
  num.linear(g, x, 1, D, e.w1, gate.data());
  num.linear(g, x, 1, D, e.w3, up.data());
  for (int64_t i = 0; i < I; ++i) {
    float gt = gate[size_t(i)], u = up[size_t(i)];
    if (limit > 0) {
      u = std::fmin(std::fmax(u, -limit), limit);
      gt = std::fmin(gt, limit);
    }
    gate[size_t(i)] = round_bf16(weight * (gt / (1.0f + std::exp(-gt)) * u));
  }
  num.linear(g, gate.data(), 1, I, e.w2, y);
}

}  // namespace

// Expert parallelism (shard_): this rank's routed experts and (shard_.shared) the shared expert give a partial sum
// that shard_.reduce adds over the ranks; official numerics round the sum to bf16 after it, as one rank does. With
// shard_.exchange every pair's output comes from its expert's rank and combine() runs the one-rank order here.
Status DeepseekV41Cpu::moe(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size, k = cfg_.num_experts_per_tok, T = s.T;
  const float limit = float(cfg_.swiglu_limit);
  ops::RouterParams rp;
  rp.gate = L.gate.p();
  rp.experts = cfg_.n_routed_experts;
  rp.dim = D;
  rp.topk = k;
  rp.score = cfg_.scoring_func;
  rp.renormalize = cfg_.norm_topk_prob && k > 1;
  rp.norm_eps = 1e-20f;  // V4.1: +1e-20 on the sum in both the official code and transformers
  rp.route_scale = float(cfg_.routed_scaling_factor);
  std::vector<int32_t> idx(size_t(T * k));
  std::vector<float> wt(size_t(T * k));
  for (int64_t t = 0; t < T; ++t) {
    const bool image = false;  // image-span tokens (vision input) would route with bias_vl
    rp.bias = image && !L.gate_bias_vl.empty() ? L.gate_bias_vl.data() : L.gate_bias.data();
    ops::route_ref(rp, x.data() + t * D, nullptr, idx.data() + t * k, wt.data() + t * k);
  }
  if (tap_) {  // the routing, for taps
    tap("ffn.in", l, x, T);
    tap("ffn.ridx", l, std::vector<float>(idx.begin(), idx.end()), T);
    tap("ffn.rw", l, wt, T);
  }
  // Pair (e, w)'s output as combine() adds it: official, the weighted bf16 expert output; else at scale 1.
  const ExpertCompute pair = [&](int32_t e, float w, const float* xi, float* yi) {
    const ExpertWeights& ew = L.experts[size_t(e)];
    if (num_.official) return expert_official(num_, Gemm::FP4, ew, xi, D, w, limit, yi);
    std::vector<double> acc(static_cast<size_t>(D), 0.0);
    ops::expert_accumulate_ref({ew.w1.p(), ew.w3.p(), ew.w2.p(), D, I, limit}, xi, 1.0f, acc.data());
    for (int64_t d = 0; d < D; ++d) yi[d] = float(acc[size_t(d)]);
  };
  if (shard_.exchange) {
    std::vector<float> y;
    DSI_RETURN_IF_ERROR(shard_.exchange(l, std::span<const float>(x.data(), size_t(T * D)), idx, wt, pair, y));
    for (int64_t t = 0; t < T; ++t)
      combine(l, x.data() + t * D, idx.data() + t * k, wt.data() + t * k, y.data() + t * k * D, out.data() + t * D);
    return Status::ok();
  }
  std::vector<float> eo(static_cast<size_t>(D));
  std::vector<double> acc(static_cast<size_t>(D));
  auto mine = [&](int64_t e) { return e >= shard_.lo && (shard_.hi < 0 || e < shard_.hi); };
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * D;
    const int32_t* it = idx.data() + t * k;
    const float* wtt = wt.data() + t * k;
    if (num_.official) {  // experts summed in fp32 in expert-id order, then the shared expert, then bf16
      std::vector<int32_t> order(it, it + k);
      std::sort(order.begin(), order.end());
      std::vector<float> y(static_cast<size_t>(D), 0.0f);
      for (int32_t e : order) {
        if (!mine(e)) continue;  // another rank's expert
        pair(e, wtt[std::find(it, it + k, e) - it], xt, eo.data());
        for (int64_t d = 0; d < D; ++d) y[size_t(d)] += eo[size_t(d)];
      }
      std::fill(eo.begin(), eo.end(), 0.0f);
      if (shard_.shared) expert_official(num_, Gemm::FP8, L.shared, xt, D, 1.0f, limit, eo.data());
      for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] = y[size_t(d)] + eo[size_t(d)];  // bf16 below
      continue;
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      if (!mine(it[j])) continue;
      const ExpertWeights& e = L.experts[size_t(it[j])];
      ops::expert_accumulate_ref({e.w1.p(), e.w3.p(), e.w2.p(), D, I, limit}, xt, wtt[j], acc.data());
    }
    if (shard_.shared)
      ops::expert_accumulate_ref({L.shared.w1.p(), L.shared.w3.p(), L.shared.w2.p(), D, I, limit}, xt, 1.0f,
                                 acc.data());
    for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] = float(acc[size_t(d)]);
  }
  if (shard_.reduce) DSI_RETURN_IF_ERROR(shard_.reduce(out));
  if (num_.official)
    for (int64_t i = 0; i < T * D; ++i) out[size_t(i)] = round_bf16(out[size_t(i)]);
  return Status::ok();
}

// One token's MoE output from its pairs' outputs y [k, D] (moe()'s `pair`), in the one-rank order: official, the
// weighted expert outputs summed in fp32 in expert-id order, the shared expert added, bf16; else sum_j double(w_j) *
// double(y_j) in top-k order and the shared expert in fp64, one rounding (expert_accumulate_ref adds exactly
// double(w) * double(float(its sum)) per expert, so this is one rank's arithmetic).
void DeepseekV41Cpu::combine(int64_t l, const float* x, const int32_t* idx, const float* wt, const float* y,
                             float* out) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size, k = cfg_.num_experts_per_tok;
  const float limit = float(cfg_.swiglu_limit);
  if (num_.official) {
    std::vector<int32_t> order(idx, idx + k);
    std::sort(order.begin(), order.end());
    std::vector<float> sum(static_cast<size_t>(D), 0.0f), eo(static_cast<size_t>(D), 0.0f);
    for (int32_t e : order) {
      const float* ye = y + (std::find(idx, idx + k, e) - idx) * D;
      for (int64_t d = 0; d < D; ++d) sum[size_t(d)] += ye[d];
    }
    expert_official(num_, Gemm::FP8, L.shared, x, D, 1.0f, limit, eo.data());
    for (int64_t d = 0; d < D; ++d) out[d] = round_bf16(sum[size_t(d)] + eo[size_t(d)]);
    return;
  }
  std::vector<double> acc(static_cast<size_t>(D), 0.0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += double(wt[j]) * double(y[j * D + d]);
  ops::expert_accumulate_ref({L.shared.w1.p(), L.shared.w3.p(), L.shared.w2.p(), D, I, limit}, x, 1.0f, acc.data());
  for (int64_t d = 0; d < D; ++d) out[d] = float(acc[size_t(d)]);
}

// Hash ids of every token for every Engram layer, reading the n-gram history of the sequence's slot (written
// here for this step's tokens, in order, so a chunk hashes across its start exactly like one full forward).
void DeepseekV41Cpu::engram_hashes(Step& s) const {
  const cache::StateLayout& lay = *s.state->layout;
  const int64_t N = hash_.max_ngram, cols = hash_.cols(), layers = int64_t(hash_.primes.size());
  s.hashes.assign(size_t(s.T * layers * cols), 0);
  std::vector<int64_t> tok(static_cast<size_t>(N));
  for (int64_t t = 0; t < s.T; ++t) {
    const SeqChunk& ch = s.chunks[s.seq[size_t(t)]];
    const int64_t p = s.pos[size_t(t)];
    int32_t* hist = reinterpret_cast<int32_t*>(s.state->slots + ch.slot * (lay.slot_bytes / 4) + lay.ngram_offset / 4);
    hist[p % lay.ngram_rows] = int32_t(vocab_.token_map[size_t(s.tok[size_t(t)])]);
    for (int64_t sh = 0; sh < N; ++sh) tok[size_t(sh)] = p - sh >= 0 ? hist[(p - sh) % lay.ngram_rows] : -1;
    for (int64_t e = 0; e < layers; ++e) ops::engram_hash_ref(hash_, e, tok.data(), s.hashes.data() + (t * layers + e) * cols);
  }
}

Status DeepseekV41Cpu::engram(int64_t l, const Step& s, std::vector<float>& X) const {
  const EngramWeights& E = *w_.layers[size_t(l)].engram;
  const int64_t e = cfg_.engram_index(l), cols = hash_.cols();
  const int64_t hd = cfg_.v41.engram_head_dim, n = cfg_.hc_mult, D = cfg_.hidden_size;
  std::vector<float> all, rows(size_t(cols * hd)), kv;
  DSI_RETURN_IF_ERROR(engram_rows_->rows(e, s.hashes, s.T, cols, all));  // wherever the table is placed
  const ops::EngramGateParams gp{n, D, float(cfg_.rms_norm_eps), E.qk.data()};
  for (int64_t t = 0; t < s.T; ++t) {
    std::copy_n(all.data() + t * cols * hd, cols * hd, rows.data());
    num_.round(rows);
    num_.linear(Gemm::FP8, rows, 1, E.wkv, kv);  // n keys, then the shared value
    float* xt = X.data() + t * n * D;
    ops::engram_gate_ref(gp, xt, kv.data(), kv.data() + n * D);
    num_.round(xt, n * D);
  }
  return Status::ok();
}

}  // namespace dsinfer::model
