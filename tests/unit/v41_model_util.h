// DeepSeek-V4.1 models for engine tests. The tiny-v41 fixtures' tokenizer.json is a WordLevel model, which only the
// Engram vocabulary reads, so the engine's detokenizer gets a byte-level BPE one (byte_tokenizer). The fixtures have
// the DSpark keys but no stages: v41_drafter_specs lists the tensors of a one-stage drafter in the V4.1 layout
// (speculative/draft_weights.h load_dspark_weights_v41), write_v41_with_drafter copies a fixture with such a drafter
// of random weights. Shared by the CPU tests (tests/unit) and the GPU tests (tests/gpu, which include this folder).
#pragma once
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/config.h"
#include "io/safetensors.h"
#include "speculative/draft_config.h"

namespace dsinfer::test {

// A byte-level BPE tokenizer.json covering the fixtures' 512 ids (256 byte tokens, then plain placeholders), written
// to dir/tokenizer.json; returns its path.
inline std::string byte_tokenizer(const std::filesystem::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = direct ? b : next++;
    std::string u8 = cp < 0x80 ? std::string(1, char(cp))
                                : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    vocab[u8] = b;
  }
  for (int i = 256; i < 512; ++i) vocab["<t" + std::to_string(i) + ">"] = i;  // decodable, never encoded
  const nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                            {"decoder", {{"type", "ByteLevel"}}}};
  const std::string path = (dir / "tokenizer.json").string();
  std::ofstream(path) << j.dump();
  return path;
}

// Name and shape of every tensor of a one-stage V4.1 drafter with `dc`'s expert count and Markov rank.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> v41_drafter_specs(const io::ModelConfig& cfg,
                                                                                   const speculative::DraftConfig& dc) {
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, mix = (2 + n) * n, H = cfg.num_attention_heads;
  const int64_t hd = cfg.head_dim, qr = cfg.q_lora_rank, g = cfg.o_groups, r = cfg.o_lora_rank;
  const int64_t I = cfg.moe_intermediate_size, V = cfg.vocab_size, E = dc.n_routed_experts, mr = dc.markov_rank;
  const int64_t m = int64_t(dc.target_layer_ids.size());
  const std::string p = "mtp.0.";
  std::vector<std::pair<std::string, std::vector<int64_t>>> s;
  for (const char* site : {"attn", "ffn"}) {
    s.push_back({p + "hc_" + site + "_fn", {mix, n * D}});
    s.push_back({p + "hc_" + site + "_base", {mix}});
    s.push_back({p + "hc_" + site + "_scale", {3}});
    s.push_back({p + site + "_norm.weight", {D}});
  }
  s.push_back({p + "attn.attn_sink", {H}});
  s.push_back({p + "attn.wq_a.weight", {qr, D}});
  s.push_back({p + "attn.q_norm.weight", {qr}});
  s.push_back({p + "attn.wq_b.weight", {H * hd, qr}});
  s.push_back({p + "attn.wkv.weight", {hd, D}});
  s.push_back({p + "attn.kv_norm.weight", {hd}});
  s.push_back({p + "attn.wo_a.weight", {g * r, H * hd / g}});
  s.push_back({p + "attn.wo_b.weight", {D, g * r}});
  s.push_back({p + "ffn.gate.weight", {E, D}});
  s.push_back({p + "ffn.gate.bias", {E}});
  s.push_back({p + "ffn.gate.bias_vl", {E}});
  for (int64_t e = 0; e <= E; ++e) {  // E routed experts, then the shared one
    const std::string ep = e < E ? p + "ffn.experts." + std::to_string(e) + "." : p + "ffn.shared_experts.";
    s.push_back({ep + "w1.weight", {I, D}});
    s.push_back({ep + "w3.weight", {I, D}});
    s.push_back({ep + "w2.weight", {D, I}});
  }
  s.push_back({p + "main_proj.weight", {D, m * D}});
  s.push_back({p + "main_norm.weight", {D}});
  s.push_back({p + "norm.weight", {D}});
  s.push_back({p + "markov_head.embed.weight", {V, mr}});
  s.push_back({p + "markov_head.head.weight", {V, mr}});
  s.push_back({p + "confidence_head.proj.weight", {1, D + mr}});
  return s;
}

// A copy of the fixture in `fixture_dir` (config, tokenizer files) into `out` whose config declares one DSpark stage
// (4 experts, top-2, Markov rank 8) and whose model.safetensors holds the fixture's tensors plus that stage with
// random weights (seeded; norms near 1, projections of scale 0.05). Returns an empty string when the fixture is absent.
inline std::string write_v41_with_drafter(const std::string& fixture_dir, const std::filesystem::path& out,
                                          uint32_t seed) {
  namespace fs = std::filesystem;
  if (!fs::exists(fixture_dir + "/config.json")) return "";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(fixture_dir + "/" + f)) fs::copy_file(fixture_dir + "/" + f, out / f, fs::copy_options::overwrite_existing);
  std::ifstream in(fixture_dir + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  nlohmann::json& t = c.contains("text_config") ? c["text_config"] : c;
  t["num_nextn_predict_layers"] = 1;
  t["dspark_n_routed_experts"] = 4;
  t["dspark_num_experts_per_tok"] = 2;
  t["dspark_markov_rank"] = 8;
  std::ofstream(out / "config.json") << c.dump(1);
  const io::ModelConfig cfg = io::load_model_config(out.string()).value();
  const speculative::DraftConfig dc = speculative::load_draft_config(out.string()).value();
  std::vector<io::TensorToWrite> all;
  const io::SafetensorsFile src = io::SafetensorsFile::open(fixture_dir + "/model.safetensors").value();
  for (const auto& [name, v] : src.tensors()) all.push_back({name, v.dtype, v.shape, {v.data, v.data + v.nbytes}});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [name, shape] : v41_drafter_specs(cfg, dc)) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const bool norm = name.find("norm.weight") != std::string::npos;
    std::vector<float> v(static_cast<size_t>(numel));
    for (float& x : v) x = norm ? 1.0f + 0.1f * u(rng) : 0.05f * u(rng);
    all.push_back(io::make_f32_tensor(name, shape, v));
  }
  if (!io::write_safetensors((out / "model.safetensors").string(), all).is_ok()) return "";
  return out.string();
}

}  // namespace dsinfer::test
