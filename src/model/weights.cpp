// Checkpoint -> fp32 Weights (see weights.h). Problems are collected (up to a few) and reported together,
// each naming the tensor, the file and expected vs found.
#include "model/weights.h"

#include "model/tensor_reader.h"

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

// Validates the checkpoint tensor of each table entry it is given and, when `dequantize`, converts it to fp32;
// every entry is recorded as a ResolvedTensor (data views null when the tensor is missing or invalid).
class Loader {
 public:
  Loader(const io::ModelConfig& cfg, const io::Checkpoint& ckpt, bool dequantize)
      : cfg_(cfg), dequantize_(dequantize), rd_(ckpt, canonical_tensor_name) {}

  // A matrix or vector of logical shape [rows, cols] in any supported storage format (vectors may be stored 1-D).
  Mat mat(const TensorSpec& spec) {
    Mat m;
    m.rows = spec.rows;
    m.cols = spec.cols;
    const TensorReader::Weight w = rd_.weight(spec.name, spec.rows, spec.cols, {cfg_.fp8_block_n, cfg_.fp8_block_k},
                                              dequantize_ ? &m.data : nullptr);
    resolved_.push_back({spec, w.data, w.scale});
    if (w.data) fp32_storage_ &= w.data->dtype == DType::F32;
    return m;
  }

  // An integer table [rows, cols] whose entries must lie in [0, max_value).
  std::vector<int32_t> index_table(const TensorSpec& spec, int64_t max_value) {
    const std::string& name = spec.name;
    const int64_t rows = spec.rows, cols = spec.cols;
    std::vector<int32_t> out;
    resolved_.push_back({spec, nullptr, nullptr});
    const TensorView* t = rd_.take(name);
    if (!t) return out;
    resolved_.back().data = t;
    const std::vector<int64_t> want{rows, cols};
    if ((t->dtype != DType::I64 && t->dtype != DType::I32) || t->shape != want) {
      rd_.error(fmt::format("tensor '{}' ({}): expected I64 or I32 {}, found {} {}", name, t->file, io::shape_str(want),
                            dtype_name(t->dtype), io::shape_str(t->shape)));
      return out;
    }
    out.resize(size_t(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t v = t->int_at(i);
      if (v < 0 || v >= max_value) {
        rd_.error(fmt::format("tensor '{}': entry {} = {} is not an expert id in [0, {})", name, i, v, max_value));
        return {};
      }
      out[size_t(i)] = int32_t(v);
    }
    return out;
  }

  bool fp32_storage() const { return fp32_storage_; }
  std::vector<ResolvedTensor>& resolved() { return resolved_; }

  Status finish() {
    for (const auto& [c, t] : rd_.unused())
      rd_.error(fmt::format("unexpected tensor '{}' ({}) is not part of a DeepSeek-V4 model with this config.json",
                            t->name, t->file));
    return rd_.finish("checkpoint");
  }

 private:
  const io::ModelConfig& cfg_;
  bool dequantize_;
  TensorReader rd_;
  std::vector<ResolvedTensor> resolved_;
  bool fp32_storage_ = true;
};

// Where a table entry lands in Weights (layers, experts and optional parts already sized by load_impl).
struct Slot {
  Mat* mat = nullptr;
  Vec* vec = nullptr;
  std::vector<int32_t>* table = nullptr;
};

Slot layer_slot(LayerWeights& L, const TensorSpec& s) {
  using R = TensorRole;
  auto compressor = [](std::optional<CompressorWeights>& c) -> CompressorWeights& {
    if (!c) c.emplace();
    return *c;
  };
  auto shared = [&]() -> ExpertWeights& {
    if (!L.shared) L.shared.emplace();
    return *L.shared;
  };
  switch (s.role) {
    case R::AttnNorm: return {nullptr, &L.attn_norm};
    case R::FfnNorm: return {nullptr, &L.ffn_norm};
    case R::HcAttnFn: return {&L.hc_attn.fn};
    case R::HcAttnBase: return {nullptr, &L.hc_attn.base};
    case R::HcAttnScale: return {nullptr, &L.hc_attn.scale};
    case R::HcFfnFn: return {&L.hc_ffn.fn};
    case R::HcFfnBase: return {nullptr, &L.hc_ffn.base};
    case R::HcFfnScale: return {nullptr, &L.hc_ffn.scale};
    case R::AttnSink: return {nullptr, &L.attn_sink};
    case R::WqA: return {&L.wq_a};
    case R::QNorm: return {nullptr, &L.q_norm};
    case R::WqB: return {&L.wq_b};
    case R::Wkv: return {&L.wkv};
    case R::KvNorm: return {nullptr, &L.kv_norm};
    case R::WoA: return {&L.wo_a};
    case R::WoB: return {&L.wo_b};
    case R::CompWkv: return {&compressor(L.compressor).wkv};
    case R::CompWgate: return {&compressor(L.compressor).wgate};
    case R::CompApe: return {&compressor(L.compressor).ape};
    case R::CompNorm: return {nullptr, &compressor(L.compressor).norm};
    case R::IdxCompWkv: return {&compressor(L.idx_compressor).wkv};
    case R::IdxCompWgate: return {&compressor(L.idx_compressor).wgate};
    case R::IdxCompApe: return {&compressor(L.idx_compressor).ape};
    case R::IdxCompNorm: return {nullptr, &compressor(L.idx_compressor).norm};
    case R::IdxWqB: return {&L.idx_wq_b};
    case R::IdxWeightsProj: return {&L.idx_weights_proj};
    case R::Gate: return {&L.gate};
    case R::GateBias: return {nullptr, &L.gate_bias};
    case R::Tid2Eid: return {nullptr, nullptr, &L.tid2eid};
    case R::ExpertW1: return {&L.experts[size_t(s.expert)].w1};
    case R::ExpertW3: return {&L.experts[size_t(s.expert)].w3};
    case R::ExpertW2: return {&L.experts[size_t(s.expert)].w2};
    case R::SharedW1: return {&shared().w1};
    case R::SharedW3: return {&shared().w3};
    case R::SharedW2: return {&shared().w2};
    default: return {};  // model-level roles
  }
}

Slot slot(Weights& w, const TensorSpec& s) {
  using R = TensorRole;
  switch (s.role) {
    case R::Embed: return {&w.embed};
    case R::Head: return {&w.head};
    case R::FinalNorm: return {nullptr, &w.norm};
    case R::HcHeadFn: return {&w.hc_head.fn};
    case R::HcHeadBase: return {nullptr, &w.hc_head.base};
    case R::HcHeadScale: return {nullptr, &w.hc_head.scale};
    default: return layer_slot(w.layers[size_t(s.layer)], s);
  }
}

// Loads every entry of the tensor table (in table order) into its slot.
Weights load_impl(const io::ModelConfig& cfg, Loader& ld) {
  Weights w;
  w.layers.resize(size_t(cfg.num_hidden_layers));
  for (auto& L : w.layers) L.experts.resize(size_t(cfg.n_routed_experts));
  for (const TensorSpec& s : weight_specs(cfg)) {
    const Slot dst = slot(w, s);
    if (s.kind == TensorKind::IndexTable) *dst.table = ld.index_table(s, cfg.n_routed_experts);
    else if (dst.vec) *dst.vec = std::move(ld.mat(s).data);
    else *dst.mat = ld.mat(s);
  }
  if (cfg.tie_word_embeddings) w.head = w.embed;
  return w;
}

}  // namespace

Result<std::vector<ResolvedTensor>> resolve_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  Loader ld(cfg, ckpt, false);
  load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  return std::move(ld.resolved());
}

Result<Weights> load_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  Loader ld(cfg, ckpt, true);
  Weights w = load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  w.fp32_storage = ld.fp32_storage();
  return w;
}

}  // namespace dsinfer::model
