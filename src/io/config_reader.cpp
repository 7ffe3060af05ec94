// The shared parts of config.json reading (see config_reader.h).
#include "io/config_reader.h"

namespace dsinfer::io::detail {

// One RoPE parameter block ({rope_type, rope_theta, factor, ...}); `where` names it in errors.
RopeParams parse_rope_block(Reader& r, const nlohmann::json& b, const std::string& where, double default_theta) {
  RopeParams p;
  p.theta = default_theta;
  if (!b.is_object()) {
    r.fail(where + " must be an object");
    return p;
  }
  Reader br{b, r.src + ": " + where, Status::ok()};
  std::string type = br.string("rope_type", br.string("type", "default"));
  p.theta = br.number("rope_theta", default_theta);
  if (type == "yarn") {
    p.yarn = true;
    p.factor = br.number("factor");
    p.original_max_position_embeddings = br.integer("original_max_position_embeddings", std::nullopt, 1, kMaxPositions);
    p.beta_fast = br.number("beta_fast", 32.0);
    p.beta_slow = br.number("beta_slow", 1.0);
    p.attention_factor = br.number("attention_factor", 1.0);
    if (p.factor <= 0) br.fail(fmt::format("'factor' must be > 0, found {}", p.factor));
    if (b.contains("mscale") || b.contains("mscale_all_dim"))
      br.fail("mscale/mscale_all_dim are not part of DeepSeek-V4 RoPE (no YaRN magnitude scaling)");
  } else if (type != "default") {
    br.fail(fmt::format("unsupported rope_type '{}' (expected 'default' or 'yarn')", type));
  }
  if (p.theta <= 1.0) br.fail(fmt::format("'rope_theta' must be > 1, found {}", p.theta));
  if (!br.err.is_ok()) r.fail(br.err.message().substr(r.src.size() + 2));
  return p;
}

void read_shared_fields(Reader& r, ModelConfig& c) {
  c.vocab_size = r.integer("vocab_size", std::nullopt, 1);
  c.hidden_size = r.integer("hidden_size", std::nullopt, 1);
  c.num_hidden_layers = r.integer("num_hidden_layers", std::nullopt, 1);
  c.num_attention_heads = r.integer("num_attention_heads", std::nullopt, 1);
  int64_t kv_heads = r.integer("num_key_value_heads", 1, 1);
  if (kv_heads != 1) r.fail(fmt::format("'num_key_value_heads' must be 1 (one shared K=V latent), found {}", kv_heads));
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
  c.routed_scaling_factor = r.number_in("routed_scaling_factor", 1.0, 0.0, 1e6, true);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.swiglu_limit = r.number_in("swiglu_limit", 0.0, 0.0, 1e9, false);  // 0: no clamp
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = r.integer("bos_token_id", 0, 0, kMaxTokenId);
  // eos_token_id: an id or a list of ids (the first is used).
  if (r.has("eos_token_id") && r.j["eos_token_id"].is_array()) {
    const nlohmann::json& e = r.j["eos_token_id"];
    c.eos_token_id = e.empty() ? 1 : r.integer_value(e[0], "eos_token_id[0]", 0, kMaxTokenId);
    for (size_t i = 1; i < e.size(); ++i) r.integer_value(e[i], fmt::format("eos_token_id[{}]", i), 0, kMaxTokenId);
  } else {
    c.eos_token_id = r.integer("eos_token_id", 1, 0, kMaxTokenId);
  }
  if (r.err.is_ok() && c.eos_token_id >= c.vocab_size)
    r.fail(fmt::format("'eos_token_id' = {} is outside the vocabulary [0, {})", c.eos_token_id, c.vocab_size));
  // Absent: no limit from the model (0). Present, it bounds max_model_len, so 0 (or less) is nonsense.
  c.max_position_embeddings = r.integer("max_position_embeddings", 0, 1, kMaxPositions);
}

Status check_shared_shapes(const ModelConfig& c, const std::string& source, bool needs_indexer) {
  auto bad = [&](const std::string& m) { return Status::error(source + ": " + m); };
  if (c.qk_rope_head_dim % 2 || c.qk_rope_head_dim > c.head_dim)
    return bad(fmt::format("qk_rope_head_dim = {} must be even and <= head_dim = {}", c.qk_rope_head_dim, c.head_dim));
  if (c.num_attention_heads % c.o_groups)
    return bad(fmt::format("num_attention_heads = {} is not a multiple of o_groups = {}", c.num_attention_heads, c.o_groups));
  if (c.num_experts_per_tok > c.n_routed_experts)
    return bad(fmt::format("num_experts_per_tok = {} exceeds n_routed_experts = {}", c.num_experts_per_tok, c.n_routed_experts));
  if (needs_indexer) {
    if (c.index_n_heads < 1 || c.index_head_dim < 2 || c.index_topk < 1)
      return bad("layers with an indexer need index_n_heads, index_head_dim and index_topk >= 1");
    if (c.qk_rope_head_dim > c.index_head_dim)
      return bad(fmt::format("qk_rope_head_dim = {} exceeds index_head_dim = {}", c.qk_rope_head_dim, c.index_head_dim));
  }
  return Status::ok();
}

}  // namespace dsinfer::io::detail
