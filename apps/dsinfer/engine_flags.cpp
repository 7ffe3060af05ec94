// Engine flags (see engine_flags.h).
#include "apps/dsinfer/engine_flags.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace dsinfer::cli {

std::string engine_flags_help() {
  const EngineOptions d;
  return fmt::format(
      "  engine:   --backend cpu|cuda ({})  --numerics official|hf ({})  --load-format auto|dummy  --tokenizer FILE\n"
      "            --max-num-seqs N ({})  --max-num-batched-tokens N ({})  --max-model-len N  --seed N\n"
      "            --state-memory-gb X\n"
      "  speculative decoding: --speculative dspark|mtp1|off ({})  --num-speculative-tokens K ({})\n"
      "            --speculative-budget N  --speculative-min-survival X\n",
      d.backend, d.numerics, d.max_num_seqs, d.max_num_batched_tokens, d.speculative, d.num_speculative_tokens);
}

bool parse_number_flag(const char* cmd, const std::string& flag, const std::string& v, double& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || errno == ERANGE) {
    std::fprintf(stderr, "%s: %s expects a number, found '%s'\n", cmd, flag.c_str(), v.c_str());
    return false;
  }
  return true;
}

bool parse_int_flag(const char* cmd, const std::string& flag, const std::string& v, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE) {
    std::fprintf(stderr, "%s: %s expects an integer, found '%s'\n", cmd, flag.c_str(), v.c_str());
    return false;
  }
  out = int64_t(x);
  return true;
}

FlagParse parse_engine_flag(const char* cmd, int argc, char** argv, int& i, EngineOptions& eo) {
  const std::string a = argv[i];
  static const char* kFlags[] = {"--model", "--backend", "--numerics", "--load-format", "--tokenizer", "--max-num-seqs",
                                 "--max-num-batched-tokens", "--max-model-len", "--seed", "--state-memory-gb",
                                 "--speculative", "--num-speculative-tokens", "--speculative-budget",
                                 "--speculative-min-survival"};
  bool known = false;
  for (const char* f : kFlags) known = known || a == f;
  if (!known) return FlagParse::kNotEngineFlag;
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: option '%s' needs a value\n", cmd, a.c_str());
    return FlagParse::kError;
  }
  const std::string v = argv[++i];
  int64_t n = 0;
  double x = 0;
  if (a == "--model") eo.model_dir = v;
  else if (a == "--backend") eo.backend = v;
  else if (a == "--numerics") eo.numerics = v;
  else if (a == "--load-format") eo.load_format = v;
  else if (a == "--tokenizer") eo.tokenizer_path = v;
  else if (a == "--speculative") eo.speculative = v;
  else if (a == "--state-memory-gb" || a == "--speculative-min-survival") {
    if (!parse_number_flag(cmd, a, v, x)) return FlagParse::kError;
    (a == "--state-memory-gb" ? eo.state_memory_gb : eo.speculative_min_survival) = x;
  } else {
    if (!parse_int_flag(cmd, a, v, n)) return FlagParse::kError;
    if (n < 0) {
      std::fprintf(stderr, "%s: %s must be >= 0, found %s\n", cmd, a.c_str(), v.c_str());
      return FlagParse::kError;
    }
    if (a == "--max-num-seqs") eo.max_num_seqs = int32_t(std::min<int64_t>(n, INT32_MAX));
    else if (a == "--max-num-batched-tokens") eo.max_num_batched_tokens = n;
    else if (a == "--max-model-len") eo.max_model_len = n;
    else if (a == "--num-speculative-tokens") eo.num_speculative_tokens = int32_t(std::min<int64_t>(n, INT32_MAX));
    else if (a == "--speculative-budget") eo.speculative_budget = n;
    else eo.seed = uint64_t(n);
  }
  return FlagParse::kOk;
}

}  // namespace dsinfer::cli
