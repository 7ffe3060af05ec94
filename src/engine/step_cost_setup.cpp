// Step cost model setup (see step_cost_setup.h).
#include "engine/step_cost_setup.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "perf/step_profile.h"

namespace dsinfer::engine {

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What a profiled table depends on: the runner (backend, GPU, numerics, weight bytes), the model's config, the
// load format and layer count, batch invariance, the drafter's tapped layers (hidden capture), the grid, and what
// the profile measures (kProfileVersion: a table cached by an older profile lacks what this one measures).
std::string model_key(const EngineOptions& o, const runner::ModelRunner& r, const speculative::SpeculativeConfig& s,
                      int64_t max_seqs) {
  const std::string config = read_file(std::filesystem::path(o.model_dir) / "config.json");
  constexpr int kProfileVersion = 3;  // 2: the "plain" line; 3: the "round" line
  return fmt::format("{} | config {:016x} | {} | load {} | invariant {} | {} k {} | seqs {} | profile {}", r.name(),
                     fnv1a(config), o.numerics, o.load_format, o.batch_invariant ? 1 : 0,
                     speculative::spec_method_name(s.method), s.num_speculative_tokens, max_seqs, kProfileVersion);
}

// DSINFER_SPEC_ROUND_COST=0 asks for the round's parts timed apart (the before / after switch of the measured
// round): the model without its "round" line. (Two-wait rounds, DSINFER_SPEC_ONE_WAIT=0, drop it where that switch
// is read: Speculator::set_cost_model.)
speculative::StepCostModel apply_round_cost_switch(speculative::StepCostModel m) {
  const char* e = std::getenv("DSINFER_SPEC_ROUND_COST");
  if (e && std::string(e) == "0") return m.without_round();
  return m;
}

}  // namespace

std::string step_cost_cache_dir() {
  if (const char* d = std::getenv("DSINFER_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dsinfer";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/dsinfer";
  return "";
}

Result<speculative::StepCostModel> setup_step_cost(const EngineOptions& o, const speculative::SpeculativeConfig& spec,
                                                   runner::ModelRunner& runner, speculative::Drafter& drafter,
                                                   const cache::StateCache& sc, int64_t max_model_len) {
  if (spec.cost_model == "off" || !spec.enabled()) return speculative::StepCostModel();
  const int64_t max_seqs = std::max<int64_t>(1, std::min<int64_t>(o.max_num_seqs, sc.num_slots()));
  const int32_t rows = 1 + spec.num_speculative_tokens;
  if (spec.cost_model == "auto" && o.backend == "cpu") return speculative::StepCostModel::proportional(max_seqs, rows);
  const std::string key = model_key(o, runner, spec, max_seqs);
  std::filesystem::path file = spec.cost_model;
  if (spec.cost_model == "auto") {
    const std::string dir = step_cost_cache_dir();
    const std::string name = fmt::format("step_cost_{:016x}.txt", fnv1a(key));
    file = dir.empty() ? std::filesystem::path() : std::filesystem::path(dir) / name;
  }
  std::error_code ec;
  if (!file.empty() && std::filesystem::exists(file, ec)) {
    Result<speculative::StepCostModel> m = speculative::StepCostModel::parse(read_file(file), file.string());
    if (!m && spec.cost_model != "auto") return m.status().with_context("speculative_cost_model");
    if (m && (m->key() == key || m->key() == "*") && m->max_rows() >= rows)
      return apply_round_cost_switch(std::move(*m));
    std::fprintf(stderr, "speculative cost model: %s %s; profiling again\n", file.string().c_str(),
                 m ? "is for another model, GPU or shape" : m.status().message().c_str());
  }
  perf::StepProfileOptions po;
  po.max_seqs = max_seqs;
  po.max_rows = rows;
  po.key = key;
  const auto t0 = std::chrono::steady_clock::now();
  DSI_ASSIGN_OR_RETURN(speculative::StepCostModel m,
                       perf::profile_step_cost(runner, sc.layout(), sc.num_blocks(), max_model_len, po, &drafter));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string where = "not cached";
  if (!file.empty()) {
    std::filesystem::create_directories(file.parent_path(), ec);
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << m.serialize();
    where = out.good() ? "cached in " + file.string() : "could not write " + file.string();
  }
  std::fprintf(stderr, "speculative cost model: verify steps and drafting profiled in %.2f s (%s)\n", s,
               where.c_str());
  return apply_round_cost_switch(std::move(m));
}

}  // namespace dsinfer::engine
