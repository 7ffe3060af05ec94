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
#include "io/config_reader.h"

namespace dsinfer::io {

using nlohmann::json;
using detail::parse_rope_block;
using detail::read_shared_fields;
using detail::Reader;

namespace {


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


// The keys V4.1 reads beyond those it shares with V4 (read_shared_fields).
void read_common(Reader& r, ModelConfig& c) {
  read_shared_fields(r, c);
  if (r.string("topk_method", "noaux_tc") != "noaux_tc") r.fail("topk_method must be 'noaux_tc'");
  if (r.string("hidden_act", "silu") != "silu") r.fail("hidden_act must be 'silu'");
  if (r.integer("num_hash_layers", 0) != 0) r.fail("'num_hash_layers' must be 0: DeepSeek-V4.1 has no hash-routed layers");
  c.hc_mult = r.integer("hc_mult", 4, 1);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", 20, 1);
  c.hc_eps = r.number_in("hc_eps", 1e-6, 0.0, 1.0, true);
  c.rms_norm_eps = r.number_in("rms_norm_eps", 1e-20, 0.0, 1.0, false);
  c.v41.pad_token_id = r.integer("pad_token_id", 2, 0, detail::kMaxTokenId);
  c.v41.gate_temp = r.number_in("gate_temp", 1.0, 0.0, 1e6, true);
  if (!(c.v41.gate_temp > 0)) r.fail(fmt::format("'gate_temp' must be > 0, found {}", c.v41.gate_temp));
  c.v41.image_token_id = r.integer("image_token_id", 129264, 0, detail::kMaxTokenId);
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
    c.rope_main = parse_rope_block(r, rp["main"], "rope_parameters.main", theta);
    c.rope_compress = parse_rope_block(r, rp["compress"], "rope_parameters.compress", ctheta);
    if (rp["main"].is_object() && rp["main"].value("partial_rotary_factor", json()).is_number())
      prf = rp["main"]["partial_rotary_factor"].get<double>();
    if (c.rope_main.yarn) r.fail("rope_parameters.main must not be yarn (ratio-0 layers use plain RoPE)");
  } else if (r.has("rope_scaling")) {
    json block = j["rope_scaling"];
    if (block.is_object()) block["rope_theta"] = ctheta;
    c.rope_compress = parse_rope_block(r, block, "rope_scaling", ctheta);
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
      if (b->size() != 2) {
        qr.fail("weight_block_size must be two positive integers");
      } else {
        c.fp8_block_n = (*b)[0];
        c.fp8_block_k = (*b)[1];
      }
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

namespace {

Result<ModelConfig> parse_v41(const std::string& text, const std::string& source) {
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

}  // namespace

Result<ModelConfig> parse_v41_config_json(const std::string& text, const std::string& source) {
  // The readers check types before reading; json::value() on a field of another type (official names such as
  // original_seq_len, dtype) would throw: a config error, never an exception through the loader.
  try {
    return parse_v41(text, source);
  } catch (const nlohmann::json::exception& e) {
    return Status::errorf("{}: malformed field: {}", source, e.what());
  }
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
