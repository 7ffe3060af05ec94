// DeepSeek-V4.1 attention (CSA2) of the CPU reference (see deepseek_v41.h; research/dsv41-architecture.md §2.3-2.4).
// Every layer: q = wq_b(q_norm(wq_a x)) with RoPE (no per-head norm), window KV = QAT-fp8(RoPE(kv_norm(wkv x))).
// A KV-source layer pools its tokens (ratio r) into latents; each emitted latent j gives an indexer key
// (k_norm(wk latent), RoPE at j*r, QAT-fp4/32) and a compressed entry (RoPE at j*r, QAT-fp4/16-e4m3), stored in
// the source's token blocks. An index-source layer scores the source's keys visible to each token, the candidate
// source keeps the best blocks (its own top-k unrestricted), later index sources pick inside them; the latest
// index source's top-k is what every layer up to the next one attends to, next to its own window rows.
#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_step.h"
#include "ops/csa2/csa2.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace dsinfer::model {

using v41::Gemm;

namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The official sparse_attn kernel: online softmax over blocks of 64 keys (fp32 logits, running max from -1e30),
// probabilities rounded to bf16 before P.V, the sink added to the denominator at the end, bf16 output.
void sparse_attention_official(const ops::SparseAttentionParams& p, const float* q, const std::vector<const float*>& keys,
                               float* out) {
  const int64_t n = int64_t(keys.size()), d = p.dim;
  std::vector<float> s(64), acc(static_cast<size_t>(d));
  for (int64_t h = 0; h < p.heads; ++h) {
    const float* qh = q + h * d;
    float mx = -1e30f, sum = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < n; b += 64) {
      const int64_t e = std::min(n, b + 64);
      float bmax = mx;
      for (int64_t j = b; j < e; ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) dot += double(qh[i]) * double(keys[size_t(j)][i]);
        s[size_t(j - b)] = float(dot) * p.scale;
        bmax = std::fmax(bmax, s[size_t(j - b)]);
      }
      const float rescale = std::exp(mx - bmax);
      double psum = 0.0;
      std::vector<double> pv(static_cast<size_t>(d), 0.0);
      for (int64_t j = b; j < e; ++j) {
        const float pj = std::exp(s[size_t(j - b)] - bmax);
        psum += pj;
        const double pb = round_bf16(pj);
        for (int64_t i = 0; i < d; ++i) pv[size_t(i)] += pb * double(keys[size_t(j)][i]);
      }
      sum = sum * rescale + float(psum);
      for (int64_t i = 0; i < d; ++i) acc[size_t(i)] = acc[size_t(i)] * rescale + float(pv[size_t(i)]);
      mx = bmax;
    }
    sum += std::exp(p.sinks[h] - mx);
    for (int64_t i = 0; i < d; ++i) out[h * d + i] = round_bf16(acc[size_t(i)] / sum);
  }
}

// Official indexer scores: bf16 einsum per head, ReLU, times the bf16 head weight (which carries the softmax
// scale), summed over heads into a bf16 score.
std::vector<float> index_scores_official(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys,
                                         int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    double total = 0.0;
    for (int64_t h = 0; h < heads; ++h) {
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot += double(q[h * dim + i]) * double(keys[t * dim + i]);
      total += double(round_bf16(std::fmax(round_bf16(float(dot)), 0.0f) * w[h]));
    }
    out[size_t(t)] = round_bf16(float(total));
  }
  return out;
}

}  // namespace

struct DeepseekV41Cpu::IndexQueries {
  std::vector<float> iq, iw;  // [T, Hi, di] RoPE'd + QAT-fp4/32 queries, [T, Hi] head weights
};

void DeepseekV41Cpu::index_queries(int64_t l, const Step& s, const std::vector<float>& x, const std::vector<float>& cq,
                                   IndexQueries& q) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  const int64_t T = s.T, Hi = cfg_.index_n_heads, di = cfg_.index_head_dim, rd = cfg_.qk_rope_head_dim;
  num_.linear(Gemm::FP8, cq, T, L.idx_wq_b, q.iq);
  num_.linear(Gemm::BF16, x, T, L.idx_weights_proj, q.iw);
  // transformers scales the head weights by Hi^-1/2 and the scores by di^-1/2; the official code folds both
  // into the (bf16) head weights.
  const double hs = std::pow(double(Hi), -0.5), ds = std::pow(double(di), -0.5);
  for (auto& w : q.iw) w = num_.official ? round_bf16(w * float(hs * ds)) : w * float(hs);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hi; ++h) {
      float* qh = q.iq.data() + (t * Hi + h) * di;
      num_.rope(qh, di, rd, inv_freq_compress_, s.pos[size_t(t)], false);
      num_.fp4_qat(qh, di, 32, false);
    }
}

// Token t at an index source: scores over the KV source's keys visible to it (the groups it has passed), the
// candidate mask (candidate source) or picking inside it (later index sources), top-k -> s.topk[t].
void DeepseekV41Cpu::index_select(int64_t l, Step& s, int64_t t, const IndexQueries& q) const {
  const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim, m = cfg_.ratio(l);
  const auto& v = cfg_.v41;
  const SeqChunk& ch = s.chunks[s.seq[size_t(t)]];
  const ops::LayerStateView sv = layer_view(*s.state, cfg_.kv_source_of(l));
  const int64_t visible = (s.pos[size_t(t)] + 1) / m;
  std::vector<float> keys(static_cast<size_t>(visible * di));
  for (int64_t j = 0; j < visible; ++j) std::copy_n(sv.index_key(ch.block_table.data(), j), di, keys.data() + j * di);
  const float* qt = q.iq.data() + t * Hi * di;
  const std::vector<float> sc = num_.official ? index_scores_official(qt, q.iw.data() + t * Hi, Hi, di, keys.data(), visible)
                                              : ops::csa2_index_scores_ref(qt, q.iw.data() + t * Hi, Hi, di, keys.data(), visible);
  const uint8_t* mask = nullptr;
  if (l == v.candidate_source_layer_id) {  // publishes the mask; its own top-k is unrestricted
    s.candidates[size_t(t)] = num_.official ? ops::csa2_candidate_blocks_torch(sc, v.candidate_topk_blocks, v.candidate_block_size)
                                            : ops::csa2_candidate_blocks_ref(sc, v.candidate_topk_blocks, v.candidate_block_size);
  } else if (v.candidate_source_layer_id >= 0 && v.candidate_source_layer_id < l && !s.candidates[size_t(t)].empty()) {
    mask = s.candidates[size_t(t)].data();
  }
  s.topk[size_t(t)] = num_.official ? ops::csa2_topk_torch(sc, cfg_.index_topk, mask) : ops::csa2_topk_ref(sc, cfg_.index_topk, mask);
}

// Token t at a KV source: feeds the compressor; a completed group j becomes an indexer key (from the pre-RoPE
// latent) and a compressed entry, both stored in the source's token blocks.
void DeepseekV41Cpu::emit_entry(int64_t l, const Step& s, int64_t t, const float* ckv, const float* cg) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  const int64_t hd = cfg_.head_dim, di = cfg_.index_head_dim, rd = cfg_.qk_rope_head_dim, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps);
  const SeqChunk& ch = s.chunks[s.seq[size_t(t)]];
  const int64_t p = s.pos[size_t(t)];
  const ops::LayerStateView v = layer_view(*s.state, l);
  std::vector<float> latent(static_cast<size_t>(hd)), key;
  if (m > 1) {
    const ops::Csa2CompressorParams cp{m, hd, v.frontier_rows};
    if (!ops::csa2_compress_step_ref(cp, v.frontier(ch.slot), ckv, cg, p, latent.data())) return;
    num_.round(latent);
  } else {
    std::copy_n(ckv, hd, latent.data());
  }
  num_.rmsnorm(latent.data(), 1, hd, L.comp_norm.data(), eps);
  const int64_t j = p / m, gpos = j * m;  // the entry stands for its group's first token
  num_.linear(Gemm::BF16, latent, 1, L.idx_wk, key);
  num_.rmsnorm(key.data(), 1, di, L.idx_k_norm.data(), eps);
  num_.rope(key.data(), di, rd, inv_freq_compress_, gpos, false);
  num_.fp4_qat(key.data(), di, 32, false);
  std::copy_n(key.data(), di, v.index_key(ch.block_table.data(), j));
  num_.rope(latent.data(), hd, rd, inv_freq_compress_, gpos, false);
  num_.fp4_qat(latent.data(), hd, 16, true);
  std::copy_n(latent.data(), hd, v.entry(ch.block_table.data(), j));
}

Status DeepseekV41Cpu::attention(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  // This rank's query heads [h0, h0 + H) (all of them on one rank; tensor parallelism: a slice, see HeadShard).
  const int64_t h0 = heads_.lo, H = (heads_.hi < 0 ? cfg_.num_attention_heads : heads_.hi) - h0;
  const int64_t T = s.T, hd = cfg_.head_dim;
  const int64_t rd = cfg_.qk_rope_head_dim, W = cfg_.sliding_window, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps);
  const std::vector<float>& inv = m == 0 ? inv_freq_main_ : inv_freq_compress_;

  std::vector<float> cq, q, kv;
  num_.linear(Gemm::FP8, x, T, L.wq_a, cq);
  num_.rmsnorm(cq.data(), T, cfg_.q_lora_rank, L.q_norm.data(), eps);
  tap("attn.in", l, x, T);
  tap("attn.cq", l, cq, T);
  q.resize(size_t(T * H * hd));
  num_.linear(Gemm::FP8, cq.data(), T, cfg_.q_lora_rank, L.wq_b.p() + h0 * hd * cfg_.q_lora_rank, H * hd, q.data());
  num_.linear(Gemm::FP8, x, T, L.wkv, kv);
  num_.rmsnorm(kv.data(), T, hd, L.kv_norm.data(), eps);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) num_.rope(q.data() + (t * H + h) * hd, hd, rd, inv, s.pos[size_t(t)], false);
    num_.rope(kv.data() + t * hd, hd, rd, inv, s.pos[size_t(t)], false);
    num_.fp8_qat(kv.data() + t * hd, hd);
  }
  tap("attn.q", l, q, T);
  tap("attn.kv", l, kv, T);
  const int64_t src = cfg_.kv_source_of(l);
  std::vector<float> ckv, cg;  // KV source: fp32 pooling projections (ratio > 1) or the ratio-1 latents
  if (src == l) {
    num_.linear(m > 1 ? Gemm::F32 : Gemm::BF16, x, T, L.comp_wkv, ckv);
    if (m > 1) num_.linear(Gemm::F32, x, T, L.comp_wgate, cg);
  }
  IndexQueries iq;
  const bool index_source = m > 0 && contains(cfg_.v41.index_source_layer_ids, l);
  if (index_source) {
    index_queries(l, s, x, cq, iq);
    tap("idx.iq", l, iq.iq, T);
    tap("idx.iw", l, iq.iw, T);
  }

  // Stateful part, token by token in sequence order: ring row, source entry, top-k, attention.
  const ops::LayerStateView v = layer_view(*s.state, l), sv = m > 0 ? layer_view(*s.state, src) : v;
  std::vector<float> o(size_t(T * H * hd));
  std::vector<const float*> keys;
  const ops::SparseAttentionParams ap{H, hd, float(1.0 / std::sqrt(double(hd))), L.attn_sink.data() + h0};
  for (int64_t t = 0; t < T; ++t) {
    const SeqChunk& ch = s.chunks[s.seq[size_t(t)]];
    const int64_t p = s.pos[size_t(t)];
    std::copy_n(kv.data() + t * hd, hd, v.ring_row(ch.slot, p));
    if (src == l) emit_entry(l, s, t, ckv.data() + t * hd, m > 1 ? cg.data() + t * hd : nullptr);
    if (index_source) index_select(l, s, t, iq);
    keys.clear();  // the window (oldest first), then the chosen compressed entries of the KV source
    for (int64_t w = std::max<int64_t>(0, p - W + 1); w <= p; ++w) keys.push_back(v.ring_row(ch.slot, w));
    if (m > 0)
      for (int32_t j : s.topk[size_t(t)]) keys.push_back(sv.entry(ch.block_table.data(), j));
    float* ot = o.data() + t * H * hd;
    if (num_.official) sparse_attention_official(ap, q.data() + t * H * hd, keys, ot);
    else ops::sparse_attention_ref(ap, q.data() + t * H * hd, keys.data(), int64_t(keys.size()), ot);
    for (int64_t h = 0; h < H; ++h) num_.rope(ot + h * hd, hd, rd, inv, p, true);
  }
  tap("attn.o", l, o, T);
  if (index_source && tap_) {  // the picks, in the order of the selection, -1 past its end
    std::vector<float> sel(size_t(T * cfg_.index_topk), -1.0f);
    for (int64_t t = 0; t < T; ++t)
      for (size_t i = 0; i < s.topk[size_t(t)].size() && int64_t(i) < cfg_.index_topk; ++i)
        sel[size_t(t * cfg_.index_topk) + i] = float(s.topk[size_t(t)][i]);
    tap("idx.sel", l, sel, T);
  }
  return output_projection(l, o, T, out);
}

// Grouped output projection: group g's heads [H/G * hd] -> wo_a rows [g*r, (g+1)*r) (bf16 GEMM), then wo_b (FP8
// GEMM) over every group. Tensor parallelism (heads_.hi >= 0): the exact way of HeadShard -- this rank's groups'
// wo_a outputs (or, a group split between ranks, its heads' outputs) gathered over the ranks, then the rest here in
// the one-rank order.
Status DeepseekV41Cpu::output_projection(int64_t l, const std::vector<float>& o, int64_t T, std::vector<float>& out) const {
  const LayerWeightsV41& L = w_.layers[size_t(l)];
  const int64_t H = cfg_.num_attention_heads, hd = cfg_.head_dim, G = cfg_.o_groups, r = cfg_.o_lora_rank;
  const int64_t hpg = H / G, gin = hpg * hd;
  const bool split = heads_.hi >= 0;
  const int64_t h0 = split ? heads_.lo : 0, h1 = split ? heads_.hi : H;
  std::vector<float> mid(size_t(T * G * r), 0.0f);
  // wo_a of the groups [g0, g1), whose heads are columns of src [T, width * hd] starting at head `first`
  const auto wo_a = [&](const float* src, int64_t width, int64_t first, int64_t g0, int64_t g1) {
    std::vector<float> xin(size_t(T * gin)), yo(size_t(T * r));
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t t = 0; t < T; ++t) std::copy_n(src + (t * width + g * hpg - first) * hd, gin, xin.data() + t * gin);
      num_.linear(Gemm::BF16, xin.data(), T, gin, L.wo_a.p() + g * r * gin, r, yo.data());
      for (int64_t t = 0; t < T; ++t) std::copy_n(yo.data() + t * r, r, mid.data() + (t * G + g) * r);
    }
  };
  if (!split) {
    wo_a(o.data(), H, 0, 0, G);
  } else if (heads_.whole_groups) {  // this rank's groups, zero elsewhere, summed over the ranks: exact
    wo_a(o.data(), h1 - h0, h0, h0 / hpg, h1 / hpg);
    DSI_RETURN_IF_ERROR(heads_.gather(mid));
  } else {  // a group split between ranks: gather the heads' outputs, every group's wo_a here
    std::vector<float> heads(size_t(T * H * hd), 0.0f);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(o.data() + t * (h1 - h0) * hd, (h1 - h0) * hd, heads.data() + (t * H + h0) * hd);
    DSI_RETURN_IF_ERROR(heads_.gather(heads));
    wo_a(heads.data(), H, 0, 0, G);
  }
  tap("attn.mid", l, mid, T);
  num_.linear(Gemm::FP8, mid.data(), T, G * r, L.wo_b, out.data());
  return Status::ok();
}

}  // namespace dsinfer::model
