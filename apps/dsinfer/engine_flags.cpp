// Engine flags (see engine_flags.h).
#include "apps/dsinfer/engine_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace dsinfer::cli {

std::string engine_flags_help() {
  const EngineOptions d;
  return fmt::format(
      "  engine:   --backend cpu|cuda ({})  --numerics official|hf ({})  --load-format auto|dummy  --tokenizer FILE\n"
      "            --max-num-seqs N ({})  --max-num-batched-tokens N ({})  --max-model-len N  --seed N\n"
      "            --state-memory-gb X\n"
      "  speculative decoding: --speculative dspark|mtp1|off ({})  --num-speculative-tokens K ({})\n"
      "            --speculative-budget N  --speculative-min-survival X  --speculative-row-cost X ({})\n"
      "  prefix caching: --enable-prefix-caching [exact|bounded] ({}; bare flag = exact)  --prefix-snapshot-memory-gb X\n"
      "            --prefix-cache-host-bytes N[KiB|MiB|GiB] (host tier for evicted blocks; 0 = none)\n"
      "  --batch-invariant: results independent of the batch (cuda: fixed kernel choices, slower; cpu: always)\n"
      "  sampling: --sampling device|host ({}; device = on the GPU where the backend can, same tokens as host)\n"
      "  several GPUs (cuda): --gpus N ({})  --expert-parallel-size N (= --gpus)  --data-parallel-size 1\n"
      "            --tensor-parallel-size 1 (routed experts split over the GPUs, the rest replicated)\n"
      "            --eplb (expert load balancing; not with --batch-invariant)  --num-redundant-experts R (0; a\n"
      "            multiple of --gpus)\n"
      "            --eplb-interval STEPS ({}; the placement is recomputed from measured loads this often)\n"
      "            --communicator auto|nccl|in-process (in-process: ranks may share a GPU; the cpu backend's\n"
      "            --gpus N runs N ranks of the reference)  --collective-timeout-ms MS (300000)\n"
      "            --inject-fault RANK:load|RANK:step:K|RANK:alloc:K (tests only: a planted rank failure)\n"
      "  --async-scheduling on|off ({}; on = plan step t+1 while the GPU runs step t, where device sampling applies)\n",
      d.backend, d.numerics, d.max_num_seqs, d.max_num_batched_tokens, d.speculative, d.num_speculative_tokens,
      d.speculative_row_cost, d.enable_prefix_caching, d.sampling, d.gpus, d.eplb_interval, d.async_scheduling);
}

bool parse_int_flag(const char* cmd, const std::string& flag, const std::string& v, long long lo, long long hi,
                    long long* out) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE || x < lo || x > hi) {
    std::fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], found '%s'\n", cmd, flag.c_str(), lo, hi, v.c_str());
    return false;
  }
  *out = x;
  return true;
}

bool parse_real_flag(const char* cmd, const std::string& flag, const std::string& v, double lo, double hi, double* out) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x) || x < lo || x > hi) {
    std::fprintf(stderr, "%s: %s expects a number in [%g, %g], found '%s'\n", cmd, flag.c_str(), lo, hi, v.c_str());
    return false;
  }
  *out = x;
  return true;
}

namespace {

// A byte count: an integer or a number with a binary unit suffix (K/KiB, M/MiB, G/GiB), e.g. 4GiB or 1.5G.
bool parse_bytes_flag(const char* cmd, const std::string& flag, const std::string& v, int64_t* out) {
  static const std::pair<const char*, double> kUnits[] = {{"KiB", 1024.0}, {"K", 1024.0}, {"MiB", 1048576.0},
                                                          {"M", 1048576.0}, {"GiB", 1073741824.0}, {"G", 1073741824.0}};
  std::string num = v;
  double scale = 1;
  for (const auto& [suffix, mult] : kUnits) {
    const std::string sfx = suffix;
    if (num.size() > sfx.size() && num.compare(num.size() - sfx.size(), sfx.size(), sfx) == 0) {
      num.resize(num.size() - sfx.size());
      scale = mult;
      break;
    }
  }
  double x = 0;
  if (!parse_real_flag(cmd, flag, num, 0, 1ll << 50, &x)) return false;
  if (x * scale > double(1ll << 50)) {
    std::fprintf(stderr, "%s: %s expects at most 1 PiB, found '%s'\n", cmd, flag.c_str(), v.c_str());
    return false;
  }
  *out = int64_t(x * scale);
  return true;
}

// The flags that take one of a few words: a bad value is an error naming the flag, the value and the choices.
bool check_choice(const char* cmd, const std::string& flag, const std::string& v) {
  static const std::pair<const char*, std::vector<std::string>> kChoices[] = {
      {"--backend", {"cpu", "cuda"}},           {"--numerics", {"official", "hf", "hf-noqat"}},
      {"--load-format", {"auto", "dummy"}},     {"--speculative", {"dspark", "mtp1", "off"}},
      {"--sampling", {"device", "host"}},       {"--async-scheduling", {"on", "off"}},
      {"--communicator", {"auto", "nccl", "in-process"}}};
  for (const auto& [name, words] : kChoices) {
    if (flag != name || std::find(words.begin(), words.end(), v) != words.end()) continue;
    std::string list;
    for (const std::string& w : words) list += (list.empty() ? "" : "|") + w;
    std::fprintf(stderr, "%s: %s expects %s, found '%s'\n", cmd, flag.c_str(), list.c_str(), v.c_str());
    return false;
  }
  return true;
}

}  // namespace

FlagParse parse_engine_flag(const char* cmd, int argc, char** argv, int& i, EngineOptions& eo) {
  const std::string a = argv[i];
  static const char* kFlags[] = {"--model", "--backend", "--numerics", "--load-format", "--tokenizer", "--max-num-seqs",
                                 "--max-num-batched-tokens", "--max-model-len", "--seed", "--state-memory-gb",
                                 "--speculative", "--num-speculative-tokens", "--speculative-budget",
                                 "--speculative-min-survival", "--speculative-row-cost", "--sampling", "--gpus",
                                 "--expert-parallel-size", "--data-parallel-size", "--tensor-parallel-size",
                                 "--async-scheduling",
                                 "--num-redundant-experts", "--eplb-interval", "--communicator",
                                 "--collective-timeout-ms", "--inject-fault"};
  if (a == "--eplb") {
    eo.eplb = true;
    return FlagParse::kOk;
  }
  if (a == "--batch-invariant") {
    eo.batch_invariant = true;
    return FlagParse::kOk;
  }
  if (a == "--enable-prefix-caching") {  // the mode is optional: a bare flag (next is another flag, or none) means exact
    const std::string next = i + 1 < argc ? argv[i + 1] : "";
    eo.enable_prefix_caching = "exact";
    if (next == "exact" || next == "bounded" || next == "off") {
      eo.enable_prefix_caching = argv[++i];
    } else if (!next.empty() && next.rfind("--", 0) != 0) {
      std::fprintf(stderr, "%s: --enable-prefix-caching expects exact, bounded or off, found '%s'\n", cmd, next.c_str());
      return FlagParse::kError;
    }
    return FlagParse::kOk;
  }
  bool known = a == "--prefix-snapshot-memory-gb" || a == "--prefix-cache-host-bytes";
  for (const char* f : kFlags) known = known || a == f;
  if (!known) return FlagParse::kNotEngineFlag;
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", cmd, a.c_str());
    return FlagParse::kError;
  }
  const std::string v = argv[++i];
  if (!check_choice(cmd, a, v)) return FlagParse::kError;
  long long n = 0;
  double x = 0;
  bool ok = true;
  if (a == "--model") eo.model_dir = v;
  else if (a == "--backend") eo.backend = v;
  else if (a == "--numerics") eo.numerics = v;
  else if (a == "--load-format") eo.load_format = v;
  else if (a == "--tokenizer") eo.tokenizer_path = v;
  else if (a == "--speculative") eo.speculative = v;
  else if (a == "--sampling") eo.sampling = v;
  else if (a == "--async-scheduling") eo.async_scheduling = v;
  else if (a == "--communicator") eo.communicator = v;
  else if (a == "--inject-fault") eo.fault_injection = v;
  else if (a == "--collective-timeout-ms") {
    ok = parse_int_flag(cmd, a, v, 1, 1ll << 40, &n);
    eo.collective_timeout_ms = n;
  }
  else if (a == "--max-num-seqs") ok = parse_int_flag(cmd, a, v, 1, 1 << 20, &n), eo.max_num_seqs = int32_t(n);
  else if (a == "--max-num-batched-tokens") ok = parse_int_flag(cmd, a, v, 1, 1ll << 32, &n), eo.max_num_batched_tokens = n;
  else if (a == "--max-model-len") ok = parse_int_flag(cmd, a, v, 0, 1ll << 32, &n), eo.max_model_len = n;
  else if (a == "--seed") ok = parse_int_flag(cmd, a, v, 0, LLONG_MAX, &n), eo.seed = uint64_t(n);
  else if (a == "--state-memory-gb") ok = parse_real_flag(cmd, a, v, 0, 1 << 20, &x), eo.state_memory_gb = x;
  else if (a == "--num-speculative-tokens") ok = parse_int_flag(cmd, a, v, 0, 64, &n), eo.num_speculative_tokens = int32_t(n);
  else if (a == "--speculative-budget") ok = parse_int_flag(cmd, a, v, 0, 1ll << 32, &n), eo.speculative_budget = n;
  else if (a == "--gpus") ok = parse_int_flag(cmd, a, v, 1, 1024, &n), eo.gpus = int32_t(n);
  else if (a == "--expert-parallel-size") ok = parse_int_flag(cmd, a, v, 1, 1024, &n), eo.expert_parallel_size = int32_t(n);
  else if (a == "--data-parallel-size") ok = parse_int_flag(cmd, a, v, 1, 1024, &n), eo.data_parallel_size = int32_t(n);
  else if (a == "--tensor-parallel-size") ok = parse_int_flag(cmd, a, v, 1, 1024, &n), eo.tensor_parallel_size = int32_t(n);
  else if (a == "--num-redundant-experts") ok = parse_int_flag(cmd, a, v, 0, 1 << 20, &n), eo.num_redundant_experts = int32_t(n);
  else if (a == "--eplb-interval") ok = parse_int_flag(cmd, a, v, 1, 1ll << 40, &n), eo.eplb_interval = n;
  else if (a == "--prefix-cache-host-bytes") ok = parse_bytes_flag(cmd, a, v, &eo.prefix_cache_host_bytes);
  else if (a == "--speculative-row-cost") ok = parse_real_flag(cmd, a, v, 0, 100, &x), eo.speculative_row_cost = x;
  else if (a == "--prefix-snapshot-memory-gb") ok = parse_real_flag(cmd, a, v, 0, 1 << 20, &x), eo.prefix_snapshot_memory_gb = x;
  else ok = parse_real_flag(cmd, a, v, 0, 1, &x), eo.speculative_min_survival = x;
  return ok ? FlagParse::kOk : FlagParse::kError;
}

}  // namespace dsinfer::cli
