// DeepSeek-V4.1 config.json -> ModelConfig (see config.h): the transformers composite form (model_type
// deepseek_v41, the backbone in text_config), its flat text config (deepseek_v41_text) and the official
// inference/config.json (ModelArgs names, no model_type). The official form is first renamed to the
// transformers keys; one parser then reads the text config and checks the CSA2 / Engram schedule the way
// transformers' DeepseekV41TextConfig.__post_init__ does (research/dsv41-architecture.md §1).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "io/config.h"

namespace dsinfer::io {

using nlohmann::json;

namespace {

struct Reader {
  const json& j;
  std::string src;
  Status err;

  void fail(const std::string& msg) {
    if (err.is_ok()) err = Status::error(src + ": " + msg);
  }
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  int64_t integer(const char* k, std::optional<int64_t> def = std::nullopt, int64_t min = 0) {
    if (!has(k)) {
      if (!def) fail(fmt::format("missing required key '{}'", k));
      return def.value_or(0);
    }
    const json& v = j[k];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      fail(fmt::format("'{}' must be an integer, found {}", k, v.dump()));
      return 0;
    }
    const int64_t x = v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
    if (x < min) fail(fmt::format("'{}' must be >= {}, found {}", k, min, x));
    return x;
  }
  double number(const char* k, double def) {
    if (!has(k)) return def;
    if (!j[k].is_number()) {
      fail(fmt::format("'{}' must be a number, found {}", k, j[k].dump()));
      return def;
    }
    return j[k].get<double>();
  }
  bool boolean(const char* k, bool def) {
    if (!has(k)) return def;
    if (!j[k].is_boolean()) fail(fmt::format("'{}' must be true or false, found {}", k, j[k].dump()));
    return j[k].is_boolean() ? j[k].get<bool>() : def;
  }
  std::string string(const char* k, std::string def) {
    if (!has(k)) return def;
    if (!j[k].is_string()) fail(fmt::format("'{}' must be a string, found {}", k, j[k].dump()));
    return j[k].is_string() ? j[k].get<std::string>() : def;
  }
  // A list of integers >= min; nullopt when absent.
  std::optional<std::vector<int64_t>> ints(const char* k, int64_t min = 0) {
    if (!has(k)) return std::nullopt;
    std::vector<int64_t> out;
    if (!j[k].is_array()) {
      fail(fmt::format("'{}' must be a list of integers, found {}", k, j[k].dump()));
      return out;
    }
    for (size_t i = 0; i < j[k].size(); ++i) {
      const json& v = j[k][i];
      if (!v.is_number_integer() || v.get<int64_t>() < min) {
        fail(fmt::format("{}[{}] must be an integer >= {}, found {}", k, i, min, v.dump()));
        return out;
      }
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
};

// Official ModelArgs key -> transformers text-config key (research §1.2).
const std::pair<const char*, const char*> kOfficialNames[] = {
    {"dim", "hidden_size"}, {"moe_inter_dim", "moe_intermediate_size"}, {"n_layers", "num_hidden_layers"},
    {"n_mtp_layers", "num_nextn_predict_layers"}, {"n_heads", "num_attention_heads"},
    {"n_activated_experts", "num_experts_per_tok"}, {"score_func", "scoring_func"},
    {"route_scale", "routed_scaling_factor"}, {"rope_head_dim", "qk_rope_head_dim"}, {"norm_eps", "rms_norm_eps"},
    {"window_size", "sliding_window"}, {"kv_source_layers", "kv_source_layer_ids"},
    {"index_source_layers", "index_source_layer_ids"}, {"candidate_source_layer", "candidate_source_layer_id"},
    {"dspark_n_activated_experts", "dspark_num_experts_per_tok"}};

bool is_official_form(const json& j) {
  return !j.contains("model_type") && j.contains("n_layers") && j.contains("dim") &&
         (j.contains("kv_source_layers") || j.contains("index_source_layers") || j.contains("engram_layer_ids"));
}

// The official inference/config.json renamed to a transformers text config.
json official_to_text(const json& o) {
  json t = json::object();
  for (const auto& [k, v] : o.items()) {
    const char* name = k.c_str();
    for (const auto& [from, to] : kOfficialNames)
      if (k == from) name = to;
    t[name] = v;
  }
  const int64_t orig = o.value("original_seq_len", int64_t(0));
  if (orig > 0) {
    t["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", o.value("rope_factor", 1.0)},
                         {"beta_fast", o.value("beta_fast", 32.0)}, {"beta_slow", o.value("beta_slow", 1.0)},
                         {"original_max_position_embeddings", orig}};
    t["max_position_embeddings"] = int64_t(double(orig) * o.value("rope_factor", 1.0));
  } else if (!t.contains("max_position_embeddings")) {
    t["max_position_embeddings"] = o.value("max_seq_len", int64_t(0));
  }
  if (o.value("dtype", std::string("bf16")) == "fp8")
    t["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"}};
  t["vision"] = o.value("vision_n_layers", int64_t(0)) > 0;
  t["model_type"] = "deepseek_v41_text";
  return t;
}

RopeParams rope_block(Reader& r, const json& b, const std::string& where, double default_theta) {
  RopeParams p;
  p.theta = default_theta;
  if (!b.is_object()) {
    r.fail(where + " must be an object");
    return p;
  }
  Reader br{b, where, Status::ok()};
  const std::string type = br.string("rope_type", br.string("type", "default"));
  p.theta = br.number("rope_theta", default_theta);
  if (type == "yarn") {
    p.yarn = true;
    p.factor = br.number("factor", 0.0);
    p.original_max_position_embeddings = br.integer("original_max_position_embeddings", std::nullopt, 1);
    p.beta_fast = br.number("beta_fast", 32.0);
    p.beta_slow = br.number("beta_slow", 1.0);
    p.attention_factor = br.number("attention_factor", 1.0);
    if (p.factor <= 0) br.fail(fmt::format("'factor' must be > 0, found {}", p.factor));
    if (b.contains("mscale") || b.contains("mscale_all_dim")) br.fail("mscale is not part of DeepSeek-V4.1 RoPE");
  } else if (type != "default") {
    br.fail(fmt::format("unsupported rope_type '{}' (expected 'default' or 'yarn')", type));
  }
  if (p.theta <= 1.0) br.fail(fmt::format("'rope_theta' must be > 1, found {}", p.theta));
  if (!br.err.is_ok()) r.fail(br.err.message());
  return p;
}

// Shapes, MoE, mHC and RoPE (the parts V4.1 shares with V4).
void read_common(Reader& r, ModelConfig& c) {
  c.vocab_size = r.integer("vocab_size", std::nullopt, 1);
  c.hidden_size = r.integer("hidden_size", std::nullopt, 1);
  c.num_hidden_layers = r.integer("num_hidden_layers", std::nullopt, 1);
  c.num_attention_heads = r.integer("num_attention_heads", std::nullopt, 1);
  if (const int64_t kv = r.integer("num_key_value_heads", 1, 1); kv != 1)
    r.fail(fmt::format("'num_key_value_heads' must be 1 (one shared K=V latent), found {}", kv));
  c.head_dim = r.integer("head_dim", std::nullopt, 2);
  c.q_lora_rank = r.integer("q_lora_rank", std::nullopt, 1);
  c.o_groups = r.integer("o_groups", std::nullopt, 1);
  c.o_lora_rank = r.integer("o_lora_rank", std::nullopt, 1);
  c.sliding_window = r.integer("sliding_window", std::nullopt, 1);
  c.index_n_heads = r.integer("index_n_heads", 0);
  c.index_head_dim = r.integer("index_head_dim", 0);
  c.index_topk = r.integer("index_topk", 0);
  c.n_routed_experts = r.integer("n_routed_experts", std::nullopt, 1);
  c.num_experts_per_tok = r.integer("num_experts_per_tok", std::nullopt, 1);
  c.n_shared_experts = r.integer("n_shared_experts", 1);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", std::nullopt, 1);
  const std::string scoring = r.string("scoring_func", "sqrtsoftplus");
  if (scoring == "sqrtsoftplus") c.scoring_func = ScoringFunc::SqrtSoftplus;
  else if (scoring == "softmax") c.scoring_func = ScoringFunc::Softmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::Sigmoid;
  else r.fail(fmt::format("unsupported scoring_func '{}' (expected sqrtsoftplus, softmax or sigmoid)", scoring));
  if (r.string("topk_method", "noaux_tc") != "noaux_tc") r.fail("topk_method must be 'noaux_tc'");
  if (r.string("hidden_act", "silu") != "silu") r.fail("hidden_act must be 'silu'");
  if (r.integer("num_hash_layers", 0) != 0) r.fail("'num_hash_layers' must be 0: DeepSeek-V4.1 has no hash-routed layers");
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.swiglu_limit = r.number("swiglu_limit", 0.0);
  c.hc_mult = r.integer("hc_mult", 4, 1);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", 20, 1);
  c.hc_eps = r.number("hc_eps", 1e-6);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-20);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = r.integer("bos_token_id", 0);
  c.eos_token_id = r.j.contains("eos_token_id") && r.j["eos_token_id"].is_array()
                       ? (r.j["eos_token_id"].empty() ? 1 : r.j["eos_token_id"][0].get<int64_t>())
                       : r.integer("eos_token_id", 1);
  c.max_position_embeddings = r.integer("max_position_embeddings", 0);
  c.v41.pad_token_id = r.integer("pad_token_id", 2);
  c.v41.gate_temp = r.number("gate_temp", 1.0);
  if (!(c.v41.gate_temp > 0)) r.fail(fmt::format("'gate_temp' must be > 0, found {}", c.v41.gate_temp));
  c.v41.image_token_id = r.integer("image_token_id", 129264);
}

void read_rope(Reader& r, ModelConfig& c) {
  const double theta = r.number("rope_theta", 10000.0), ctheta = r.number("compress_rope_theta", 160000.0);
  double prf = 0.0;
  c.rope_main.theta = theta;
  c.rope_compress.theta = ctheta;
  const json& j = r.j;
  if (r.has("rope_parameters") && j["rope_parameters"].is_object() && j["rope_parameters"].contains("main") &&
      j["rope_parameters"].contains("compress")) {
    const json& rp = j["rope_parameters"];
    c.rope_main = rope_block(r, rp["main"], "rope_parameters.main", theta);
    c.rope_compress = rope_block(r, rp["compress"], "rope_parameters.compress", ctheta);
    if (rp["main"].is_object() && rp["main"].value("partial_rotary_factor", json()).is_number())
      prf = rp["main"]["partial_rotary_factor"].get<double>();
    if (c.rope_main.yarn) r.fail("rope_parameters.main must not be yarn (ratio-0 layers use plain RoPE)");
  } else if (r.has("rope_scaling")) {
    json block = j["rope_scaling"];
    if (block.is_object()) block["rope_theta"] = ctheta;
    c.rope_compress = rope_block(r, block, "rope_scaling", ctheta);
  }
  if (r.has("qk_rope_head_dim")) {
    c.qk_rope_head_dim = r.integer("qk_rope_head_dim", std::nullopt, 2);
    if (prf > 0 && std::llround(prf * double(c.head_dim)) != c.qk_rope_head_dim)
      r.fail(fmt::format("qk_rope_head_dim = {} disagrees with partial_rotary_factor {} x head_dim {}",
                         c.qk_rope_head_dim, prf, c.head_dim));
  } else if (prf > 0) {
    c.qk_rope_head_dim = std::llround(prf * double(c.head_dim));
  } else {
    r.fail("needs 'qk_rope_head_dim' or rope_parameters.main.partial_rotary_factor");
  }
}

// quantization_config (the composite config keeps it at the top level) and expert_dtype.
void read_storage(Reader& r, const json* top, ModelConfig& c) {
  const json* q = r.has("quantization_config") ? &r.j["quantization_config"]
                  : top && top->contains("quantization_config") && !(*top)["quantization_config"].is_null()
                      ? &(*top)["quantization_config"]
                      : nullptr;
  std::string expert = r.string("expert_dtype", "");
  if (q) {
    if (!q->is_object()) return r.fail("'quantization_config' must be an object");
    Reader qr{*q, r.src + ": quantization_config", Status::ok()};
    if (qr.string("quant_method", "") != "fp8") qr.fail("quant_method must be 'fp8'");
    if (qr.string("scale_fmt", "ue8m0") != "ue8m0") qr.fail("scale_fmt must be 'ue8m0'");
    if (auto b = qr.ints("weight_block_size", 1)) {
      if (b->size() != 2) qr.fail("weight_block_size must be two positive integers");
      else c.fp8_block_n = (*b)[0], c.fp8_block_k = (*b)[1];
    }
    if (expert.empty()) expert = qr.string("expert_dtype", "");
    if (!qr.err.is_ok()) return r.fail(qr.err.message().substr(r.src.size() + 2));
    c.fp8_weights = true;
  }
  if (expert == "fp4") c.expert_dtype = ExpertDtype::FP4;
  else if (expert == "fp8") c.expert_dtype = ExpertDtype::FP8;
  else if (expert == "bf16") c.expert_dtype = ExpertDtype::BF16;
  else if (!expert.empty()) r.fail(fmt::format("expert_dtype '{}' is not supported (expected fp4, fp8 or bf16)", expert));
}

}  // namespace

// The CSA2 schedule and Engram parameters, with transformers' defaults and checks (config_v41_schedule.cpp).
Status read_v41_schedule(const json& j, const std::string& src, ModelConfig& c);

bool is_v41_config_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string mt = j["model_type"].get<std::string>();
    return mt == "deepseek_v41" || mt == "deepseek_v41_text";
  }
  return is_official_form(j);
}

Result<ModelConfig> parse_v41_config_json(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Status::errorf("{}: not a JSON object", source);
  const json* top = nullptr;
  json tc;
  if (is_official_form(j)) {
    tc = official_to_text(j);
  } else if (j.value("model_type", std::string()) == "deepseek_v41") {
    if (!j.contains("text_config") || !j["text_config"].is_object())
      return Status::errorf("{}: model_type 'deepseek_v41' needs a 'text_config' object", source);
    top = &j;
    tc = j["text_config"];
    for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "image_token_id"})
      if (!tc.contains(k) && j.contains(k)) tc[k] = j[k];
    tc["vision"] = j.contains("vision_config") && j["vision_config"].is_object();
  } else {
    tc = j;
  }
  const std::string src = top ? source + ": text_config" : source;
  Reader r{tc, src, Status::ok()};
  ModelConfig c;
  c.arch = Arch::DeepseekV41;
  read_common(r, c);
  c.v41.vision = tc.value("vision", false);
  if (!r.err.is_ok()) return r.err;
  read_rope(r, c);
  read_storage(r, top, c);
  if (!r.err.is_ok()) return r.err;
  DSI_RETURN_IF_ERROR(read_v41_schedule(tc, src, c));
  return c;
}

int64_t ModelConfig::kv_source_of(int64_t layer) const {
  if (compress_ratios[size_t(layer)] == 0) return -1;
  int64_t best = -1;
  for (int64_t s : v41.kv_source_layer_ids)
    if (s <= layer) best = std::max(best, s);
  return best;
}

int64_t ModelConfig::index_source_of(int64_t layer) const {
  if (compress_ratios[size_t(layer)] == 0) return -1;
  int64_t best = -1;
  for (int64_t s : v41.index_source_layer_ids)
    if (s <= layer) best = std::max(best, s);
  return best;
}

int64_t ModelConfig::engram_index(int64_t layer) const {
  const auto& ids = v41.engram_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), layer);
  return it == ids.end() ? -1 : int64_t(it - ids.begin());
}

}  // namespace dsinfer::io
