// Calibration of the DSpark confidence head in the engine (issue 32): runs held-out prompts through the engine with
// every draft verified (--speculative-cost-model off) and prints, per draft position k, the predicted prefix
// survival a_k (mean over the rounds that verified draft k) against the observed fraction of those rounds whose
// drafts 1..k were all accepted, and the reliability curve: each verified draft reached (its predecessors
// accepted), binned by its predicted conditional acceptance a_k / a_{k-1}, with the observed acceptance per bin and
// the expected calibration error (ECE, bins weighted by their counts).
//
// Held-out prompts: the evaluation samples of models/dsv4-small/training/report.json (held-out files of the
// training corpus) and windows of this repository's tools/ Python sources (the corpus held installed packages and
// this repository's README and docs, not its tools). Greedy unless --temperature is given.
// Usage: dsinfer_spec_calibration [--model DIR] [--tools DIR (the checkout's tools/)] [--backend cpu|cuda]
//        [--method dspark|mtp1] [--prompts N (32)]
//        [--max-tokens N (64)] [--max-num-seqs N (16)] [--temperature X (0)]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/build_paths.h"

using namespace dsinfer;

namespace {

struct Args {
  std::string model, tools, backend = "cpu", method = "dspark";
  int prompts = 32, max_tokens = 64, max_seqs = 16;
  double temperature = 0;
};

bool parse(int argc, char** argv, Args& a) {
  a.model = std::string(test::build_source_dir()) + "/models/dsv4-small";
  a.tools = std::string(test::build_source_dir()) + "/tools";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--model") a.model = v;
    else if (f == "--backend") a.backend = v;
    else if (f == "--tools") a.tools = v;
    else if (f == "--method") a.method = v;
    else if (f == "--prompts") a.prompts = std::atoi(v.c_str());
    else if (f == "--max-tokens") a.max_tokens = std::atoi(v.c_str());
    else if (f == "--max-num-seqs") a.max_seqs = std::atoi(v.c_str());
    else if (f == "--temperature") a.temperature = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "dsinfer_spec_calibration: unknown flag %s\n", f.c_str());
      return false;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "dsinfer_spec_calibration: flag %s needs a value\n", argv[argc - 1]);
    return false;
  }
  if (a.prompts < 1 || a.max_tokens < 1 || a.max_seqs < 1) {
    std::fprintf(stderr, "dsinfer_spec_calibration: --prompts, --max-tokens and --max-num-seqs must be >= 1\n");
    return false;
  }
  return true;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> held_out_prompts(const Args& a) {
  std::vector<std::string> out;
  const std::string report = slurp(std::filesystem::path(a.model) / "training/report.json");
  if (!report.empty()) {
    auto j = nlohmann::json::parse(report, nullptr, false);
    if (!j.is_discarded() && j.contains("greedy") && j["greedy"].contains("samples"))
      for (const auto& s : j["greedy"]["samples"])
        if (s.contains("prompt") && s["prompt"].is_string()) out.push_back(s["prompt"].get<std::string>());
  }
  std::string src;
  const std::filesystem::path tools = a.tools;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(tools, ec); !ec && it != decltype(it)(); ++it)
    if (it->path().extension() == ".py") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) src += slurp(f);
  // Windows of 240 bytes moved to UTF-8 character boundaries (the sources hold a few multi-byte characters).
  const auto continuation = [&](size_t p) { return p < src.size() && (uint8_t(src[p]) & 0xC0) == 0x80; };
  for (size_t i = 0; int(out.size()) < a.prompts && src.size() > 400; ++i) {
    size_t begin = (i * 15485863) % (src.size() - 300), end = begin + 240;
    while (continuation(begin)) ++begin;
    while (continuation(end)) --end;
    out.push_back(src.substr(begin, end - begin));
  }
  out.resize(std::min(out.size(), size_t(a.prompts)));
  return out;
}

void print_tables(const SpeculativeMetrics& m) {
  std::printf("\nper position (every draft verified): predicted vs observed prefix survival, conditional acceptance\n");
  std::printf("%-4s %8s %10s %10s %8s %10s %10s\n", "k", "rounds", "pred a_k", "obs a_k", "gap", "trials", "obs acc");
  for (size_t k = 0; k < m.verified_per_position.size(); ++k) {
    const double n = double(std::max<int64_t>(1, m.verified_per_position[k]));
    const double pred = m.predicted_survival_per_position[k] / n, obs = double(m.survived_per_position[k]) / n;
    const double acc = double(m.accepted_per_position[k]) / double(std::max<int64_t>(1, m.trials_per_position[k]));
    std::printf("%-4zu %8lld %10.3f %10.3f %+8.3f %10lld %10.3f\n", k + 1, (long long)m.verified_per_position[k], pred,
                obs, pred - obs, (long long)m.trials_per_position[k], acc);
  }
  std::printf("\nreliability curve: drafts reached, by predicted conditional acceptance a_k / a_(k-1)\n");
  std::printf("%-11s %8s %10s %10s %8s\n", "bin", "drafts", "predicted", "observed", "gap");
  int64_t total = 0;
  double ece = 0;
  for (size_t b = 0; b < m.calibration_trials.size(); ++b) total += m.calibration_trials[b];
  for (size_t b = 0; b < m.calibration_trials.size(); ++b) {
    const int64_t n = m.calibration_trials[b];
    const double w = 1.0 / double(m.calibration_trials.size());
    const double lo = double(b) * w, hi = lo + w;
    if (n == 0) {
      std::printf("[%.1f, %.1f) %8d %10s %10s %8s\n", lo, hi, 0, "-", "-", "-");
      continue;
    }
    const double pred = m.calibration_predicted[b] / double(n), obs = double(m.calibration_accepted[b]) / double(n);
    ece += double(n) / double(std::max<int64_t>(1, total)) * std::fabs(pred - obs);
    std::printf("[%.1f, %.1f) %8lld %10.3f %10.3f %+8.3f\n", lo, hi, (long long)n, pred, obs, pred - obs);
  }
  std::printf("ECE (conditional acceptance, %zu bins): %.4f over %lld drafts\n", m.calibration_trials.size(), ece,
              (long long)total);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 2;
  EngineOptions o;
  o.model_dir = a.model;
  o.backend = a.backend;
  o.speculative = a.method;
  o.speculative_cost_model = "off";  // every draft verified: every position observed
  o.max_num_seqs = a.max_seqs;
  o.max_model_len = 512;
  o.seed = 1;
  auto e = engine::Engine::create(o);
  if (!e.is_ok()) {
    std::fprintf(stderr, "dsinfer_spec_calibration: %s\n", e.status().message().c_str());
    return 1;
  }
  const std::vector<std::string> prompts = held_out_prompts(a);
  for (const std::string& p : prompts) {
    Request r;
    r.prompt_text = p;
    r.sampling.max_tokens = a.max_tokens;
    r.sampling.temperature = a.temperature;
    r.sampling.ignore_eos = true;
    if (auto id = (*e)->add(r); !id.is_ok()) {
      std::fprintf(stderr, "dsinfer_spec_calibration: %s\n", id.status().message().c_str());
      return 1;
    }
  }
  while ((*e)->has_unfinished()) {
    if (Status s = (*e)->step(); !s.is_ok()) {
      std::fprintf(stderr, "dsinfer_spec_calibration: %s\n", s.message().c_str());
      return 1;
    }
    (void)(*e)->take_finished();
  }
  const SpeculativeMetrics m = (*e)->speculative_metrics();
  std::printf("%s on %s, %s: %zu held-out prompts x %d tokens, temperature %.2f; %lld rounds, mean accepted length "
              "%.3f\n", a.method.c_str(), a.model.c_str(), a.backend.c_str(), prompts.size(), a.max_tokens,
              a.temperature, (long long)m.rounds, m.mean_accepted_length());
  print_tables(m);
  return 0;
}
