// config.json -> ModelConfig for both the transformers and the official DeepSeek layouts (see config.h).
// Every problem names the key and what was expected; nothing here throws past this file.
#include "io/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/config_reader.h"
#include "io/json_limits.h"
#include "io/model_files.h"

namespace dsinfer::io {

using nlohmann::json;
using detail::Reader;
using detail::kMaxDim;
using detail::kMaxPositions;
using detail::parse_rope_block;
using detail::read_shared_fields;

// Layer schedule: layer_types / compress_ratios / compress_rates, mlp_layer_types / num_hash_layers.
Status parse_layer_schedule(const json& j, Reader& r, const std::string& source, ModelConfig& c) {
  const size_t L = size_t(c.num_hidden_layers);
  if (r.has("compress_rates")) {
    const json& cr = j["compress_rates"];
    if (!cr.is_object()) return Status::errorf("{}: 'compress_rates' must be an object", source);
    Reader crr{cr, source + ": compress_rates", Status::ok()};
    c.csa_ratio = crr.integer("compressed_sparse_attention", 4, 1);
    c.hca_ratio = crr.integer("heavily_compressed_attention", 128, 1);
    if (!crr.err.is_ok()) return crr.err;
  }
  std::vector<AttnType> from_types, from_ratios;
  std::vector<int64_t> ratios_from_list;
  if (r.has("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || lt.size() != L)
      return Status::errorf("{}: 'layer_types' must be a list of num_hidden_layers={} strings, found {}", source, L,
                            lt.is_array() ? std::to_string(lt.size()) + " entries" : lt.dump());
    for (size_t i = 0; i < L; ++i) {
      std::string s = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
      if (s == "sliding_attention") from_types.push_back(AttnType::Sliding);
      else if (s == "compressed_sparse_attention") from_types.push_back(AttnType::CSA);
      else if (s == "heavily_compressed_attention") from_types.push_back(AttnType::HCA);
      else
        return Status::errorf("{}: layer_types[{}] = '{}' is unknown (expected sliding_attention, "
                              "compressed_sparse_attention or heavily_compressed_attention)", source, i, s);
    }
  }
  if (r.has("compress_ratios")) {
    const json& cr = j["compress_ratios"];
    size_t with_mtp = L + size_t(c.num_nextn_predict_layers);
    if (!cr.is_array() || (cr.size() != L && cr.size() != with_mtp))
      return Status::errorf("{}: 'compress_ratios' must have num_hidden_layers ({}) or num_hidden_layers + "
                            "num_nextn_predict_layers ({}) entries, found {}", source, L, with_mtp,
                            cr.is_array() ? std::to_string(cr.size()) : cr.dump());
    for (size_t i = 0; i < cr.size(); ++i) {
      if (!cr[i].is_number_integer() || cr[i].get<int64_t>() < 0 || cr[i].get<int64_t>() > kMaxDim)
        return Status::errorf("{}: compress_ratios[{}] must be an integer in [0, {}], found {}", source, i, kMaxDim,
                              cr[i].dump());
      int64_t v = cr[i].get<int64_t>();
      if (i >= L) {
        if (v != 0) return Status::errorf("{}: compress_ratios[{}] (MTP layer) must be 0, found {}", source, i, v);
        continue;
      }
      ratios_from_list.push_back(v);
      // Official code: overlap + indexer iff ratio == 4; any other non-zero ratio is heavily compressed.
      from_ratios.push_back(v == 0 ? AttnType::Sliding : v == 4 ? AttnType::CSA : AttnType::HCA);
    }
  }
  if (!from_types.empty()) {
    c.layer_types = from_types;
  } else if (!from_ratios.empty()) {
    c.layer_types = from_ratios;
    for (size_t i = 0; i < L; ++i) {
      if (from_ratios[i] == AttnType::HCA) {
        if (c.hca_ratio != 128 && c.hca_ratio != ratios_from_list[i] && r.has("compress_rates"))
          return Status::errorf("{}: compress_ratios[{}] = {} disagrees with compress_rates", source, i, ratios_from_list[i]);
        c.hca_ratio = ratios_from_list[i];
      }
    }
  } else {
    return Status::errorf("{}: needs 'layer_types' or 'compress_ratios' to know each layer's attention type", source);
  }
  if (!from_types.empty() && !from_ratios.empty()) {
    for (size_t i = 0; i < L; ++i)
      if (from_types[i] != from_ratios[i])
        return Status::errorf("{}: layer_types[{}] disagrees with compress_ratios[{}] = {}", source, i, i, ratios_from_list[i]);
  }
  for (size_t i = 0; i < L; ++i)
    c.compress_ratios.push_back(c.layer_types[i] == AttnType::Sliding ? 0
                                : c.layer_types[i] == AttnType::CSA    ? c.csa_ratio
                                                                       : c.hca_ratio);

  if (r.has("mlp_layer_types")) {
    const json& mt = j["mlp_layer_types"];
    if (!mt.is_array() || mt.size() != L)
      return Status::errorf("{}: 'mlp_layer_types' must be a list of num_hidden_layers={} strings", source, L);
    for (size_t i = 0; i < L; ++i) {
      std::string s = mt[i].is_string() ? mt[i].get<std::string>() : mt[i].dump();
      if (s == "hash_moe") c.mlp_layer_types.push_back(MlpType::HashMoE);
      else if (s == "moe") c.mlp_layer_types.push_back(MlpType::MoE);
      else return Status::errorf("{}: mlp_layer_types[{}] = '{}' is unknown (expected hash_moe or moe)", source, i, s);
    }
    if (r.has("num_hash_layers")) {
      int64_t nh = r.integer("num_hash_layers", 0);
      for (size_t i = 0; i < L; ++i)
        if ((int64_t(i) < nh) != (c.mlp_layer_types[i] == MlpType::HashMoE))
          return Status::errorf("{}: mlp_layer_types[{}] disagrees with num_hash_layers = {}", source, i, nh);
    }
  } else {
    int64_t nh = r.integer("num_hash_layers", 0);
    if (nh > int64_t(L)) return Status::errorf("{}: num_hash_layers = {} exceeds num_hidden_layers = {}", source, nh, L);
    for (size_t i = 0; i < L; ++i) c.mlp_layer_types.push_back(int64_t(i) < nh ? MlpType::HashMoE : MlpType::MoE);
  }
  return Status::ok();
}

// RoPE: rope_parameters (transformers) or rope_theta + rope_scaling (official); the rotary dims.
Status parse_rope(const json& j, Reader& r, const std::string& source, ModelConfig& c) {
  double rope_theta = r.number_in("rope_theta", 10000.0, 1.0, 1e15, true);
  double compress_theta = r.number_in("compress_rope_theta", rope_theta, 1.0, 1e15, true);
  double prf = r.number_in("partial_rotary_factor", 0.0, 0.0, 1.0, false);
  c.rope_main.theta = rope_theta;
  c.rope_compress.theta = compress_theta;
  if (r.has("rope_parameters")) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object() || !rp.contains("main"))
      return Status::errorf("{}: 'rope_parameters' must be an object with 'main' (and 'compress') blocks", source);
    c.rope_main = parse_rope_block(r, rp["main"], "rope_parameters.main", rope_theta);
    c.rope_compress = rp.contains("compress") ? parse_rope_block(r, rp["compress"], "rope_parameters.compress", compress_theta)
                                              : c.rope_main;
    if (rp["main"].is_object() && rp["main"].contains("partial_rotary_factor") && rp["main"]["partial_rotary_factor"].is_number())
      prf = rp["main"]["partial_rotary_factor"].get<double>();
    if (c.rope_main.yarn) r.fail("rope_parameters.main must not be yarn (sliding layers use plain RoPE)");
  } else if (r.has("rope_scaling")) {
    // Official form: YaRN applies only to the compressed layers (base compress_rope_theta).
    json block = j["rope_scaling"];
    if (block.is_object()) block["rope_theta"] = compress_theta;
    c.rope_compress = parse_rope_block(r, block, "rope_scaling", compress_theta);
  }
  if (!r.err.is_ok()) return r.err;
  if (r.has("qk_rope_head_dim")) {
    c.qk_rope_head_dim = r.integer("qk_rope_head_dim", std::nullopt, 2);
    if (prf > 0 && std::llround(prf * double(c.head_dim)) != c.qk_rope_head_dim)
      return Status::errorf("{}: qk_rope_head_dim = {} disagrees with partial_rotary_factor {} x head_dim {}", source,
                            c.qk_rope_head_dim, prf, c.head_dim);
  } else if (prf > 0) {
    c.qk_rope_head_dim = std::llround(prf * double(c.head_dim));
  } else {
    return Status::errorf("{}: needs 'qk_rope_head_dim' or 'partial_rotary_factor'", source);
  }
  return Status::ok();
}

// Storage formats: quantization_config and expert_dtype.
Status parse_storage_formats(const json& j, Reader& r, const std::string& source, ModelConfig& c) {
  if (r.has("quantization_config")) {
    const json& q = j["quantization_config"];
    if (!q.is_object()) return Status::errorf("{}: 'quantization_config' must be an object", source);
    Reader qr{q, source + ": quantization_config", Status::ok()};
    std::string method = qr.string("quant_method", "");
    if (method != "fp8") return Status::errorf("{}: quantization_config.quant_method '{}' is not supported (expected fp8)", source, method);
    std::string fmt_ = qr.string("fmt", "e4m3");
    if (fmt_ != "e4m3") return Status::errorf("{}: quantization_config.fmt '{}' is not supported (expected e4m3)", source, fmt_);
    std::string sf = qr.string("scale_fmt", "ue8m0");
    if (sf != "ue8m0" && sf != "float32" && sf != "fp32")
      return Status::errorf("{}: quantization_config.scale_fmt '{}' is not supported (expected ue8m0)", source, sf);
    if (q.contains("weight_block_size")) {
      const json& b = q["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() || b[0].get<int64_t>() <= 0 ||
          b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > kMaxDim || b[1].get<int64_t>() > kMaxDim)
        return Status::errorf("{}: quantization_config.weight_block_size must be two positive integers", source);
      c.fp8_block_n = b[0].get<int64_t>();
      c.fp8_block_k = b[1].get<int64_t>();
    }
    if (!qr.err.is_ok()) return qr.err;
    c.fp8_weights = true;
  }
  const std::string expert_dtype = r.string("expert_dtype", "");
  if (expert_dtype == "fp4") c.expert_dtype = ExpertDtype::FP4;
  else if (expert_dtype == "fp8") c.expert_dtype = ExpertDtype::FP8;
  else if (expert_dtype == "bf16") c.expert_dtype = ExpertDtype::BF16;
  else if (!expert_dtype.empty())
    return Status::errorf("{}: expert_dtype '{}' is not supported (expected fp4, fp8 or bf16)", source, expert_dtype);
  if (!r.err.is_ok()) return r.err;
  return Status::ok();
}

// Consistency of the parsed values.
Status check_consistency(const ModelConfig& c, const std::string& source) {
  bool any_csa = false;
  for (auto t : c.layer_types) any_csa |= t == AttnType::CSA;
  DSI_RETURN_IF_ERROR(detail::check_shared_shapes(c, source, any_csa));
  auto bad = [&](const std::string& m) { return Status::error(source + ": " + m); };
  if (c.n_shared_experts > 1) return bad(fmt::format("n_shared_experts = {} (DeepSeek-V4 has at most 1)", c.n_shared_experts));
  if (c.csa_ratio < 1 || c.hca_ratio < 1) return bad("compress rates must be >= 1");
  if (c.hc_mult < 1) return bad("hc_mult must be >= 1");
  return Status::ok();
}

Result<ModelConfig> parse_model_config_json(const std::string& text, const std::string& source) {
  DSI_RETURN_IF_ERROR(check_json_depth(text, source));
  if (is_v41_config_json(text)) return parse_v41_config_json(text, source);  // DeepSeek-V4.1: io/config_v41.cpp
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return Status::errorf("{}: not valid JSON: {}", source, e.what());
  }
  if (!j.is_object()) return Status::errorf("{}: top level must be a JSON object", source);
  Reader r{j, source, Status::ok()};
  ModelConfig c;
  if (r.has("model_type")) {
    std::string mt = r.string("model_type", "");
    if (mt != "deepseek_v4") r.fail(fmt::format("model_type '{}' is not supported (expected 'deepseek_v4')", mt));
  }
  read_shared_fields(r, c);
  c.hc_mult = r.integer("hc_mult", std::nullopt, 1);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", std::nullopt, 1);
  c.hc_eps = r.number_in("hc_eps", 1e-6, 0.0, 1.0, true);
  c.rms_norm_eps = r.number_in("rms_norm_eps", 1e-6, 0.0, 1.0, true);
  if (r.has("topk_method") && r.string("topk_method", "") != "noaux_tc")
    r.fail("topk_method '" + r.string("topk_method", "") + "' is not supported (expected 'noaux_tc')");
  if (r.has("n_group") && r.integer("n_group", 1) > 1) r.fail("group-limited routing (n_group > 1) is not part of DeepSeek-V4");
  if (!r.err.is_ok()) return r.err;

  DSI_RETURN_IF_ERROR(parse_layer_schedule(j, r, source, c));
  DSI_RETURN_IF_ERROR(parse_rope(j, r, source, c));
  DSI_RETURN_IF_ERROR(parse_storage_formats(j, r, source, c));
  DSI_RETURN_IF_ERROR(check_consistency(c, source));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status::errorf("{}: cannot open (is {} a model directory?)", path, model_dir);
  DSI_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path));
  return parse_model_config_json(text, path);
}

}  // namespace dsinfer::io
