// DeepSeek-V4.1 CPU reference forward (see deepseek_v41.h). Read top to bottom: embed -> per layer [Engram ->
// mHC mixes + collapse with the carried pre -> attn_norm -> attention (CSA2) -> mHC post -> mixes + collapse with
// the attention site's pre -> ffn_norm -> MoE -> mHC post] -> collapse with the last pre -> norm -> head.
// Attention lives in deepseek_v41_attention.cpp, MoE and Engram in deepseek_v41_ffn.cpp.
#include "model/deepseek_v41.h"

#include <filesystem>
#include <numeric>

#include "io/safetensors.h"
#include "model/deepseek_v41_step.h"
#include "ops/mhc/mhc.h"

namespace dsinfer::model {

DeepseekV41Cpu::DeepseekV41Cpu(io::ModelConfig cfg, WeightsV41 w, Numerics num, EngramVocab vocab)
    : cfg_(std::move(cfg)), w_(std::move(w)), numerics_(std::move(num)), num_(v41::Num::from(numerics_)), vocab_(std::move(vocab)) {
  inv_freq_main_ = num_.inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  inv_freq_compress_ = num_.inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
  const auto& v = cfg_.v41;
  if (!v.engram_layer_ids.empty()) {
    const int64_t pad = vocab_.token_map.empty() ? 0 : vocab_.token_map[size_t(v.engram_pad_id)];
    hash_ = ops::make_engram_hash_layout(v.engram_layer_ids, v.engram_max_ngram_size, v.engram_n_heads, v.engram_vocab_size,
                                         v.engram_compressed_vocab_size, pad);
  }
  std::vector<Mat> tables;  // in Engram layer order; the rows live in engram_rows_ only
  for (LayerWeightsV41& L : w_.layers)
    if (L.engram) tables.push_back(std::move(L.engram->table));
  engram_rows_ = std::make_unique<EngramRows>(std::move(tables));
}

Result<std::unique_ptr<DeepseekV41Cpu>> DeepseekV41Cpu::load(const std::string& model_dir, const Numerics& num,
                                                             EngramPlacement placement) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(model_dir));
  if (!cfg.is_v41()) return Status::errorf("{}: not a DeepSeek-V4.1 config", model_dir);
  DSI_ASSIGN_OR_RETURN(io::Checkpoint opened, open_checkpoint_v41(model_dir));
  const auto ckpt = std::make_shared<const io::Checkpoint>(std::move(opened));
  const bool host = placement == EngramPlacement::kHost;
  std::vector<StoredTensorV41> tables;
  auto w = load_weights_v41(cfg, *ckpt, host ? &tables : nullptr);
  if (!w.is_ok()) return w.status().with_context(model_dir);
  EngramVocab vocab;
  const auto& v = cfg.v41;
  if (!v.engram_layer_ids.empty()) {
    DSI_ASSIGN_OR_RETURN(vocab, load_engram_vocab(cfg, model_dir));
  }
  auto m = std::make_unique<DeepseekV41Cpu>(std::move(cfg), std::move(w).value(), num, std::move(vocab));
  if (host) m->engram_rows_ = std::make_unique<EngramRows>(ckpt, std::move(tables));
  for (size_t e = 0; e < v.engram_layer_ids.size(); ++e) {
    const auto& primes = m->hash_.primes[e];
    const int64_t rows = std::accumulate(primes.begin(), primes.end(), int64_t(0));
    if (rows > v.engram_num_embeddings[e])
      return Status::errorf("{}: engram layer {} hashes into {} rows (sum of its primes) but engram_num_embeddings[{}] = {}",
                            model_dir, v.engram_layer_ids[e], rows, e, v.engram_num_embeddings[e]);
  }
  return m;
}

void DeepseekV41Cpu::tap(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows) const {
  if (tap_) tap_(name, layer, v.data(), rows, rows ? int64_t(v.size()) / rows : 0);
}

Status DeepseekV41Cpu::begin_step(const StatePool& state, std::span<const SeqChunk> chunks, Step& s) const {
  DSI_RETURN_IF_ERROR(flatten_step(cfg_, state, chunks, s));
  if (!cfg_.v41.engram_layer_ids.empty() && state.layout->ngram_rows < cfg_.v41.engram_max_ngram_size)
    return Status::error("forward: the state layout has no Engram n-gram history (laid out for another model?)");
  for (int64_t t = 0; t < s.T && !cfg_.v41.engram_layer_ids.empty(); ++t) {
    if (size_t(s.tok[size_t(t)]) >= vocab_.token_map.size()) {
      const SeqChunk& ch = chunks[s.seq[size_t(t)]];
      return Status::errorf("sequence {} token {}: id {} is not in the tokenizer's Engram vocabulary", s.seq[size_t(t)],
                            s.pos[size_t(t)] - ch.start_pos, s.tok[size_t(t)]);
    }
  }
  s.topk.assign(size_t(s.T), {});
  s.candidates.assign(size_t(s.T), {});
  return Status::ok();
}

Status DeepseekV41Cpu::forward(const StatePool& state, std::span<const SeqChunk> chunks, std::vector<float>& logits) {
  Step s;
  DSI_RETURN_IF_ERROR(begin_step(state, chunks, s));
  if (s.T == 0 && shard_.exchange) {  // DP: a rank without tokens still serves its experts in every MoE layer
    std::vector<float> none;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) DSI_RETURN_IF_ERROR(moe(l, s, none, none));
    logits.clear();
    return Status::ok();
  }
  const int64_t T = s.T, D = cfg_.hidden_size, n = cfg_.hc_mult;
  const float eps = float(cfg_.rms_norm_eps);
  if (!cfg_.v41.engram_layer_ids.empty()) {
    engram_hashes(s);
    engram_rows_->prefetch(s.hashes, T, hash_.cols());  // the host placement's fetch runs behind the layers below
  }

  // embed -> X [T, n, D]; the first site collapses stream 0 only (one-hot pre)
  std::vector<float> X(size_t(T * n * D)), pre(size_t(T * n), 0.0f), pre_a(size_t(T * n));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < n; ++j) std::copy_n(w_.embed.p() + int64_t(s.tok[size_t(t)]) * D, D, X.data() + (t * n + j) * D);
    pre[size_t(t * n)] = 1.0f;
  }
  num_.round(X);
  std::vector<float> y(size_t(T * D)), f(size_t(T * D)), post(size_t(T * n)), comb(size_t(T * n * n)), pre_next(size_t(T * n));
  // One residual site: (pre_out, post, comb) from X; y = norm(collapse(X, pre_in)); f = sublayer(y); X = post(f).
  auto site = [&](const HcWeights& hc, const Vec& norm_w, const std::vector<float>& pre_in, std::vector<float>& pre_out,
                  auto&& sublayer) {
    const ops::HcParams hp{hc.fn.p(), hc.base.data(), hc.scale.data(), n, D, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), eps};
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = X.data() + t * n * D;
      ops::hc_mixes_ref(hp, xt, pre_out.data() + t * n, post.data() + t * n, comb.data() + t * n * n);
      ops::hc_collapse_ref(n, D, xt, pre_in.data() + t * n, y.data() + t * D);
    }
    num_.round(y);
    num_.rmsnorm(y.data(), T, D, norm_w.data(), eps);
    sublayer(y, f);
    for (int64_t t = 0; t < T; ++t)
      ops::hc_post_ref(n, D, f.data() + t * D, post.data() + t * n, comb.data() + t * n * n, X.data() + t * n * D);
    num_.round(X);
  };

  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeightsV41& L = w_.layers[size_t(l)];
    if (L.engram) {
      DSI_RETURN_IF_ERROR(engram(l, s, X));
      tap("engram_streams_out", l, X, T);
    }
    tap("residual", l, X, T);  // the block's input streams: what a DSpark drafter's tap of layer l reads
    Status attn_st = Status::ok();  // a tensor-parallel gather can fail (another rank failed)
    site(L.hc_attn, L.attn_norm, pre, pre_a,
         [&](const std::vector<float>& x, std::vector<float>& out) { attn_st = attention(l, s, x, out); });
    DSI_RETURN_IF_ERROR(attn_st);
    tap("attn_out", l, f, T);
    Status moe_st = Status::ok();  // an expert-parallel reduction can fail (another rank failed)
    site(L.hc_ffn, L.ffn_norm, pre_a, pre_next,
         [&](const std::vector<float>& x, std::vector<float>& out) { moe_st = moe(l, s, x, out); });
    DSI_RETURN_IF_ERROR(moe_st);
    std::swap(pre, pre_next);
    tap("ffn_out", l, f, T);
    tap("streams_out", l, X, T);
    tap("pre_out", l, pre, T);
  }

  // final collapse with the last site's pre -> norm -> head, only for the rows that need logits
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < T; ++t) {
    const size_t c = s.seq[size_t(t)];
    if (chunks[c].all_logits || t + 1 == T || s.seq[size_t(t + 1)] != c) rows.push_back(t);
  }
  std::vector<float> h(rows.size() * size_t(D));
  for (size_t r = 0; r < rows.size(); ++r)
    ops::hc_collapse_ref(n, D, X.data() + rows[r] * n * D, pre.data() + rows[r] * n, h.data() + r * size_t(D));
  num_.round(h);
  num_.rmsnorm(h.data(), int64_t(rows.size()), D, w_.norm.data(), eps);
  tap("final_hidden", -1, h, int64_t(rows.size()));
  logits.assign(rows.size() * size_t(cfg_.vocab_size), 0.0f);
  num_.linear(v41::Gemm::F32, h.data(), int64_t(rows.size()), D, w_.head, logits.data());
  return Status::ok();
}

}  // namespace dsinfer::model
