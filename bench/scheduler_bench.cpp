// Host overhead of one engine step with 512 running decode sequences: Scheduler::schedule() + packing the rows of
// device sampling (pack_step_rows) + building the StepOutputs a runner would return + Scheduler::update() (stop
// checks included). No model, no sampler. Prints the mean / p50 / p99 microseconds per step; issue-4 target: <= 50
// us. Usage: dsinfer_scheduler_bench [seqs 512] [steps 3000] [sync|async]; async: the asynchronous steps'
// schedule(t+1) -> pack -> resolve(t) -> advance(t+1) (docs/engine_core.md "Asynchronous steps").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"
#include "scheduler/step_sampling.h"

using namespace dsinfer;
using namespace dsinfer::scheduler;

int main(int argc, char** argv) {
  const int num_seqs = argc > 1 ? std::atoi(argv[1]) : 512;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3000;
  const bool async = argc > 3 && std::string(argv[3]) == "async";
  io::ModelConfig cfg;  // DeepSeek-V4-Flash state shapes (the layout does not change the bookkeeping cost)
  cfg.head_dim = 512;
  cfg.index_head_dim = 128;
  cfg.sliding_window = 128;
  for (int i = 0; i < 43; ++i) {
    io::AttnType t = i < 2 ? io::AttnType::Sliding : i % 2 ? io::AttnType::CSA : io::AttnType::HCA;
    cfg.layer_types.push_back(t);
    cfg.compress_ratios.push_back(t == io::AttnType::Sliding ? 0 : t == io::AttnType::CSA ? 4 : 128);
  }
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 2;
  cc.max_model_len = 16384;
  cc.max_num_seqs = num_seqs;
  cc.budget_bytes = int64_t(140) << 30;  // H200-sized: never the bottleneck here
  auto cache = cache::StateCache::create(cfg, cc);
  if (!cache.is_ok()) { std::fprintf(stderr, "%s\n", cache.status().message().c_str()); return 1; }
  SchedulerConfig sc;
  sc.max_num_seqs = num_seqs;
  sc.max_num_batched_tokens = 1 << 20;
  sc.eos_token_id = 1;
  Scheduler sched(sc, std::move(*cache));
  for (int i = 0; i < num_seqs; ++i) {
    sampling::SamplingParams p;
    p.max_tokens = 12000;
    p.stop_token_ids = {7, 8};
    std::vector<int32_t> prompt(size_t(1000 + i), 5);
    if (!sched.add_request({std::move(prompt), p}).is_ok()) return 1;
  }
  std::vector<StepOutput> outs;
  auto make_outputs = [&](const BatchPlan& plan) {
    outs.resize(size_t(plan.num_logits()));
    size_t k = 0;
    for (int32_t i = 0; i < plan.num_seqs(); ++i) {
      const SeqPlan& sp = plan.seqs[size_t(i)];
      if (!sp.needs_logits) continue;
      StepOutput& o = outs[k++];
      o.plan_index = i;
      o.seq_id = sp.seq_id;
      o.samples.resize(1);
      o.samples[0].token = int32_t(100 + (sp.start_pos % 1000));
    }
  };
  sampling::PackedRows rows;
  std::vector<StepOutput> prev_outs;  // async: the outputs of the launched step, resolved one step later
  uint64_t prev_step = 0;
  double pack_us = 0;
  // One step; the plan's sequence count, or -1 on error.
  auto step = [&](double* sched_us) -> int {
    auto t0 = std::chrono::steady_clock::now();
    const BatchPlan& plan = sched.schedule();
    auto tm = std::chrono::steady_clock::now();
    if (!scheduler::pack_step_rows(plan, 129280, 1, nullptr, rows).is_ok()) return -1;
    auto tp = std::chrono::steady_clock::now();
    if (sched_us) *sched_us += std::chrono::duration<double, std::micro>(tm - t0).count();
    if (sched_us) pack_us += std::chrono::duration<double, std::micro>(tp - tm).count();
    make_outputs(plan);
    if (!async) return sched.update(outs).is_ok() ? plan.num_seqs() : -1;
    if (prev_step && !sched.resolve(prev_step, prev_outs).is_ok()) return -1;
    prev_outs.swap(outs);
    prev_step = plan.step;
    return sched.advance().is_ok() ? plan.num_seqs() : -1;
  };
  // Prefill everything (one big step), then time decode steps.
  for (int warm = 0; warm < 20; ++warm)
    if (step(nullptr) < 0) return 1;
  std::vector<double> us;
  us.reserve(size_t(steps));
  int64_t tokens = 0;
  double sched_us = 0;
  for (int s = 0; s < steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    const int n = step(&sched_us);
    auto t1 = std::chrono::steady_clock::now();
    if (n != num_seqs) {
      std::fprintf(stderr, "step %d: failed or %d seqs\n", s, n);
      return 1;
    }
    tokens += n;
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double x : us) mean += x;
  mean /= double(us.size());
  std::printf("scheduler_bench: %d running decode sequences, %d steps (%lld tokens), %s steps\n", num_seqs, steps,
              (long long)tokens, async ? "async" : "sync");
  std::printf("schedule+pack+update per step: mean %.1f us, p50 %.1f us, p99 %.1f us (target <= 50 us)\n", mean,
              sorted[sorted.size() / 2], sorted[sorted.size() * 99 / 100]);
  std::printf("  of which schedule() %.1f us, pack_step_rows %.1f us, outputs + %s %.1f us\n", sched_us / steps,
              pack_us / steps, async ? "resolve() + advance()" : "update()", mean - (sched_us + pack_us) / steps);
  return 0;
}
