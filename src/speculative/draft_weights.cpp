// Drafter weight loading (see draft_weights.h).
#include "speculative/draft_weights.h"

#include <filesystem>

#include "io/model_files.h"
#include "io/safetensors.h"
#include "model/tensor_reader.h"

namespace dsinfer::speculative {

using model::Mat;
using model::Vec;

namespace {

// Reads tensors of one checkpoint by exact name into fp32, collecting every problem (model::TensorReader).
class DraftReader {
 public:
  DraftReader(const io::Checkpoint& ck, const io::ModelConfig& cfg) : rd_(ck), cfg_(cfg) {}

  Mat mat(const std::string& name, int64_t rows, int64_t cols) {
    Mat m;
    m.rows = rows;
    m.cols = cols;
    rd_.weight(name, rows, cols, {cfg_.fp8_block_n, cfg_.fp8_block_k}, &m.data);
    return m;
  }
  Vec vec(const std::string& name, int64_t n) { return std::move(mat(name, 1, n).data); }
  Vec optional_vec(const std::string& name, int64_t n) { return rd_.find(name) ? vec(name, n) : Vec{}; }

  // Fails listing every problem; `prefix` tensors of the checkpoint that were not read are problems too.
  Status finish(const std::string& prefix, const std::string& what) {
    for (const auto& [name, t] : rd_.unused())
      if (name.rfind(prefix, 0) == 0) rd_.error(fmt::format("unexpected tensor '{}' ({})", name, t->file));
    return rd_.finish(what);
  }

 private:
  model::TensorReader rd_;
  const io::ModelConfig& cfg_;
};

// A sliding-window, score-routed decoder layer `p` (e.g. "mtp.0.") in the target's per-layer names.
model::LayerWeights read_layer(DraftReader& rd, const std::string& p, const io::ModelConfig& c) {
  const int64_t D = c.hidden_size, n = c.hc_mult, H = c.num_attention_heads, hd = c.head_dim, qr = c.q_lora_rank;
  const int64_t g = c.o_groups, r = c.o_lora_rank, E = c.n_routed_experts, I = c.moe_intermediate_size;
  const int64_t mix = (2 + n) * n;
  model::LayerWeights L;
  L.attn_norm = rd.vec(p + "attn_norm.weight", D);
  L.ffn_norm = rd.vec(p + "ffn_norm.weight", D);
  L.hc_attn = {rd.mat(p + "hc_attn_fn", mix, n * D), rd.vec(p + "hc_attn_base", mix), rd.vec(p + "hc_attn_scale", 3)};
  L.hc_ffn = {rd.mat(p + "hc_ffn_fn", mix, n * D), rd.vec(p + "hc_ffn_base", mix), rd.vec(p + "hc_ffn_scale", 3)};
  L.attn_sink = rd.vec(p + "attn.attn_sink", H);
  L.wq_a = rd.mat(p + "attn.wq_a.weight", qr, D);
  L.q_norm = rd.vec(p + "attn.q_norm.weight", qr);
  L.wq_b = rd.mat(p + "attn.wq_b.weight", H * hd, qr);
  L.wkv = rd.mat(p + "attn.wkv.weight", hd, D);
  L.kv_norm = rd.vec(p + "attn.kv_norm.weight", hd);
  L.wo_a = rd.mat(p + "attn.wo_a.weight", g * r, H * hd / g);
  L.wo_b = rd.mat(p + "attn.wo_b.weight", D, g * r);
  L.gate = rd.mat(p + "ffn.gate.weight", E, D);
  L.gate_bias = rd.vec(p + "ffn.gate.bias", E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = fmt::format("{}ffn.experts.{}.", p, e);
    L.experts.push_back({rd.mat(ep + "w1.weight", I, D), rd.mat(ep + "w3.weight", I, D), rd.mat(ep + "w2.weight", D, I)});
  }
  if (c.n_shared_experts > 0) {
    const std::string sp = p + "ffn.shared_experts.";
    L.shared = model::ExpertWeights{rd.mat(sp + "w1.weight", I, D), rd.mat(sp + "w3.weight", I, D),
                                    rd.mat(sp + "w2.weight", D, I)};
  }
  return L;
}

model::HcWeights read_hc_head(DraftReader& rd, const std::string& p, const io::ModelConfig& c) {
  return {rd.mat(p + "hc_head_fn", c.hc_mult, c.hc_mult * c.hidden_size), rd.vec(p + "hc_head_base", c.hc_mult),
          rd.vec(p + "hc_head_scale", 1)};
}

}  // namespace

io::ModelConfig draft_layer_config(const io::ModelConfig& target, const DraftConfig& dc) {
  io::ModelConfig c = target;
  if (dc.n_routed_experts > 0) c.n_routed_experts = dc.n_routed_experts;
  if (dc.num_experts_per_tok > 0) c.num_experts_per_tok = dc.num_experts_per_tok;
  if (dc.sliding_window > 0) c.sliding_window = dc.sliding_window;
  return c;
}

Result<SharedWeights> load_shared_weights(const io::ModelConfig& target, const std::string& model_dir) {
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ck, io::Checkpoint::open(model_dir));
  DraftReader rd(ck, target);
  SharedWeights w;
  // Checkpoints saved by transformers use model.embed_tokens (DeepSeek-V4.1: model.embed) / lm_head; the official
  // ones embed / head.
  const char* embed = "embed.weight";
  for (const char* name : {"model.embed_tokens.weight", "model.embed.weight"})
    if (ck.find(embed) == nullptr && ck.find(name) != nullptr) embed = name;
  const bool hf = std::string(embed) != "embed.weight";
  w.embed = rd.mat(embed, target.vocab_size, target.hidden_size);
  w.head = target.tie_word_embeddings ? w.embed : rd.mat(hf ? "lm_head.weight" : "head.weight", target.vocab_size,
                                                         target.hidden_size);
  DSI_RETURN_IF_ERROR(rd.finish("\x01", model_dir + " (drafter embedding / head)"));
  return w;
}

Result<DsparkWeights> load_dspark_weights(const io::ModelConfig& target, const DraftConfig& dc,
                                          const std::string& model_dir) {
  if (dc.num_layers < 1 || dc.block_size < 1)
    return Status::errorf("{}/config.json has no DSpark drafter (dspark_block_size / num_nextn_predict_layers)", model_dir);
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ck, io::Checkpoint::open(model_dir));
  if (target.is_v41())  // V4.1 layout: no hc_head, bias-free confidence projection (see load_dspark_weights_v41)
    return Status::errorf("{}: a DeepSeek-V4.1 drafter, which the V4 DSpark drafter cannot run", model_dir);
  const io::ModelConfig c = draft_layer_config(target, dc);
  const int64_t D = c.hidden_size, V = c.vocab_size, r = dc.markov_rank, m = int64_t(dc.target_layer_ids.size());
  DraftReader rd(ck, c);
  DsparkWeights w;
  for (int64_t i = 0; i < dc.num_layers; ++i) w.layers.push_back(read_layer(rd, fmt::format("mtp.{}.", i), c));
  const std::string last = fmt::format("mtp.{}.", dc.num_layers - 1);
  w.main_proj = rd.mat("mtp.0.main_proj.weight", D, m * D);
  w.main_norm = rd.vec("mtp.0.main_norm.weight", D);
  w.hc_head = read_hc_head(rd, last, c);
  w.norm = rd.vec(last + "norm.weight", D);
  if (r > 0) {
    w.markov_embed = rd.mat(last + "markov_head.embed.weight", V, r);
    w.markov_head = rd.mat(last + "markov_head.head.weight", V, r);
  }
  w.confidence_w = rd.vec(last + "confidence_head.weight", D + r);
  const Vec b = rd.vec(last + "confidence_head.bias", 1);
  w.confidence_b = b.empty() ? 0.0f : b[0];
  DSI_RETURN_IF_ERROR(rd.finish("mtp.", model_dir + " (DSpark drafter)"));
  return w;
}

Result<DsparkWeights> load_dspark_weights_v41(const io::ModelConfig& target, const DraftConfig& dc,
                                              const std::string& model_dir) {
  if (!target.is_v41()) return Status::errorf("{}: not a DeepSeek-V4.1 config", model_dir);
  if (dc.num_layers < 1 || dc.block_size < 1)
    return Status::errorf("{}/config.json has no DSpark drafter (dspark_block_size / num_nextn_predict_layers)", model_dir);
  if (dc.target_layer_ids.empty()) return Status::errorf("{}: the DSpark drafter has no target layers", model_dir);
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ck, io::Checkpoint::open(model_dir));
  const io::ModelConfig c = draft_layer_config(target, dc);
  const int64_t D = c.hidden_size, V = c.vocab_size, r = dc.markov_rank, m = int64_t(dc.target_layer_ids.size());
  DraftReader rd(ck, c);
  DsparkWeights w;
  w.v41 = true;
  for (int64_t i = 0; i < dc.num_layers; ++i) {
    const std::string p = fmt::format("mtp.{}.", i);
    w.layers.push_back(read_layer(rd, p, c));
    // The target's router (logits / gate_temp); the vision bias is never applied to draft tokens.
    if (c.v41.gate_temp != 1.0)
      for (float& g : w.layers.back().gate.data) g = float(double(g) / c.v41.gate_temp);
    rd.optional_vec(p + "ffn.gate.bias_vl", c.n_routed_experts);
  }
  const std::string last = fmt::format("mtp.{}.", dc.num_layers - 1);
  w.main_proj = rd.mat("mtp.0.main_proj.weight", D, m * D);
  w.main_norm = rd.vec("mtp.0.main_norm.weight", D);
  w.norm = rd.vec(last + "norm.weight", D);
  if (r > 0) {
    w.markov_embed = rd.mat(last + "markov_head.embed.weight", V, r);
    w.markov_head = rd.mat(last + "markov_head.head.weight", V, r);
  }
  w.confidence_w = rd.vec(last + "confidence_head.proj.weight", D + r);  // [1, D + r], no bias
  DSI_RETURN_IF_ERROR(rd.finish("mtp.", model_dir + " (DeepSeek-V4.1 DSpark drafter)"));
  return w;
}

Result<Mtp1Weights> load_mtp1_weights(const io::ModelConfig& target, const DraftConfig& dc, const std::string& model_dir) {
  const std::string rel = dc.mtp1_file.empty() ? "mtp1/model.safetensors" : dc.mtp1_file;
  DSI_ASSIGN_OR_RETURN(const std::string path,
                       io::resolve_in_model_dir(model_dir, rel, model_dir + "/config.json: mtp1_file"));
  if (!std::filesystem::exists(path))
    return Status::errorf("{}: MTP-1 drafter file not found ({}/config.json: mtp1_file = \"{}\"{})", path, model_dir,
                          rel, dc.mtp1_file.empty() ? ", the default" : "");
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ck, io::Checkpoint::open(path));
  const io::ModelConfig& c = target;  // V4 MTP: the target's own layer format
  const int64_t D = c.hidden_size;
  DraftReader rd(ck, c);
  Mtp1Weights w;
  w.layer = read_layer(rd, "mtp.0.", c);
  w.e_proj = rd.mat("mtp.0.e_proj.weight", D, D);
  w.h_proj = rd.mat("mtp.0.h_proj.weight", D, D);
  w.enorm = rd.vec("mtp.0.enorm.weight", D);
  w.hnorm = rd.vec("mtp.0.hnorm.weight", D);
  w.norm = rd.vec("mtp.0.norm.weight", D);
  w.hc_head = read_hc_head(rd, "mtp.0.", c);
  DSI_RETURN_IF_ERROR(rd.finish("mtp.", path + " (MTP-1 drafter)"));
  return w;
}

}  // namespace dsinfer::speculative
