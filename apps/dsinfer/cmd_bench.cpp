// `dsinfer bench`: decode step time at batch B and context C, and prefill time of N tokens, per op and end to
// end, each next to its roofline floor (runtime/cost_model.h) and the ratio measured / floor. Decode runs on
// randomized state (no prefill of the context needed); weights are usually --load-format dummy at the real
// V4-Flash / V4-Pro shapes (configs/), with --layers N when the whole model does not fit one GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "apps/dsinfer/commands.h"
#include "cache/state_layout.h"
#include "perf/cost_model.h"
#include "engine/model_runner.h"

namespace dsinfer::cli {

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: dsinfer bench --model DIR [--backend cuda] [--load-format dummy|auto] [--layers N]\n"
               "                     [--batch 1,64,256] [--context 4096] [--prefill 4096] [--iters 5] [--numerics official|hf]\n");
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

// A plan of `seqs` sequences with `new_tokens` each after `context` positions, slots 0.., blocks laid out
// sequence after sequence.
scheduler::BatchPlan make_plan(int64_t seqs, int64_t new_tokens, int64_t context, int64_t block_size,
                               std::vector<std::vector<cache::BlockId>>& tables, int64_t vocab) {
  scheduler::BatchPlan p;
  p.clear();
  const int64_t bps = (context + new_tokens + block_size - 1) / block_size;
  tables.assign(size_t(seqs), {});
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < bps; ++b) tables[size_t(s)].push_back(cache::BlockId(s * bps + b));
    scheduler::SeqPlan sp;
    sp.seq_id = scheduler::SeqId(s + 1);
    sp.start_pos = context;
    sp.num_new_tokens = int32_t(new_tokens);
    sp.token_offset = p.num_tokens();
    sp.is_prefill = new_tokens > 1;
    sp.needs_logits = true;
    sp.logits_row = int32_t(s);
    sp.slot = cache::SlotId(s);
    sp.block_table = tables[size_t(s)];
    for (int64_t i = 0; i < new_tokens; ++i) {
      p.token_ids.push_back(int32_t((s * 7919 + i * 104729 + 13) % vocab));
      p.positions.push_back(context + i);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    p.logits_token_index.push_back(p.num_tokens() - 1);
    p.seqs.push_back(sp);
  }
  return p;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  engine::RunnerOptions ro;
  ro.backend = engine::Backend::kCuda;
  ro.load_format = engine::LoadFormat::kDummy;
  std::vector<int64_t> batches = {1, 64, 256};
  int64_t context = 4096, prefill = 4096, iters = 5;
  std::string backend = "cuda", load_format = "dummy", numerics = "official";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (i + 1 >= argc) return usage(), 2;
    const std::string v = argv[++i];
    try {
      if (a == "--model") ro.model_dir = v;
      else if (a == "--backend") backend = v;
      else if (a == "--load-format") load_format = v;
      else if (a == "--numerics") numerics = v;
      else if (a == "--layers") ro.num_layers = std::stoll(v);
      else if (a == "--batch") batches = parse_list(v);
      else if (a == "--context") context = std::stoll(v);
      else if (a == "--prefill") prefill = std::stoll(v);
      else if (a == "--iters") iters = std::max<int64_t>(1, std::stoll(v));
      else {
        std::fprintf(stderr, "bench: unknown option '%s'\n", a.c_str());
        return usage(), 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bench: %s expects a number (or a comma list), found '%s'\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  if (ro.model_dir.empty()) return usage(), 2;
  auto be = engine::parse_backend(backend);
  auto lf = engine::parse_load_format(load_format);
  auto num = model::Numerics::from_name(numerics);
  for (const Status& s : {be.status(), lf.status(), num.status()})
    if (!s) return std::fprintf(stderr, "bench: %s\n", s.message().c_str()), 2;
  ro.backend = *be;
  ro.load_format = *lf;
  ro.numerics = *num;
  auto runner = engine::create_runner(ro);
  if (!runner) {
    std::fprintf(stderr, "bench: %s\n", runner.status().message().c_str());
    return 2;
  }
  engine::ModelRunner& r = **runner;
  const io::ModelConfig& cfg = r.config();
  std::printf("bench: %s, %lld layers, %s\n", ro.model_dir.c_str(), (long long)cfg.num_hidden_layers, r.name().c_str());
  const int64_t max_b = batches.empty() ? 1 : *std::max_element(batches.begin(), batches.end());
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = r.kv_elem_bytes();
  cc.max_num_seqs = int32_t(max_b);
  auto layout = cache::compute_state_layout(cfg, cc);
  if (!layout) return std::fprintf(stderr, "bench: %s\n", layout.status().message().c_str()), 2;
  const int64_t bps_decode = layout->blocks_per_sequence(context + 1);
  const int64_t bps_prefill = layout->blocks_per_sequence(prefill);
  if (Status s = r.bind_state(*layout, int32_t(max_b), int32_t(std::max(max_b * bps_decode, bps_prefill)),
                              std::max(context + 1, prefill));
      !s)
    return std::fprintf(stderr, "bench: %s\n", s.message().c_str()), 2;
  if (Status s = r.diagnostics().randomize_state(7); !s) return std::fprintf(stderr, "bench: %s\n", s.message().c_str()), 2;
  if (Status s = r.diagnostics().set_timing(true); !s) return std::fprintf(stderr, "bench: %s\n", s.message().c_str()), 2;

  const perf::Ceilings ceil;
  auto run_case = [&](const char* title, int64_t seqs, int64_t new_tokens, int64_t ctx) -> bool {
    std::vector<std::vector<cache::BlockId>> tables;
    const scheduler::BatchPlan plan = make_plan(seqs, new_tokens, ctx, layout->block_size, tables, cfg.vocab_size);
    std::vector<float> logits;
    std::map<std::pair<std::string, int64_t>, std::vector<float>> samples;
    std::vector<double> step_ms;
    for (int64_t it = 0; it < iters + 1; ++it) {  // first run = warm-up
      const auto t0 = std::chrono::steady_clock::now();
      if (Status s = r.step(plan, logits); !s) {
        std::fprintf(stderr, "bench: %s: %s\n", title, s.message().c_str());
        return false;
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      auto times = r.diagnostics().op_times();
      if (!times) return std::fprintf(stderr, "bench: %s\n", times.status().message().c_str()), false;
      if (it == 0) continue;
      step_ms.push_back(ms);
      for (const auto& t : *times) samples[{t.name, t.layer}].push_back(t.ms);
    }
    auto median = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      return double(v[v.size() / 2]);
    };
    std::sort(step_ms.begin(), step_ms.end());
    // Aggregate ops over layers; floors from the cost model for the same names.
    perf::StepShape shape{seqs, new_tokens, ctx, seqs};
    std::map<std::string, std::pair<double, double>> agg;  // name -> (measured ms, floor ms)
    std::vector<std::string> order;
    for (const auto& [key, v] : samples) {
      if (!agg.count(key.first)) order.push_back(key.first);
      agg[key.first].first += median(v);
    }
    double total_floor = 0;
    for (const auto& c : perf::step_costs(cfg, shape, {}, cfg.num_hidden_layers)) {
      agg[c.name].second += 1e3 * c.floor_s(ceil);
      total_floor += 1e3 * c.floor_s(ceil);
    }
    double total_meas = 0;
    std::printf("\n== %s: %lld seqs x %lld new tokens, context %lld ==\n", title, (long long)seqs, (long long)new_tokens,
                (long long)ctx);
    std::printf("%-22s %12s %12s %8s %14s\n", "op (all layers)", "measured ms", "floor ms", "ratio", "per layer ms");
    for (const auto& [name, mf] : agg) {
      if (mf.first == 0 && mf.second == 0) continue;
      total_meas += mf.first;
      std::printf("%-22s %12.4f %12.4f %8.2f %14.4f\n", name.c_str(), mf.first, mf.second,
                  mf.second > 0 ? mf.first / mf.second : 0.0, mf.first / double(cfg.num_hidden_layers));
    }
    const double step = step_ms[step_ms.size() / 2];
    std::printf("%-22s %12.4f %12.4f %8.2f   (sum of op times)\n", "total ops", total_meas, total_floor, total_meas / total_floor);
    std::printf("%-22s %12.4f %12.4f %8.2f   (host wall, incl. plan upload and logits download)\n", "step", step, total_floor,
                step / total_floor);
    std::printf("per layer: %.4f ms; tokens/s: %.1f\n", total_meas / double(cfg.num_hidden_layers),
                double(seqs * new_tokens) / (step / 1e3));
    if (new_tokens == 1) {  // decode again without per-op events: the runner replays its CUDA graph
      (void)r.diagnostics().set_timing(false);
      std::vector<double> g;
      for (int64_t it = 0; it < iters + 1; ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        if (Status s = r.step(plan, logits); !s) {
          std::fprintf(stderr, "bench: %s (graph): %s\n", title, s.message().c_str());
          return false;
        }
        if (it > 0) g.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(g.begin(), g.end());
      const double gs = g[g.size() / 2];
      std::printf("%-22s %12.4f %12.4f %8.2f   (CUDA graph replay, host wall; tokens/s %.1f)\n", "step (graph)", gs,
                  total_floor, gs / total_floor, double(seqs) / (gs / 1e3));
      (void)r.diagnostics().set_timing(true);
    }
    return true;
  };
  bool ok = true;
  for (int64_t b : batches) ok &= run_case("decode", b, 1, context);
  if (prefill > 0) ok &= run_case("prefill", 1, prefill, 0);
  return ok ? 0 : 1;
}

}  // namespace dsinfer::cli
