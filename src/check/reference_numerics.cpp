// Reference numerics lookup (see reference_numerics.h).
#include "check/reference_numerics.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dsinfer::check {

namespace {

Result<model::Numerics> named(const std::string& name, const std::string& where) {
  auto n = model::Numerics::from_name(name);
  if (!n) return n.status().with_context(where);
  return n;
}

// True when reference.json describes a transformers run: the shared fixtures record HF's own self-consistency
// per prompt ("hf_cached_decode_agrees", ...) or the transformers sources used ("hf_source").
bool made_by_transformers(const nlohmann::json& j) {
  if (j.contains("hf_source")) return true;
  if (!j.contains("prompts") || !j["prompts"].is_array()) return false;
  for (const auto& p : j["prompts"]) {
    if (!p.is_object()) continue;
    for (const auto& [key, value] : p.items())
      if (key.rfind("hf_", 0) == 0) return true;
  }
  return false;
}

}  // namespace

Result<ReferenceNumerics> reference_numerics(const io::SafetensorsFile& reference) {
  const std::string& path = reference.path();
  if (auto it = reference.metadata().find("numerics"); it != reference.metadata().end()) {
    DSI_ASSIGN_OR_RETURN(model::Numerics n, named(it->second, path + ": __metadata__ \"numerics\""));
    return ReferenceNumerics{n, "reference metadata"};
  }
  const std::filesystem::path json_path = std::filesystem::path(path).parent_path() / "reference.json";
  std::ifstream f(json_path);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return Status::errorf("{}: not a JSON object (read for the numerics of {})", json_path.string(), path);
    if (j.contains("numerics")) {
      if (!j["numerics"].is_string())
        return Status::errorf("{}: \"numerics\" must be a string, found a JSON {}", json_path.string(),
                              j["numerics"].type_name());
      DSI_ASSIGN_OR_RETURN(model::Numerics n,
                           named(j["numerics"].get<std::string>(), json_path.string() + ": \"numerics\""));
      return ReferenceNumerics{n, "reference.json"};
    }
    if (made_by_transformers(j)) return ReferenceNumerics{model::Numerics::hf(), "reference.json"};
  }
  return ReferenceNumerics{model::Numerics::hf(), "assumed (transformers)"};
}

}  // namespace dsinfer::check
