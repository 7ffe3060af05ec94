// Step cost profiling (see step_profile.h).
#include "perf/step_profile.h"

#include <algorithm>
#include <chrono>

#include "perf/bench.h"

namespace dsinfer::perf {

Result<speculative::StepCostModel> profile_step_cost(runner::ModelRunner& r, const cache::StateLayout& layout,
                                                     int32_t num_blocks, int64_t max_model_len,
                                                     const StepProfileOptions& o) {
  if (o.max_seqs < 1 || o.max_rows < 1 || o.iters < 1 || num_blocks < 1)
    return Status::errorf("step profile: needs sequences, rows, iterations and blocks >= 1 (found {}, {}, {}, {})",
                          o.max_seqs, o.max_rows, o.iters, num_blocks);
  std::vector<int64_t> seqs;
  for (int64_t n = 1; n < o.max_seqs; n *= 2) seqs.push_back(n);
  seqs.push_back(o.max_seqs);
  const int64_t ctx = std::clamp<int64_t>(o.context, 0, std::max<int64_t>(0, max_model_len - o.max_rows - 1));
  const int64_t bps = layout.blocks_per_sequence(ctx + o.max_rows);
  std::vector<std::vector<double>> samples;
  std::vector<float> logits;
  std::vector<std::vector<cache::BlockId>> tables;
  for (int64_t n : seqs) {
    for (int32_t rows = 1; rows <= o.max_rows; ++rows) {
      scheduler::BatchPlan plan =
          make_bench_plan(n, rows, ctx, bps, r.config().vocab_size, tables, /*verify=*/rows > 1);
      for (size_t s = 0; s < plan.seqs.size(); ++s) {  // more sequences than blocks: they share (timing only)
        for (cache::BlockId& b : tables[s]) b = cache::BlockId(int64_t(b) % num_blocks);
        plan.seqs[s].block_table = tables[s];
      }
      std::vector<double> t;
      for (int64_t it = 0; it <= o.iters; ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        if (Status s = r.step(plan, logits); !s)
          return s.with_context(fmt::format("step profile, {} sequences x {} rows", n, rows));
        const auto dt = std::chrono::steady_clock::now() - t0;
        if (it > 0) t.push_back(std::chrono::duration<double, std::milli>(dt).count());
      }
      samples.push_back(std::move(t));
    }
  }
  return speculative::StepCostModel::fit(o.key, seqs, o.max_rows, samples);
}

}  // namespace dsinfer::perf
