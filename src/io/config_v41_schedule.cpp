// The DeepSeek-V4.1 layer schedule of a text config (see config_v41.cpp): compress_ratios, the CSA2 KV /
// index / candidate sources, Engram and DSpark parameters, with transformers' defaults
// (DeepseekV41TextConfig.__post_init__) and the consistency the CPU reference relies on.
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/config.h"
#include "io/config_reader.h"

namespace dsinfer::io {

using nlohmann::json;

namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// A list of integers under `key` (nullopt when absent); `err` gets the first problem.
std::optional<std::vector<int64_t>> int_list(const json& j, const char* key, const std::string& src, Status& err,
                                             int64_t min = 0) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  std::vector<int64_t> out;
  if (!j[key].is_array()) {
    if (err.is_ok()) err = Status::errorf("{}: '{}' must be a list of integers, found {}", src, key, j[key].dump());
    return out;
  }
  for (size_t i = 0; i < j[key].size(); ++i) {
    const json& v = j[key][i];
    if (!v.is_number_integer() || v.get<int64_t>() < min) {
      if (err.is_ok()) err = Status::errorf("{}: {}[{}] must be an integer >= {}, found {}", src, key, i, min, v.dump());
      return out;
    }
    out.push_back(v.get<int64_t>());
  }
  return out;
}

int64_t int_or(const json& j, const char* key, int64_t def) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : def;
}

// transformers' default schedule: the released one for 40 layers, else the same pattern scaled to n.
std::vector<int64_t> default_ratios(int64_t n) {
  std::vector<int64_t> r;
  if (n == 40) {
    r = {0, 0};
    r.insert(r.end(), 18, 2);
    r.insert(r.end(), 20, 1);
    return r;
  }
  const int64_t slide = std::min<int64_t>(2, n), enc = std::max<int64_t>(0, (n - slide + 1) / 2);
  r.insert(r.end(), size_t(slide), 0);
  r.insert(r.end(), size_t(enc), 2);
  r.insert(r.end(), size_t(std::max<int64_t>(0, n - slide - enc)), 1);
  return r;
}

Status read_sources(const json& j, const std::string& src, ModelConfig& c) {
  Status err;
  const int64_t n = c.num_hidden_layers;
  V41Params& v = c.v41;
  const auto& ratios = c.compress_ratios;
  const bool released = ratios == default_ratios(40) && n == 40;
  if (auto kv = int_list(j, "kv_source_layer_ids", src, err)) {
    v.kv_source_layer_ids = *kv;
  } else if (released) {
    v.kv_source_layer_ids = {2, 8, 14, 20};
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (ratios[size_t(i)] > 0 && (i == 0 || ratios[size_t(i - 1)] != ratios[size_t(i)])) v.kv_source_layer_ids.push_back(i);
  }
  if (auto idx = int_list(j, "index_source_layer_ids", src, err)) v.index_source_layer_ids = *idx;
  else if (v.kv_source_layer_ids == std::vector<int64_t>{2, 8, 14, 20}) v.index_source_layer_ids = {2, 8, 14, 20, 24, 28, 32, 36};
  else v.index_source_layer_ids = v.kv_source_layer_ids;
  DSI_RETURN_IF_ERROR(err);
  v.candidate_source_layer_id = int_or(j, "candidate_source_layer_id", v.kv_source_layer_ids.empty() ? -1 : v.kv_source_layer_ids.back());
  v.candidate_topk_blocks = int_or(j, "candidate_topk_blocks", 2048);
  v.candidate_block_size = int_or(j, "candidate_block_size", 8);

  auto bad = [&](const std::string& m) { return Status::error(src + ": " + m); };
  for (const auto* list : {&v.kv_source_layer_ids, &v.index_source_layer_ids}) {
    const char* name = list == &v.kv_source_layer_ids ? "kv_source_layer_ids" : "index_source_layer_ids";
    for (size_t i = 0; i < list->size(); ++i) {
      const int64_t l = (*list)[i];
      if (l >= n || ratios[size_t(l)] == 0)
        return bad(fmt::format("{}[{}] = {} must name a layer < {} with compress_ratios > 0", name, i, l, n));
      if (i > 0 && l <= (*list)[i - 1]) return bad(fmt::format("{} must be strictly increasing, found {}", name, fmt::join(*list, ", ")));
    }
  }
  for (int64_t l : v.kv_source_layer_ids)
    if (!contains(v.index_source_layer_ids, l))
      return bad(fmt::format("kv_source_layer_ids entry {} is not in index_source_layer_ids (its layers would read "
                             "another source's top-k indices)", l));
  for (int64_t l = 0; l < n; ++l) {
    if (ratios[size_t(l)] == 0) continue;
    const int64_t s = c.kv_source_of(l);
    if (s < 0) return bad(fmt::format("layer {} has compress_ratios {} but no kv_source_layer_ids entry at or before it", l, ratios[size_t(l)]));
    if (ratios[size_t(s)] != ratios[size_t(l)])
      return bad(fmt::format("layer {} (ratio {}) reads the compressed KV of source layer {} with a different ratio {}", l,
                             ratios[size_t(l)], s, ratios[size_t(s)]));
  }
  if (v.candidate_source_layer_id >= 0) {
    if (!contains(v.index_source_layer_ids, v.candidate_source_layer_id))
      return bad(fmt::format("candidate_source_layer_id {} must be in index_source_layer_ids", v.candidate_source_layer_id));
    for (int64_t l : v.index_source_layer_ids)
      if (l > v.candidate_source_layer_id && c.kv_source_of(l) != c.kv_source_of(v.candidate_source_layer_id))
        return bad(fmt::format("index source layer {} picks inside the candidate blocks of layer {} but reads another KV "
                               "source ({} vs {})", l, v.candidate_source_layer_id, c.kv_source_of(l),
                               c.kv_source_of(v.candidate_source_layer_id)));
    if (v.candidate_topk_blocks < 1 || v.candidate_block_size < 1)
      return bad(fmt::format("candidate_topk_blocks ({}) and candidate_block_size ({}) must be >= 1", v.candidate_topk_blocks,
                             v.candidate_block_size));
  }
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const json& lt = j["layer_types"];
    if (int64_t(lt.size()) != n) return bad(fmt::format("'layer_types' must have num_hidden_layers = {} entries, found {}", n, lt.size()));
    for (int64_t i = 0; i < n; ++i) {
      const std::string want = contains(v.kv_source_layer_ids, i) ? "shared_compressed_attention" : "sliding_attention";
      if (lt[size_t(i)] != want)
        return bad(fmt::format("layer_types[{}] = {} disagrees with kv_source_layer_ids (expected '{}')", i, lt[size_t(i)].dump(), want));
    }
  }
  return Status::ok();
}

Status read_engram(const json& j, const std::string& src, ModelConfig& c) {
  Status err;
  V41Params& v = c.v41;
  v.engram_layer_ids = int_list(j, "engram_layer_ids", src, err).value_or(std::vector<int64_t>{});
  v.engram_num_embeddings = int_list(j, "engram_num_embeddings", src, err, 1).value_or(std::vector<int64_t>{});
  DSI_RETURN_IF_ERROR(err);
  v.engram_max_ngram_size = int_or(j, "engram_max_ngram_size", 4);
  v.engram_vocab_size = int_or(j, "engram_vocab_size", 16000000);
  v.engram_n_heads = int_or(j, "engram_n_heads", 8);
  v.engram_head_dim = int_or(j, "engram_head_dim", 256);
  v.engram_pad_id = int_or(j, "engram_pad_id", int_or(j, "engram_pad_token_id", 2));
  v.engram_compressed_vocab_size = int_or(j, "engram_compressed_vocab_size", 99092);
  if (v.engram_layer_ids.empty()) return Status::ok();
  auto bad = [&](const std::string& m) { return Status::error(src + ": " + m); };
  if (v.engram_num_embeddings.size() != v.engram_layer_ids.size())
    return bad(fmt::format("engram_num_embeddings has {} entries for {} engram_layer_ids", v.engram_num_embeddings.size(),
                           v.engram_layer_ids.size()));
  for (size_t i = 0; i < v.engram_layer_ids.size(); ++i)
    if (v.engram_layer_ids[i] >= c.num_hidden_layers || (i > 0 && v.engram_layer_ids[i] <= v.engram_layer_ids[i - 1]))
      return bad(fmt::format("engram_layer_ids must be increasing layer ids < {}, found {}", c.num_hidden_layers,
                             fmt::join(v.engram_layer_ids, ", ")));
  if (v.engram_max_ngram_size < 2 || v.engram_n_heads < 1 || v.engram_head_dim < 1 || v.engram_vocab_size < 1 ||
      v.engram_compressed_vocab_size < 1)
    return bad("engram_max_ngram_size must be >= 2 and engram_n_heads, engram_head_dim, engram_vocab_size, "
               "engram_compressed_vocab_size >= 1");
  if (v.engram_pad_id < 0 || v.engram_pad_id >= c.vocab_size)
    return bad(fmt::format("engram_pad_id {} is not a token id < vocab_size {}", v.engram_pad_id, c.vocab_size));
  return Status::ok();
}

}  // namespace

Status read_v41_schedule(const json& j, const std::string& src, ModelConfig& c) {
  Status err;
  const int64_t n = c.num_hidden_layers, nextn = c.num_nextn_predict_layers;
  std::vector<int64_t> ratios = int_list(j, "compress_ratios", src, err).value_or(default_ratios(n));
  DSI_RETURN_IF_ERROR(err);
  if (int64_t(ratios.size()) < n || int64_t(ratios.size()) > n + nextn)
    return Status::errorf("{}: 'compress_ratios' must have num_hidden_layers ({}) to num_hidden_layers + "
                          "num_nextn_predict_layers ({}) entries, found {}", src, n, n + nextn, ratios.size());
  for (size_t i = size_t(n); i < ratios.size(); ++i)
    if (ratios[i] != 0) return Status::errorf("{}: compress_ratios[{}] (DSpark layer) must be 0, found {}", src, i, ratios[i]);
  ratios.resize(size_t(n));
  c.compress_ratios = ratios;
  for (int64_t r : ratios) {
    c.layer_types.push_back(r == 0 ? AttnType::Sliding : AttnType::CSA2);
    c.mlp_layer_types.push_back(MlpType::MoE);
  }
  DSI_RETURN_IF_ERROR(read_sources(j, src, c));
  DSI_RETURN_IF_ERROR(read_engram(j, src, c));
  V41Params& v = c.v41;
  v.dspark_block_size = int_or(j, "dspark_block_size", 0);
  v.dspark_noise_token_id = int_or(j, "dspark_noise_token_id", -1);
  v.dspark_markov_rank = int_or(j, "dspark_markov_rank", 0);
  v.dspark_n_routed_experts = int_or(j, "dspark_n_routed_experts", 0);
  v.dspark_num_experts_per_tok = int_or(j, "dspark_num_experts_per_tok", 0);
  v.dspark_target_layer_ids = int_list(j, "dspark_target_layer_ids", src, err).value_or(std::vector<int64_t>{});
  DSI_RETURN_IF_ERROR(err);

  DSI_RETURN_IF_ERROR(detail::check_shared_shapes(c, src, !v.kv_source_layer_ids.empty()));
  if (c.n_shared_experts != 1) return Status::errorf("{}: n_shared_experts must be 1, found {}", src, c.n_shared_experts);
  return Status::ok();
}

}  // namespace dsinfer::io
