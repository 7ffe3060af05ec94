// DraftConfig parsing (see draft_config.h).
#include "speculative/draft_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "io/model_files.h"

namespace dsinfer::speculative {

using nlohmann::json;

namespace {
const std::pair<const char*, const char*> kOfficialNames[] = {
    {"n_layers", "num_hidden_layers"}, {"n_mtp_layers", "num_nextn_predict_layers"},
    {"window_size", "sliding_window"}, {"n_activated_experts", "num_experts_per_tok"},
    {"dspark_n_activated_experts", "dspark_num_experts_per_tok"}};
}  // namespace

Result<SpecMethod> parse_spec_method(const std::string& name) {
  if (name == "off" || name.empty()) return SpecMethod::kOff;
  if (name == "dspark") return SpecMethod::kDspark;
  if (name == "mtp1") return SpecMethod::kMtp1;
  return Status::errorf("unknown speculative method '{}' (expected dspark, mtp1 or off)", name);
}

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kOff: return "off";
    case SpecMethod::kDspark: return "dspark";
    case SpecMethod::kMtp1: return "mtp1";
  }
  return "?";
}

Result<DraftConfig> load_draft_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  DSI_ASSIGN_OR_RETURN(const std::string text, io::read_regular_file(path));
  const json top = json::parse(text, nullptr, false);
  if (top.is_discarded() || !top.is_object()) return Status::errorf("{}: not a JSON object", path);
  // DeepSeek-V4.1 configs nest the text model's keys (the DSpark ones included) under text_config; the official
  // inference config spells some of them with ModelArgs names.
  json j = top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  for (const auto& [from, to] : kOfficialNames)
    if (j.contains(from) && !j.contains(to)) j[to] = j[from];
  DraftConfig c;
  Status err;
  auto integer = [&](const char* k, int64_t def, int64_t min) -> int64_t {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < min) {
      if (err.is_ok()) err = Status::errorf("{}: '{}' must be an integer >= {}, found {}", path, k, min, j[k].dump());
      return def;
    }
    return j[k].get<int64_t>();
  };
  auto numbers = [&](const char* k) {
    std::vector<double> out;
    if (!j.contains(k) || j[k].is_null()) return out;
    if (!j[k].is_array()) {
      if (err.is_ok()) err = Status::errorf("{}: '{}' must be an array of numbers, found {}", path, k, j[k].dump());
      return out;
    }
    for (const json& v : j[k]) {
      if (!v.is_number() || !(v.get<double>() > 0)) {
        if (err.is_ok()) err = Status::errorf("{}: '{}' entries must be positive numbers, found {}", path, k, v.dump());
        return std::vector<double>{};
      }
      out.push_back(v.get<double>());
    }
    return out;
  };
  const int64_t L = integer("num_hidden_layers", 0, 1);
  c.block_size = integer("dspark_block_size", 0, 1);
  c.num_layers = c.block_size > 0 ? integer("num_nextn_predict_layers", 0, 0) : 0;
  c.markov_rank = integer("dspark_markov_rank", 0, 0);
  c.noise_token_id = integer("dspark_noise_token_id", -1, 0);
  c.n_routed_experts = integer("dspark_n_routed_experts", integer("n_routed_experts", 0, 0), 1);
  c.num_experts_per_tok = integer("dspark_num_experts_per_tok", integer("num_experts_per_tok", 0, 0), 1);
  c.sliding_window = integer("dspark_sliding_window", integer("sliding_window", 0, 0), 1);
  c.sts_temperatures = numbers("dspark_sts_temperatures");
  c.sts_temperatures_greedy = numbers("dspark_sts_temperatures_greedy");
  if (j.contains("dspark_target_layer_ids")) {
    const json& ids = j["dspark_target_layer_ids"];
    if (!ids.is_array()) err = Status::errorf("{}: 'dspark_target_layer_ids' must be an array", path);
    else
      for (const json& v : ids) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= L) {
          if (err.is_ok())
            err = Status::errorf("{}: dspark_target_layer_ids entry {} is not a layer in [0, {})", path, v.dump(), L);
          break;
        }
        c.target_layer_ids.push_back(v.get<int64_t>());
      }
  }
  if (j.contains("mtp1_file") && j["mtp1_file"].is_string()) c.mtp1_file = j["mtp1_file"].get<std::string>();
  else if (j.contains("mtp1_file") && !j["mtp1_file"].is_null() && err.is_ok())
    err = Status::errorf("{}: 'mtp1_file' must be a file name inside the model directory, found {}", path,
                         j["mtp1_file"].dump());
  DSI_RETURN_IF_ERROR(err);
  if (c.block_size > 0) {
    if (c.target_layer_ids.empty()) return Status::errorf("{}: dspark_block_size without dspark_target_layer_ids", path);
    if (c.noise_token_id < 0) return Status::errorf("{}: dspark_block_size without dspark_noise_token_id", path);
    for (const auto* t : {&c.sts_temperatures, &c.sts_temperatures_greedy})
      if (!t->empty() && int64_t(t->size()) != c.block_size)
        return Status::errorf("{}: dspark STS temperatures have {} entries, dspark_block_size is {}", path, t->size(),
                              c.block_size);
  }
  return c;
}

}  // namespace dsinfer::speculative
