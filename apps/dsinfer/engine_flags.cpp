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

bool writes_results() {
  int32_t rank = 0, world = 1;
  std::string err;
  if (!process_rank(&rank, &world, &err) || rank == 0) return true;
  if (!std::freopen("/dev/null", "w", stdout)) std::fprintf(stderr, "rank %d: cannot silence stdout\n", int(rank));
  return false;
}

std::string engine_flags_help() {
  const EngineOptions d;
  return fmt::format(
      "  engine:   --backend cpu|cuda ({})  --numerics official|hf ({})  --load-format auto|dummy  --tokenizer FILE\n"
      "            --max-num-seqs N ({})  --max-num-batched-tokens N ({})  --max-model-len N  --seed N\n"
      "            --state-memory-gb X  --state-format auto|fp32 (auto: DeepSeek's FP8 storage format where the\n"
      "            backend has it, cuda V4 official; fp32: the simulation's fp32 rows)\n"
      "  speculative decoding: --speculative dspark|mtp1|off ({})  --num-speculative-tokens K ({})\n"
      "            --speculative-budget N  --speculative-min-survival X\n"
      "            --speculative-cost-model auto|off|PATH ({}; greedy drafting and verify lengths against step times\n"
      "            measured at start-up and cached per model and GPU)\n"
      "  prefix caching: --enable-prefix-caching [exact|bounded] ({}; bare flag = exact)  --prefix-snapshot-memory-gb X\n"
      "            --prefix-cache-host-bytes N[KiB|MiB|GiB] (host tier for evicted blocks; 0 = none)\n"
      "  --batch-invariant: results independent of the batch (cuda: fixed kernel choices, slower; cpu: always)\n"
      "  sampling: --sampling device|host ({}; device = on the GPU where the backend can, same tokens as host)\n"
      "  several GPUs (cuda): --gpus N ({})  --expert-parallel-size N (= --gpus)  --data-parallel-size 1|N\n"
      "            --tensor-parallel-size 1|N (routed experts split over the GPUs, the rest replicated; DP = N: each\n"
      "            GPU its own sequences and state, routed tokens dispatched to the experts' GPUs; TP = N: each GPU\n"
      "            1/N of the query heads, cpu only so far; `dsinfer plan` says which layout to pick)\n"
      "            --eplb (expert load balancing; not with --batch-invariant)  --num-redundant-experts R (0; a\n"
      "            multiple of --gpus)\n"
      "            --eplb-interval STEPS ({}; the placement is recomputed from measured loads this often)\n"
      "            --communicator auto|nccl|in-process (in-process: ranks may share a GPU; the cpu backend's\n"
      "            --gpus N runs N ranks of the reference)  --collective-timeout-ms MS (300000)\n"
      "            --inject-fault RANK:load|RANK:step:K|RANK:alloc:K|RANK:plan:K (tests only: a planted rank failure)\n"
      "  --async-scheduling on|off ({}; on = plan step t+1 while the GPU runs step t, where device sampling applies)\n"
      "  --graph-warmup on|off ({}; on = every CUDA graph a run replays captured at start-up, before the first\n"
      "            request: the runner's buckets up to --max-num-seqs, decode and each verify length)\n"
      "  --engram-placement device|host|sharded (device; DeepSeek-V4.1's Engram tables: a copy per GPU, in pinned host\n"
      "            memory with each step's rows fetched behind the layers before them, or rows split over the GPUs)\n",
      d.backend, d.numerics, d.max_num_seqs, d.max_num_batched_tokens, d.speculative, d.num_speculative_tokens,
      d.speculative_cost_model, d.enable_prefix_caching, d.sampling, d.gpus, d.eplb_interval, d.async_scheduling,
      d.graph_warmup);
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
    if (lo <= -1e300 && hi >= 1e300)
      std::fprintf(stderr, "%s: %s expects a number, found '%s'\n", cmd, flag.c_str(), v.c_str());
    else
      std::fprintf(stderr, "%s: %s expects a number in [%g, %g], found '%s'\n", cmd, flag.c_str(), lo, hi, v.c_str());
    return false;
  }
  *out = x;
  return true;
}

int parse_value_flags(const char* cmd, const char* usage, int argc, char** argv,
                      const std::function<FlagParse(const std::string& flag, const std::string& value)>& on_flag,
                      const std::function<bool(const std::string& flag)>& on_switch) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (on_switch && on_switch(a)) continue;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n%s", cmd, a.c_str(), usage);
      return 2;
    }
    const FlagParse f = on_flag(a, argv[++i]);
    if (f == FlagParse::kError) return 2;
    if (f == FlagParse::kNotEngineFlag) {
      std::fprintf(stderr, "%s: unknown argument '%s'\n%s", cmd, a.c_str(), usage);
      return 2;
    }
  }
  return -1;
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
      {"--graph-warmup", {"on", "off"}},
      {"--communicator", {"auto", "nccl", "in-process"}},
      {"--engram-placement", {"device", "sharded", "host"}},
      {"--state-format", {"auto", "fp32"}}};
  for (const auto& [name, words] : kChoices) {
    if (flag != name || std::find(words.begin(), words.end(), v) != words.end()) continue;
    std::string list;
    for (const std::string& w : words) list += (list.empty() ? "" : "|") + w;
    std::fprintf(stderr, "%s: %s expects %s, found '%s'\n", cmd, flag.c_str(), list.c_str(), v.c_str());
    return false;
  }
  return true;
}

// The engine flags that take a value, by kind. Integer and number bounds are those of the type or of the flag's
// meaning; the engine checks what depends on the model or on other options (e.g. --num-speculative-tokens against
// the drafter's maximum), naming the option, so that each range has one place.
using EO = EngineOptions;
struct TextFlag {
  const char* flag;
  std::string EO::*field;
};
struct IntFlag {
  const char* flag;
  long long lo, hi;
  void (*set)(EO&, long long);
};
struct RealFlag {
  const char* flag;
  double lo, hi;
  double EO::*field;
};
constexpr double kHuge = 1e300;
const TextFlag kTextFlags[] = {{"--model", &EO::model_dir},        {"--backend", &EO::backend},
                               {"--numerics", &EO::numerics},      {"--load-format", &EO::load_format},
                               {"--tokenizer", &EO::tokenizer_path}, {"--speculative", &EO::speculative},
                               {"--sampling", &EO::sampling},      {"--async-scheduling", &EO::async_scheduling},
                               {"--graph-warmup", &EO::graph_warmup},
                               {"--communicator", &EO::communicator}, {"--inject-fault", &EO::fault_injection},
                               {"--speculative-cost-model", &EO::speculative_cost_model},
                               {"--engram-placement", &EO::engram_placement},
                               {"--state-format", &EO::state_format}};
const IntFlag kIntFlags[] = {
    {"--max-num-seqs", 1, 1 << 20, [](EO& e, long long n) { e.max_num_seqs = int32_t(n); }},
    {"--max-num-batched-tokens", 1, 1ll << 32, [](EO& e, long long n) { e.max_num_batched_tokens = n; }},
    {"--max-model-len", 0, 1ll << 32, [](EO& e, long long n) { e.max_model_len = n; }},
    {"--seed", 0, LLONG_MAX, [](EO& e, long long n) { e.seed = uint64_t(n); }},
    {"--num-speculative-tokens", 0, INT32_MAX, [](EO& e, long long n) { e.num_speculative_tokens = int32_t(n); }},
    {"--speculative-budget", LLONG_MIN, LLONG_MAX, [](EO& e, long long n) { e.speculative_budget = n; }},
    {"--gpus", 1, 1024, [](EO& e, long long n) { e.gpus = int32_t(n); }},
    {"--expert-parallel-size", 1, 1024, [](EO& e, long long n) { e.expert_parallel_size = int32_t(n); }},
    {"--data-parallel-size", 1, 1024, [](EO& e, long long n) { e.data_parallel_size = int32_t(n); }},
    {"--tensor-parallel-size", 1, 1024, [](EO& e, long long n) { e.tensor_parallel_size = int32_t(n); }},
    {"--num-redundant-experts", 0, 1 << 20, [](EO& e, long long n) { e.num_redundant_experts = int32_t(n); }},
    {"--eplb-interval", 1, 1ll << 40, [](EO& e, long long n) { e.eplb_interval = n; }},
    {"--collective-timeout-ms", 1, 1ll << 40, [](EO& e, long long n) { e.collective_timeout_ms = n; }}};
const RealFlag kRealFlags[] = {{"--state-memory-gb", 0, 1 << 20, &EO::state_memory_gb},
                               {"--prefix-snapshot-memory-gb", 0, 1 << 20, &EO::prefix_snapshot_memory_gb},
                               {"--speculative-min-survival", -kHuge, kHuge, &EO::speculative_min_survival}};

// Parses flag `a`'s value `v` into `eo` when `a` is a value flag of the tables above or --prefix-cache-host-bytes.
FlagParse parse_value_flag(const char* cmd, const std::string& a, const std::string& v, EngineOptions& eo) {
  for (const TextFlag& f : kTextFlags) {
    if (a != f.flag) continue;
    if (!check_choice(cmd, a, v)) return FlagParse::kError;
    eo.*f.field = v;
    return FlagParse::kOk;
  }
  for (const IntFlag& f : kIntFlags) {
    if (a != f.flag) continue;
    long long n = 0;
    if (!parse_int_flag(cmd, a, v, f.lo, f.hi, &n)) return FlagParse::kError;
    f.set(eo, n);
    return FlagParse::kOk;
  }
  for (const RealFlag& f : kRealFlags) {
    if (a != f.flag) continue;
    return parse_real_flag(cmd, a, v, f.lo, f.hi, &(eo.*f.field)) ? FlagParse::kOk : FlagParse::kError;
  }
  if (a == "--prefix-cache-host-bytes")
    return parse_bytes_flag(cmd, a, v, &eo.prefix_cache_host_bytes) ? FlagParse::kOk : FlagParse::kError;
  return FlagParse::kNotEngineFlag;
}

bool is_value_flag(const std::string& a) {
  bool known = a == "--prefix-cache-host-bytes";
  for (const TextFlag& f : kTextFlags) known = known || a == f.flag;
  for (const IntFlag& f : kIntFlags) known = known || a == f.flag;
  for (const RealFlag& f : kRealFlags) known = known || a == f.flag;
  return known;
}

}  // namespace

FlagParse parse_engine_flag(const char* cmd, int argc, char** argv, int& i, EngineOptions& eo) {
  const std::string a = argv[i];
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
  if (!is_value_flag(a)) return FlagParse::kNotEngineFlag;
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", cmd, a.c_str());
    return FlagParse::kError;
  }
  return parse_value_flag(cmd, a, argv[++i], eo);
}

}  // namespace dsinfer::cli
