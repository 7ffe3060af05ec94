// The tensor table of DeepSeek-V4 (see tensor_table.h): names, roles and shapes from config.json.
#include "model/tensor_table.h"

#include <fmt/format.h>

namespace dsinfer::model {

namespace {

struct TableBuilder {
  std::vector<TensorSpec> specs;
  int32_t layer = -1;
  void mat(std::string name, TensorRole role, int64_t rows, int64_t cols, int32_t expert = -1) {
    specs.push_back({std::move(name), role, TensorKind::Matrix, rows, cols, layer, expert});
  }
  void vec(std::string name, TensorRole role, int64_t n) {
    specs.push_back({std::move(name), role, TensorKind::Vector, 1, n, layer, -1});
  }
  void table(std::string name, TensorRole role, int64_t rows, int64_t cols) {
    specs.push_back({std::move(name), role, TensorKind::IndexTable, rows, cols, layer, -1});
  }
};

void attention_tensors(const io::ModelConfig& cfg, int64_t l, const std::string& p, TableBuilder& b) {
  using R = TensorRole;
  const int64_t D = cfg.hidden_size, H = cfg.num_attention_heads, hd = cfg.head_dim, qr = cfg.q_lora_rank;
  const int64_t g = cfg.o_groups, r = cfg.o_lora_rank;
  b.vec(p + "attn.attn_sink", R::AttnSink, H);
  b.mat(p + "attn.wq_a.weight", R::WqA, qr, D);
  b.vec(p + "attn.q_norm.weight", R::QNorm, qr);
  b.mat(p + "attn.wq_b.weight", R::WqB, H * hd, qr);
  b.mat(p + "attn.wkv.weight", R::Wkv, hd, D);
  b.vec(p + "attn.kv_norm.weight", R::KvNorm, hd);
  b.mat(p + "attn.wo_a.weight", R::WoA, g * r, H * hd / g);
  b.mat(p + "attn.wo_b.weight", R::WoB, D, g * r);
  const io::AttnType at = cfg.layer_types[size_t(l)];
  // Main (d = head_dim, c = 2 on CSA, 1 on HCA) and indexer (d = index_head_dim, c = 2) compressors.
  auto compressor = [&](const std::string& cp, int64_t d, int64_t c, bool indexer) {
    b.mat(cp + "wkv.weight", indexer ? R::IdxCompWkv : R::CompWkv, c * d, D);
    b.mat(cp + "wgate.weight", indexer ? R::IdxCompWgate : R::CompWgate, c * d, D);
    b.mat(cp + "ape", indexer ? R::IdxCompApe : R::CompApe, cfg.ratio(l), c * d);
    b.vec(cp + "norm.weight", indexer ? R::IdxCompNorm : R::CompNorm, d);
  };
  if (at != io::AttnType::Sliding) compressor(p + "attn.compressor.", hd, at == io::AttnType::CSA ? 2 : 1, false);
  if (at == io::AttnType::CSA) {
    const int64_t Hi = cfg.index_n_heads, di = cfg.index_head_dim;
    compressor(p + "attn.indexer.compressor.", di, 2, true);
    b.mat(p + "attn.indexer.wq_b.weight", R::IdxWqB, Hi * di, qr);
    b.mat(p + "attn.indexer.weights_proj.weight", R::IdxWeightsProj, Hi, D);
  }
}

void moe_tensors(const io::ModelConfig& cfg, int64_t l, const std::string& p, TableBuilder& b) {
  using R = TensorRole;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
  b.mat(p + "ffn.gate.weight", R::Gate, E, D);
  if (cfg.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE) b.table(p + "ffn.gate.tid2eid", R::Tid2Eid, V, cfg.num_experts_per_tok);
  else b.vec(p + "ffn.gate.bias", R::GateBias, E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = fmt::format("{}ffn.experts.{}.", p, e);
    b.mat(ep + "w1.weight", R::ExpertW1, I, D, int32_t(e));
    b.mat(ep + "w3.weight", R::ExpertW3, I, D, int32_t(e));
    b.mat(ep + "w2.weight", R::ExpertW2, D, I, int32_t(e));
  }
  if (cfg.n_shared_experts > 0) {
    const std::string sp = p + "ffn.shared_experts.";
    b.mat(sp + "w1.weight", R::SharedW1, I, D);
    b.mat(sp + "w3.weight", R::SharedW3, I, D);
    b.mat(sp + "w2.weight", R::SharedW2, D, I);
  }
}

}  // namespace

std::vector<TensorSpec> weight_specs(const io::ModelConfig& cfg) {
  using R = TensorRole;
  TableBuilder b;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult, mix = (2 + n) * n;
  b.mat("embed.weight", R::Embed, V, D);
  if (!cfg.tie_word_embeddings) b.mat("head.weight", R::Head, V, D);
  b.vec("norm.weight", R::FinalNorm, D);
  b.mat("hc_head_fn", R::HcHeadFn, n, n * D);
  b.vec("hc_head_base", R::HcHeadBase, n);
  b.vec("hc_head_scale", R::HcHeadScale, 1);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    b.layer = int32_t(l);
    const std::string p = fmt::format("layers.{}.", l);
    b.vec(p + "attn_norm.weight", R::AttnNorm, D);
    b.vec(p + "ffn_norm.weight", R::FfnNorm, D);
    b.mat(p + "hc_attn_fn", R::HcAttnFn, mix, n * D);
    b.vec(p + "hc_attn_base", R::HcAttnBase, mix);
    b.vec(p + "hc_attn_scale", R::HcAttnScale, 3);
    b.mat(p + "hc_ffn_fn", R::HcFfnFn, mix, n * D);
    b.vec(p + "hc_ffn_base", R::HcFfnBase, mix);
    b.vec(p + "hc_ffn_scale", R::HcFfnScale, 3);
    attention_tensors(cfg, l, p, b);
    moe_tensors(cfg, l, p, b);
  }
  return std::move(b.specs);
}

const char* tensor_role_name(TensorRole role) {
  using R = TensorRole;
  switch (role) {
    case R::Embed: return "embed";
    case R::Head: return "head";
    case R::FinalNorm: return "norm";
    case R::HcHeadFn: return "hc_head_fn";
    case R::HcHeadBase: return "hc_head_base";
    case R::HcHeadScale: return "hc_head_scale";
    case R::AttnNorm: return "attn_norm";
    case R::FfnNorm: return "ffn_norm";
    case R::HcAttnFn: return "hc_attn_fn";
    case R::HcAttnBase: return "hc_attn_base";
    case R::HcAttnScale: return "hc_attn_scale";
    case R::HcFfnFn: return "hc_ffn_fn";
    case R::HcFfnBase: return "hc_ffn_base";
    case R::HcFfnScale: return "hc_ffn_scale";
    case R::AttnSink: return "attn_sink";
    case R::WqA: return "wq_a";
    case R::QNorm: return "q_norm";
    case R::WqB: return "wq_b";
    case R::Wkv: return "wkv";
    case R::KvNorm: return "kv_norm";
    case R::WoA: return "wo_a";
    case R::WoB: return "wo_b";
    case R::CompWkv: return "compressor.wkv";
    case R::CompWgate: return "compressor.wgate";
    case R::CompApe: return "compressor.ape";
    case R::CompNorm: return "compressor.norm";
    case R::IdxCompWkv: return "indexer.compressor.wkv";
    case R::IdxCompWgate: return "indexer.compressor.wgate";
    case R::IdxCompApe: return "indexer.compressor.ape";
    case R::IdxCompNorm: return "indexer.compressor.norm";
    case R::IdxWqB: return "indexer.wq_b";
    case R::IdxWeightsProj: return "indexer.weights_proj";
    case R::Gate: return "gate";
    case R::GateBias: return "gate.bias";
    case R::Tid2Eid: return "gate.tid2eid";
    case R::ExpertW1: return "experts.w1";
    case R::ExpertW3: return "experts.w3";
    case R::ExpertW2: return "experts.w2";
    case R::SharedW1: return "shared_experts.w1";
    case R::SharedW3: return "shared_experts.w3";
    case R::SharedW2: return "shared_experts.w2";
  }
  return "?";
}

DType official_storage(const TensorSpec& s) {
  using R = TensorRole;
  switch (s.role) {
    case R::Tid2Eid: return DType::I64;
    case R::ExpertW1: case R::ExpertW3: case R::ExpertW2: return DType::I8;
    case R::SharedW1: case R::SharedW3: case R::SharedW2:
    case R::WqA: case R::WqB: case R::Wkv: case R::WoA: case R::WoB: case R::IdxWqB: return DType::F8_E4M3;
    case R::HcHeadFn: case R::HcHeadBase: case R::HcHeadScale:
    case R::HcAttnFn: case R::HcAttnBase: case R::HcAttnScale:
    case R::HcFfnFn: case R::HcFfnBase: case R::HcFfnScale:
    case R::AttnSink: case R::CompApe: case R::IdxCompApe: case R::GateBias: return DType::F32;
    default: return DType::BF16;
  }
}

bool read_as_floats(TensorRole role) {
  using R = TensorRole;
  return role == R::HcHeadFn || role == R::HcAttnFn || role == R::HcFfnFn || role == R::CompApe || role == R::IdxCompApe;
}

}  // namespace dsinfer::model
