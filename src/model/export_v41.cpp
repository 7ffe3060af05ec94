// See export_v41.h.
#include "model/export_v41.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/dtypes.h"
#include "io/quant.h"
#include "model/tensor_reader.h"
#include "model/weights.h"
#include "model/weights_v41.h"

namespace dsinfer::model {

namespace fs = std::filesystem;

namespace {

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// The scale tensor's name of a quantized weight (TensorReader::scale_for's rule).
std::string scale_name(const std::string& weight) {
  return weight.substr(0, weight.size() - (weight.ends_with(".weight") ? 7 : 0)) + ".scale";
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// One tensor in its official storage format: the data tensor, and the scale tensor where the format has one.
Result<std::vector<io::TensorToWrite>> encode(const TensorSpec& s, const std::vector<float>& w) {
  const int64_t R = s.rows, C = s.cols;
  std::vector<io::TensorToWrite> out;
  const std::vector<int64_t> shape =
      s.kind == TensorKind::Vector ? std::vector<int64_t>{C} : std::vector<int64_t>{R, C};
  switch (storage_format_v41(s)) {
    case StorageV41::Fp8Block32:
    case StorageV41::Fp8Row32: {
      const int64_t br = storage_format_v41(s) == StorageV41::Fp8Row32 ? 1 : 32;
      std::vector<uint8_t> q(size_t(R * C)), sc(size_t(((R + br - 1) / br) * ((C + 31) / 32)));
      io::quant_fp8_block(w.data(), R, C, br, 32, q.data(), sc.data());
      out.push_back({s.name, DType::F8_E4M3, {R, C}, std::move(q)});
      out.push_back({scale_name(s.name), DType::F8_E8M0, {(R + br - 1) / br, (C + 31) / 32}, std::move(sc)});
      return out;
    }
    case StorageV41::Fp4Row32: {
      if (C % 32) return Status::errorf("{}: FP4 storage needs in % 32 == 0, found [{}, {}]", s.name, R, C);
      std::vector<uint8_t> q(size_t(R * C / 2)), sc(size_t(R * C / 32));
      io::quant_fp4_e2m1(w.data(), R, C, 32, q.data(), sc.data());
      out.push_back({s.name, DType::I8, {R, C / 2}, std::move(q)});
      out.push_back({scale_name(s.name), DType::F8_E8M0, {R, C / 32}, std::move(sc)});
      return out;
    }
    case StorageV41::F32:
      out.push_back({s.name, DType::F32, shape, bytes_of(w)});
      return out;
    case StorageV41::BF16: {
      std::vector<uint16_t> h(w.size());
      for (size_t i = 0; i < w.size(); ++i) h[i] = f32_to_bf16(w[i]);
      out.push_back({s.name, DType::BF16, shape, bytes_of(h)});
      return out;
    }
  }
  return Status::errorf("{}: no storage format", s.name);
}

// config_json with the release's quantization_config (at the top level, where the composite config keeps it).
Result<std::string> official_config(const std::string& config_json) {
  nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (!j.is_object()) return Status::error("config.json is not a JSON object");
  if (j.contains("text_config") && j["text_config"].is_object()) j["text_config"].erase("quantization_config");
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {32, 32}},
                              {"scale_fmt", "ue8m0"},
                              {"expert_dtype", "fp4"}};
  return j.dump(2);
}

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) return Status::errorf("cannot write {}", p.string());
  return Status::ok();
}

}  // namespace

TensorFillV41 checkpoint_fill_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  auto rd = std::make_shared<TensorReader>(ckpt, [](const std::string& n) { return canonical_tensor_name(n); });
  auto mu = std::make_shared<std::mutex>();
  const std::pair<int64_t, int64_t> dense{cfg.fp8_block_n, cfg.fp8_block_k};
  return [rd, mu, dense](const TensorSpec& s, std::vector<float>& out) -> Status {
    std::lock_guard<std::mutex> lock(*mu);  // the reader keeps its bookkeeping
    const auto block = is_engram_table(s) ? std::pair<int64_t, int64_t>{1, 32} : dense;
    if (!rd->weight(s.name, s.rows, s.cols, block, &out).data) return rd->finish("source checkpoint");
    return Status::ok();
  };
}

TensorFillV41 random_fill_v41(uint64_t seed) {
  return [seed](const TensorSpec& s, std::vector<float>& out) -> Status {
    out.resize(size_t(s.rows * s.cols));
    uint64_t x = seed ^ name_hash(s.name);
    const bool norm = s.name.find("norm") != std::string::npos;
    const bool small = s.kind == TensorKind::Vector && !norm;
    const float center = norm ? 1.0f : 0.0f;
    const float spread = norm ? 0.05f : small ? 0.1f : 1.7f / std::sqrt(float(s.cols));
    for (float& v : out) {
      const float u = float(splitmix(x) >> 40) * 0x1p-24f;  // [0, 1)
      v = center + spread * (2.0f * u - 1.0f);
    }
    return Status::ok();
  };
}

Status write_checkpoint_v41(const io::ModelConfig& cfg, const std::string& config_json, const TensorFillV41& fill,
                            const std::string& out_dir, int64_t shard_bytes, int threads) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::errorf("cannot create {}: {}", out_dir, ec.message());
  DSI_ASSIGN_OR_RETURN(const std::string cfg_text, official_config(config_json));
  const std::vector<TensorSpec> specs = weight_specs_v41(cfg);
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<io::TensorToWrite> shard;
  int64_t shard_size = 0, total = 0;
  int shard_index = 0;
  auto flush = [&]() -> Status {
    if (shard.empty()) return Status::ok();
    const std::string file = fmt::format("model-{:05d}.safetensors", ++shard_index);
    for (const auto& t : shard) weight_map[t.name] = file;
    DSI_RETURN_IF_ERROR(io::write_safetensors((fs::path(out_dir) / file).string(), shard));
    shard.clear();
    shard_size = 0;
    return Status::ok();
  };
  const size_t step = size_t(std::max(threads, 1));
  for (size_t b = 0; b < specs.size(); b += step) {
    const size_t n = std::min(step, specs.size() - b);
    std::vector<Result<std::vector<io::TensorToWrite>>> enc(n, Status::error("not run"));
    auto work = [&](size_t k) {
      std::vector<float> w;
      const Status st = fill(specs[b + k], w);
      if (!st.is_ok()) {
        enc[k] = st;
      } else if (w.size() != size_t(specs[b + k].rows * specs[b + k].cols)) {
        enc[k] = Status::errorf("{}: the source gave {} values", specs[b + k].name, w.size());
      } else {
        enc[k] = encode(specs[b + k], w);
      }
    };
    std::vector<std::thread> pool;
    for (size_t k = 1; k < n; ++k) pool.emplace_back(work, k);
    work(0);
    for (auto& t : pool) t.join();
    for (auto& r : enc) {
      if (!r.is_ok()) return r.status().with_context(out_dir);
      for (auto& t : r.value()) {
        const int64_t size = int64_t(t.bytes.size());
        if (shard_size > 0 && shard_size + size > shard_bytes) DSI_RETURN_IF_ERROR(flush());
        shard_size += size;
        total += size;
        shard.push_back(std::move(t));
      }
    }
  }
  DSI_RETURN_IF_ERROR(flush());
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  DSI_RETURN_IF_ERROR(write_text(fs::path(out_dir) / "model.safetensors.index.json", index.dump(2)));
  return write_text(fs::path(out_dir) / "config.json", cfg_text);
}

Status convert_checkpoint_v41(const std::string& model_dir, const std::string& out_dir, int64_t shard_bytes,
                              int threads) {
  DSI_ASSIGN_OR_RETURN(const io::ModelConfig cfg, io::load_model_config(model_dir));
  if (!cfg.is_v41()) return Status::errorf("{}: not a DeepSeek-V4.1 config", model_dir);
  DSI_ASSIGN_OR_RETURN(const io::Checkpoint ckpt, open_checkpoint_v41(model_dir));
  std::ifstream in(fs::path(model_dir) / "config.json", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  DSI_RETURN_IF_ERROR(write_checkpoint_v41(cfg, text.str(), checkpoint_fill_v41(cfg, ckpt), out_dir, shard_bytes,
                                           threads));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    if (!fs::exists(fs::path(model_dir) / f)) continue;
    std::error_code ec;
    fs::copy_file(fs::path(model_dir) / f, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::errorf("cannot copy {} to {}: {}", f, out_dir, ec.message());
  }
  return Status::ok();
}

Status write_random_checkpoint_v41(const std::string& config_path, const std::vector<std::string>& overrides,
                                   uint64_t seed, const std::string& out_dir, int64_t shard_bytes, int threads) {
  const fs::path file = fs::is_directory(config_path) ? fs::path(config_path) / "config.json" : fs::path(config_path);
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::errorf("cannot read {}", file.string());
  nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  if (!c.is_object()) return Status::errorf("{}: not a JSON object", file.string());
  nlohmann::json& t = c.contains("text_config") && c["text_config"].is_object() ? c["text_config"] : c;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == 0 || eq == std::string::npos) return Status::errorf("override '{}' is not key=value", o);
    nlohmann::json v = nlohmann::json::parse(o.substr(eq + 1), nullptr, false);
    t[o.substr(0, eq)] = v.is_discarded() ? nlohmann::json(o.substr(eq + 1)) : v;
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::errorf("cannot create {}: {}", out_dir, ec.message());
  DSI_RETURN_IF_ERROR(write_text(fs::path(out_dir) / "config.json", c.dump(1)));
  DSI_ASSIGN_OR_RETURN(const io::ModelConfig cfg, io::load_model_config(out_dir));
  if (!cfg.is_v41()) return Status::errorf("{}: not a DeepSeek-V4.1 config", file.string());
  return write_checkpoint_v41(cfg, c.dump(1), random_fill_v41(seed), out_dir, shard_bytes, threads);
}

}  // namespace dsinfer::model
