// Checkpoint -> fp32 DeepSeek-V4.1 weights (see weights_v41.h). Problems are collected and reported together,
// each naming the tensor, the file and expected vs found.
#include "model/weights_v41.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "model/tensor_reader.h"

namespace dsinfer::model {

using io::TensorView;

namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Tensors of other modules in a V4.1 checkpoint: the vision tower, its aligner and the image delimiters.
bool other_module(const std::string& canon) {
  return starts_with(canon, "vision.") || starts_with(canon, "aligner.") || canon == "image_start" ||
         canon == "image_end" || canon == "image_newline";
}

class Loader {
 public:
  // decode false: nothing is converted; every tensor read is recorded as a StoredTensorV41 (stored()).
  Loader(const io::ModelConfig& cfg, const io::Checkpoint* ckpt, bool decode = true)
      : cfg_(cfg), ckpt_(ckpt), decode_(decode) {
    if (ckpt)
      rd_ = TensorReader(*ckpt, [](const std::string& name) {
        const std::string c = canonical_tensor_name(name);
        return other_module(c) ? std::string() : c;
      });
  }

  // A weight of logical shape [rows, cols]; FP8 storage uses `block` (rows x cols per scale).
  Mat mat(const std::string& name, int64_t rows, int64_t cols, std::pair<int64_t, int64_t> block = {0, 0}) {
    return mat_as(name, rows, cols, block, decode_);
  }
  // decode false: recorded as a StoredTensorV41 (stored()) instead of converted.
  Mat mat_as(const std::string& name, int64_t rows, int64_t cols, std::pair<int64_t, int64_t> block, bool decode) {
    Mat m;
    m.rows = rows;
    m.cols = cols;
    TensorSpec spec;  // V4.1 tensors are listed here by name; their roles join the tensor table with the CUDA side
    spec.name = name;
    spec.kind = rows == 1 ? TensorKind::Vector : TensorKind::Matrix;
    spec.rows = rows;
    spec.cols = cols;
    int layer = -1, expert = -1;
    if (std::sscanf(name.c_str(), "layers.%d.", &layer) == 1) spec.layer = layer;
    if (const size_t at = name.find(".ffn.experts."); at != std::string::npos &&
        std::sscanf(name.c_str() + at, ".ffn.experts.%d.", &expert) == 1)
      spec.expert = expert;
    specs_.push_back(spec);
    if (!ckpt_) return m;
    const std::pair<int64_t, int64_t> b{block.first ? block.first : cfg_.fp8_block_n,
                                        block.second ? block.second : cfg_.fp8_block_k};
    const TensorReader::Weight w = rd_.weight(name, rows, cols, b, decode ? &m.data : nullptr);
    if (w.data) {
      fp32_ &= w.data->dtype == DType::F32;
      if (!decode) stored_.push_back({std::move(spec), w.data, w.scale, b.first, b.second});
    }
    return m;
  }
  Vec vec(const std::string& name, int64_t n) { return std::move(mat(name, 1, n).data); }
  Vec optional_vec(const std::string& name, int64_t n) { return rd_.find(name) ? vec(name, n) : Vec{}; }

  // Engram table: FP8 rows with one scale per 32 channels; a float table's `.scale` (transformers keeps ones
  // there) is checked for shape and otherwise ignored, as transformers does.
  Mat engram_table(const std::string& name, int64_t rows, int64_t cols) {
    const TensorView* t = rd_.find(name);
    const bool decode = decode_ && decode_tables_;
    if (t && t->dtype == DType::F8_E4M3) return mat_as(name, rows, cols, {1, 32}, decode);
    Mat m = mat_as(name, rows, cols, {0, 0}, decode);
    const std::string base = name.substr(0, name.size() - 7);  // strip ".weight"
    if (ckpt_ && rd_.find(base + ".scale")) rd_.scale_for(name, {rows, (cols + 31) / 32});
    return m;
  }

  // The Engram tables are recorded as stored instead of decoded (the host placement, model/engram_rows.h).
  void keep_tables_stored() { decode_tables_ = false; }
  const std::vector<TensorSpec>& specs() const { return specs_; }
  std::vector<StoredTensorV41>& stored() { return stored_; }
  bool fp32_storage() const { return fp32_; }

  Status finish() {
    for (const auto& [c, t] : rd_.unused())
      rd_.error(fmt::format("unexpected tensor '{}' ({}) is not part of a DeepSeek-V4.1 model with this config.json",
                            t->name, t->file));
    return rd_.finish("checkpoint");
  }

 private:
  const io::ModelConfig& cfg_;
  const io::Checkpoint* ckpt_;
  bool decode_ = true, decode_tables_ = true;
  TensorReader rd_;
  std::vector<TensorSpec> specs_;
  std::vector<StoredTensorV41> stored_;
  bool fp32_ = true;
};

void load_attention(const io::ModelConfig& cfg, int64_t l, const std::string& p, Loader& ld, LayerWeightsV41& L) {
  const int64_t D = cfg.hidden_size, H = cfg.num_attention_heads, hd = cfg.head_dim, qr = cfg.q_lora_rank;
  const int64_t g = cfg.o_groups, r = cfg.o_lora_rank, Hi = cfg.index_n_heads, di = cfg.index_head_dim;
  L.attn_sink = ld.vec(p + "attn.attn_sink", H);
  L.wq_a = ld.mat(p + "attn.wq_a.weight", qr, D);
  L.q_norm = ld.vec(p + "attn.q_norm.weight", qr);
  L.wq_b = ld.mat(p + "attn.wq_b.weight", H * hd, qr);
  L.wkv = ld.mat(p + "attn.wkv.weight", hd, D);
  L.kv_norm = ld.vec(p + "attn.kv_norm.weight", hd);
  L.wo_a = ld.mat(p + "attn.wo_a.weight", g * r, H * hd / g);
  L.wo_b = ld.mat(p + "attn.wo_b.weight", D, g * r);
  const auto& v = cfg.v41;
  const bool kv_source = std::count(v.kv_source_layer_ids.begin(), v.kv_source_layer_ids.end(), l) > 0;
  const bool index_source = std::count(v.index_source_layer_ids.begin(), v.index_source_layer_ids.end(), l) > 0;
  if (kv_source) {
    L.comp_wkv = ld.mat(p + "attn.compressor.wkv.weight", hd, D);
    if (cfg.ratio(l) > 1) L.comp_wgate = ld.mat(p + "attn.compressor.wgate.weight", hd, D);
    L.comp_norm = ld.vec(p + "attn.compressor.norm.weight", hd);
    L.idx_wk = ld.mat(p + "attn.indexer.wk.weight", di, hd);
    L.idx_k_norm = ld.vec(p + "attn.indexer.k_norm.weight", di);
  }
  if (index_source) {
    L.idx_wq_b = ld.mat(p + "attn.indexer.wq_b.weight", Hi * di, qr);
    L.idx_weights_proj = ld.mat(p + "attn.indexer.weights_proj.weight", Hi, D);
  }
}

void load_ffn(const io::ModelConfig& cfg, const std::string& p, Loader& ld, LayerWeightsV41& L) {
  const int64_t D = cfg.hidden_size, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
  L.gate = ld.mat(p + "ffn.gate.weight", E, D);
  if (cfg.v41.gate_temp != 1.0)
    for (float& w : L.gate.data) w = float(double(w) / cfg.v41.gate_temp);
  L.gate_bias = ld.vec(p + "ffn.gate.bias", E);
  L.gate_bias_vl = cfg.v41.vision ? ld.vec(p + "ffn.gate.bias_vl", E) : ld.optional_vec(p + "ffn.gate.bias_vl", E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = fmt::format("{}ffn.experts.{}.", p, e);
    L.experts.push_back({ld.mat(ep + "w1.weight", I, D), ld.mat(ep + "w3.weight", I, D), ld.mat(ep + "w2.weight", D, I)});
  }
  const std::string sp = p + "ffn.shared_experts.";
  L.shared = {ld.mat(sp + "w1.weight", I, D), ld.mat(sp + "w3.weight", I, D), ld.mat(sp + "w2.weight", D, I)};
}

// The one enumeration of a V4.1 backbone's tensors.
WeightsV41 load_impl(const io::ModelConfig& cfg, Loader& ld) {
  WeightsV41 w;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult, mix = (2 + n) * n;
  w.embed = ld.mat("embed.weight", V, D);
  w.head = cfg.tie_word_embeddings ? w.embed : ld.mat("head.weight", V, D);
  w.norm = ld.vec("norm.weight", D);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    LayerWeightsV41 L;
    L.attn_norm = ld.vec(p + "attn_norm.weight", D);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", D);
    L.hc_attn = {ld.mat(p + "hc_attn_fn", mix, n * D), ld.vec(p + "hc_attn_base", mix), ld.vec(p + "hc_attn_scale", 3)};
    L.hc_ffn = {ld.mat(p + "hc_ffn_fn", mix, n * D), ld.vec(p + "hc_ffn_base", mix), ld.vec(p + "hc_ffn_scale", 3)};
    load_attention(cfg, l, p, ld, L);
    load_ffn(cfg, p, ld, L);
    if (const int64_t e = cfg.engram_index(l); e >= 0) {
      const auto& v = cfg.v41;
      const int64_t hd = v.engram_head_dim, cols = (v.engram_max_ngram_size - 1) * v.engram_n_heads;
      EngramWeights ew;
      ew.table = ld.engram_table(p + "engram.embed.weight", v.engram_num_embeddings[size_t(e)], hd);
      ew.wkv = ld.mat(p + "engram.wkv.weight", (n + 1) * D, cols * hd);
      const Mat q = ld.mat(p + "engram.q_weight", n, D), k = ld.mat(p + "engram.k_weight", n, D);
      if (!q.data.empty() && !k.data.empty()) {
        ew.qk.resize(size_t(n * D));
        for (size_t i = 0; i < ew.qk.size(); ++i) ew.qk[i] = q.data[i] * k.data[i];
      }
      L.engram = std::move(ew);
    }
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace

bool is_engram_table(const TensorSpec& s) { return s.name.find("engram.embed.") != std::string::npos; }

StorageV41 storage_format_v41(const TensorSpec& s) {
  auto has = [&](const char* part) { return s.name.find(part) != std::string::npos; };
  if (s.expert >= 0) return StorageV41::Fp4Row32;
  if (is_engram_table(s)) return StorageV41::Fp8Row32;
  static const char* const kFp8[] = {"attn.wq_a.", "attn.wq_b.", "attn.wkv.", "attn.wo_a.", "attn.wo_b.",
                                     "indexer.wq_b.", "shared_experts.", "engram.wkv."};
  for (const char* f : kFp8)
    if (has(f)) return StorageV41::Fp8Block32;
  if (has("hc_") || has("attn_sink") || has("gate.bias")) return StorageV41::F32;
  return StorageV41::BF16;
}

double official_storage_bytes_v41(const TensorSpec& s) {
  const double n = double(s.rows) * double(s.cols);
  switch (storage_format_v41(s)) {
    case StorageV41::Fp4Row32: return n * (0.5 + 1.0 / 32);  // packed FP4, E8M0 per 32 inputs
    case StorageV41::Fp8Row32: return double(s.rows) * (double(s.cols) + double((s.cols + 31) / 32));
    case StorageV41::Fp8Block32: return n + double((s.rows + 31) / 32) * double((s.cols + 31) / 32);
    case StorageV41::F32: return n * 4;
    case StorageV41::BF16: break;
  }
  return n * 2;
}

std::vector<TensorSpec> weight_specs_v41(const io::ModelConfig& cfg) {
  Loader ld(cfg, nullptr);
  load_impl(cfg, ld);
  return ld.specs();
}

Result<WeightsV41> load_weights_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                    std::vector<StoredTensorV41>* stored_tables) {
  Loader ld(cfg, &ckpt);
  if (stored_tables) ld.keep_tables_stored();
  WeightsV41 w = load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  w.fp32_storage = ld.fp32_storage();
  if (stored_tables) *stored_tables = std::move(ld.stored());
  return w;
}

Result<std::vector<StoredTensorV41>> resolve_weights_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  Loader ld(cfg, &ckpt, false);
  load_impl(cfg, ld);
  DSI_RETURN_IF_ERROR(ld.finish());
  return std::move(ld.stored());
}

Result<io::Checkpoint> open_checkpoint_v41(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const bool single = std::filesystem::exists(dir / "model.safetensors") &&
                      !std::filesystem::exists(dir / "model.safetensors.index.json");
  return io::Checkpoint::open(single ? (dir / "model.safetensors").string() : model_dir);
}

}  // namespace dsinfer::model
