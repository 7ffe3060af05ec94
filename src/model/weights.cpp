// Checkpoint -> fp32 Weights (see weights.h). Problems are collected (up to a few) and reported together,
// each naming the tensor, the file and expected vs found.
#include "model/weights.h"

#include <map>
#include <set>
#include <cstring>

#include "io/quant.h"

namespace dsinfer::model {

using io::TensorView;

std::string canonical_tensor_name(const std::string& name) {
  std::string n = name;
  auto starts = [&](const std::string& p) { return n.rfind(p, 0) == 0; };
  auto replace_suffix = [&](const std::string& from, const std::string& to) {
    if (n.size() >= from.size() && n.compare(n.size() - from.size(), from.size(), from) == 0)
      n = n.substr(0, n.size() - from.size()) + to;
  };
  if (starts("model.")) n = n.substr(6);
  if (starts("mtp.")) return "";  // MTP / drafter layers are loaded by the drafter, not the main model
  if (n == "embed_tokens.weight") n = "embed.weight";
  if (n == "lm_head.weight") n = "head.weight";
  if (n == "hc_head.hc_fn") n = "hc_head_fn";
  if (n == "hc_head.hc_base") n = "hc_head_base";
  if (n == "hc_head.hc_scale") n = "hc_head_scale";
  replace_suffix(".attn.norm.weight", ".attn.kv_norm.weight");
  replace_suffix(".weight_scale_inv", ".scale");
  replace_suffix(".ffn.gate.e_score_correction_bias", ".ffn.gate.bias");
  return n;
}

namespace {

// Walks the weights a config needs (in load_impl's order). With a checkpoint it validates each tensor and, when
// `dequantize`, converts it to fp32; every walked tensor is recorded as a ResolvedTensor (data views null when
// there is no checkpoint: then only the specs are collected).
class Loader {
 public:
  Loader(const io::ModelConfig& cfg, const io::Checkpoint* ckpt, bool dequantize)
      : cfg_(cfg), ckpt_(ckpt), dequantize_(dequantize) {
    if (!ckpt) return;
    for (const auto& [name, t] : ckpt->tensors()) {
      std::string c = canonical_tensor_name(name);
      if (c.empty()) continue;
      if (by_canon_.count(c))
        error(fmt::format("tensors '{}' and '{}' both map to '{}'", by_canon_[c]->name, name, c));
      by_canon_[c] = &t;
    }
  }

  // A weight of logical shape [rows, cols] in any supported storage format.
  Mat mat(const std::string& name, int64_t rows, int64_t cols, TensorKind kind = TensorKind::Matrix) {
    Mat m;
    m.rows = rows;
    m.cols = cols;
    resolved_.push_back({{name, kind, rows, cols}, nullptr, nullptr});
    if (!ckpt_) return m;
    const TensorView* t = take(name);
    if (!t) return m;
    resolved_.back().data = t;
    fp32_storage_ &= t->dtype == DType::F32;
    // fp32 storage is allocated only once the tensor's shape matched: a corrupt config.json size must be an
    // error naming the tensor, not an allocation failure.
    auto alloc = [&]() -> float* {
      if (!dequantize_) return nullptr;
      m.data.assign(size_t(rows * cols), 0.0f);
      return m.data.data();
    };
    auto where = [&] { return fmt::format("tensor '{}' ({})", name, t->file); };
    const std::vector<int64_t> logical{rows, cols};
    // Vectors are stored 1-D: [n] is the logical [1, n].
    const bool shape_ok = t->shape == logical || (rows == 1 && t->shape == std::vector<int64_t>{cols});
    switch (t->dtype) {
      case DType::F32:
      case DType::BF16:
      case DType::F16:
        if (!shape_ok) return shape_error(where(), rows == 1 ? std::vector<int64_t>{cols} : logical, t), m;
        if (float* dst = alloc()) io::convert_to_f32(t->dtype, t->data, rows * cols, dst);
        return m;
      case DType::F8_E4M3: {
        if (!shape_ok) return shape_error(where(), rows == 1 ? std::vector<int64_t>{cols} : logical, t), m;
        const int64_t bn = cfg_.fp8_block_n, bk = cfg_.fp8_block_k;
        const TensorView* s = scale_for(name, {(rows + bn - 1) / bn, (cols + bk - 1) / bk});
        resolved_.back().scale = s;
        if (float* dst = s ? alloc() : nullptr) io::dequant_fp8_block(t->data, rows, cols, s->data, s->dtype, bn, bk, dst);
        return m;
      }
      case DType::I8:
      case DType::U8: {
        const std::vector<int64_t> packed{rows, cols / 2};
        if (cols % 32 || t->shape != packed) {
          error(fmt::format("{}: FP4 e2m1 storage of logical {} needs packed shape {} with in % 32 == 0, found {} {}",
                            where(), io::shape_str(logical), io::shape_str(packed), dtype_name(t->dtype),
                            io::shape_str(t->shape)));
          return m;
        }
        const TensorView* s = scale_for(name, {rows, cols / 32});
        resolved_.back().scale = s;
        if (float* dst = s ? alloc() : nullptr) io::dequant_fp4_e2m1(t->data, rows, cols, s->data, s->dtype, 32, dst);
        return m;
      }
      default:
        error(fmt::format("{}: dtype {} is not a weight format (expected F32, BF16, F16, F8_E4M3 or packed FP4 I8)",
                          where(), dtype_name(t->dtype)));
        return m;
    }
  }

  Vec vec(const std::string& name, int64_t n) {
    Mat m = mat(name, 1, n, TensorKind::Vector);
    return std::move(m.data);
  }

  std::vector<int32_t> index_table(const std::string& name, int64_t rows, int64_t cols, int64_t max_value) {
    std::vector<int32_t> out;
    resolved_.push_back({{name, TensorKind::IndexTable, rows, cols}, nullptr, nullptr});
    if (!ckpt_) return out;
    const TensorView* t = take(name);
    if (!t) return out;
    resolved_.back().data = t;
    const std::vector<int64_t> want{rows, cols};
    if ((t->dtype != DType::I64 && t->dtype != DType::I32) || t->shape != want) {
      error(fmt::format("tensor '{}' ({}): expected I64 or I32 {}, found {} {}", name, t->file, io::shape_str(want),
                        dtype_name(t->dtype), io::shape_str(t->shape)));
      return out;
    }
    out.resize(size_t(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t v = t->int_at(i);
      if (v < 0 || v >= max_value) {
        error(fmt::format("tensor '{}': entry {} = {} is not an expert id in [0, {})", name, i, v, max_value));
        return {};
      }
      out[size_t(i)] = int32_t(v);
    }
    return out;
  }

  bool fp32_storage() const { return fp32_storage_; }
  std::vector<ResolvedTensor>& resolved() { return resolved_; }

  Status finish() {
    for (const auto& [c, t] : by_canon_)
      if (!used_.count(c))
        error(fmt::format("unexpected tensor '{}' ({}) is not part of a DeepSeek-V4 model with this config.json", t->name,
                          t->file));
    if (errors_.empty()) return Status::ok();
    std::string msg = fmt::format("checkpoint does not match config.json ({} problem{}):", errors_.size(),
                                  errors_.size() > 1 ? "s" : "");
    for (size_t i = 0; i < errors_.size() && i < 12; ++i) msg += "\n  " + errors_[i];
    if (errors_.size() > 12) msg += fmt::format("\n  ... and {} more", errors_.size() - 12);
    return Status::error(msg);
  }

 private:
  const TensorView* take(const std::string& name) {
    used_.insert(name);
    auto it = by_canon_.find(name);
    if (it == by_canon_.end()) {
      error(fmt::format("missing tensor '{}'", name));
      return nullptr;
    }
    return it->second;
  }

  const TensorView* scale_for(const std::string& weight_name, std::vector<int64_t> want) {
    std::string base = weight_name.size() > 7 && weight_name.compare(weight_name.size() - 7, 7, ".weight") == 0
                           ? weight_name.substr(0, weight_name.size() - 7)
                           : weight_name;
    std::string sname = base + ".scale";
    const TensorView* s = take(sname);
    if (!s) return nullptr;
    if ((s->dtype != DType::F8_E8M0 && s->dtype != DType::F32 && s->dtype != DType::BF16) || s->shape != want) {
      error(fmt::format("tensor '{}' ({}): expected F8_E8M0 or F32 scales {}, found {} {}", sname, s->file,
                        io::shape_str(want), dtype_name(s->dtype), io::shape_str(s->shape)));
      return nullptr;
    }
    return s;
  }

  void shape_error(const std::string& where, const std::vector<int64_t>& want, const TensorView* t) {
    error(fmt::format("{}: expected shape {}, found {} {}", where, io::shape_str(want), dtype_name(t->dtype),
                      io::shape_str(t->shape)));
  }

  void error(std::string e) { errors_.push_back(std::move(e)); }

  const io::ModelConfig& cfg_;
  const io::Checkpoint* ckpt_;
  bool dequantize_;
  std::vector<ResolvedTensor> resolved_;
  std::map<std::string, const TensorView*> by_canon_;
  std::set<std::string> used_;
  std::vector<std::string> errors_;
  bool fp32_storage_ = true;
};

// The one enumeration of a DeepSeek-V4 model's tensors (names, logical shapes, kinds).
Weights load_impl(const io::ModelConfig& cfg, Loader& ld) {
  Weights w;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult, H = cfg.num_attention_heads;
  const int64_t hd = cfg.head_dim, qr = cfg.q_lora_rank, g = cfg.o_groups, r = cfg.o_lora_rank;
  const int64_t E = cfg.n_routed_experts, I = cfg.moe_intermediate_size, k = cfg.num_experts_per_tok;
  const int64_t mix = (2 + n) * n;
  w.embed = ld.mat("embed.weight", V, D);
  w.head = cfg.tie_word_embeddings ? w.embed : ld.mat("head.weight", V, D);
  w.norm = ld.vec("norm.weight", D);
  w.hc_head = {ld.mat("hc_head_fn", n, n * D), ld.vec("hc_head_base", n), ld.vec("hc_head_scale", 1)};
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    LayerWeights L;
    L.attn_norm = ld.vec(p + "attn_norm.weight", D);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", D);
    L.hc_attn = {ld.mat(p + "hc_attn_fn", mix, n * D), ld.vec(p + "hc_attn_base", mix), ld.vec(p + "hc_attn_scale", 3)};
    L.hc_ffn = {ld.mat(p + "hc_ffn_fn", mix, n * D), ld.vec(p + "hc_ffn_base", mix), ld.vec(p + "hc_ffn_scale", 3)};
    L.attn_sink = ld.vec(p + "attn.attn_sink", H);
    L.wq_a = ld.mat(p + "attn.wq_a.weight", qr, D);
    L.q_norm = ld.vec(p + "attn.q_norm.weight", qr);
    L.wq_b = ld.mat(p + "attn.wq_b.weight", H * hd, qr);
    L.wkv = ld.mat(p + "attn.wkv.weight", hd, D);
    L.kv_norm = ld.vec(p + "attn.kv_norm.weight", hd);
    L.wo_a = ld.mat(p + "attn.wo_a.weight", g * r, H * hd / g);
    L.wo_b = ld.mat(p + "attn.wo_b.weight", D, g * r);
    const io::AttnType at = cfg.layer_types[size_t(l)];
    auto compressor = [&](const std::string& cp, int64_t d, int64_t c) {
      return CompressorWeights{ld.mat(cp + "wkv.weight", c * d, D), ld.mat(cp + "wgate.weight", c * d, D),
                               ld.mat(cp + "ape", cfg.ratio(l), c * d), ld.vec(cp + "norm.weight", d)};
    };
    if (at != io::AttnType::Sliding) L.compressor = compressor(p + "attn.compressor.", hd, at == io::AttnType::CSA ? 2 : 1);
    if (at == io::AttnType::CSA) {
      const int64_t Hi = cfg.index_n_heads, di = cfg.index_head_dim;
      L.idx_compressor = compressor(p + "attn.indexer.compressor.", di, 2);
      L.idx_wq_b = ld.mat(p + "attn.indexer.wq_b.weight", Hi * di, qr);
      L.idx_weights_proj = ld.mat(p + "attn.indexer.weights_proj.weight", Hi, D);
    }
    L.gate = ld.mat(p + "ffn.gate.weight", E, D);
    if (cfg.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE)
      L.tid2eid = ld.index_table(p + "ffn.gate.tid2eid", V, k, E);
    else
      L.gate_bias = ld.vec(p + "ffn.gate.bias", E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = fmt::format("{}ffn.experts.{}.", p, e);
      L.experts.push_back({ld.mat(ep + "w1.weight", I, D), ld.mat(ep + "w3.weight", I, D), ld.mat(ep + "w2.weight", D, I)});
    }
    if (cfg.n_shared_experts > 0) {
      const std::string sp = p + "ffn.shared_experts.";
      L.shared = ExpertWeights{ld.mat(sp + "w1.weight", I, D), ld.mat(sp + "w3.weight", I, D), ld.mat(sp + "w2.weight", D, I)};
    }
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace

std::vector<TensorSpec> weight_specs(const io::ModelConfig& cfg) {
  Loader ld(cfg, nullptr, false);
  load_impl(cfg, ld);
  std::vector<TensorSpec> out;
  for (auto& r : ld.resolved()) out.push_back(r.spec);
  return out;
}

DType official_storage(const TensorSpec& s) {
  auto ends = [&](const char* suf) {
    const size_t n = std::strlen(suf);
    return s.name.size() >= n && s.name.compare(s.name.size() - n, n, suf) == 0;
  };
  if (s.kind == TensorKind::IndexTable) return DType::I64;
  if (s.name.find(".ffn.experts.") != std::string::npos) return DType::I8;
  if (s.name.find(".shared_experts.") != std::string::npos) return DType::F8_E4M3;
  for (const char* n : {".attn.wq_a.weight", ".attn.wq_b.weight", ".attn.wkv.weight", ".attn.wo_a.weight", ".attn.wo_b.weight",
                        ".attn.indexer.wq_b.weight"})
    if (ends(n)) return DType::F8_E4M3;
  if (s.name.find("hc_") != std::string::npos || ends("attn_sink") || ends(".ape") || ends(".gate.bias")) return DType::F32;
  return DType::BF16;
}

Result<std::vector<ResolvedTensor>> resolve_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  Loader ld(cfg, &ckpt, false);
  load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  return std::move(ld.resolved());
}

Result<Weights> load_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  Loader ld(cfg, &ckpt, true);
  Weights w = load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  w.fp32_storage = ld.fp32_storage();
  return w;
}

}  // namespace dsinfer::model
