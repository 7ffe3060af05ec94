// The bench driver behind dsinfer::run_bench (include/dsinfer/diagnostics.h): on a model runner, binds state
// for the largest case, fills it with random values, and times decode steps (batch B at context C) and one
// prefill of N tokens, per op (the runner's event timing) and end to end, next to the roofline floors of
// perf/cost_model.h. Creating the runner is the caller's (src/api/diagnostics.cpp): the runner factory lives
// in dsinfer_engine, this file in dsinfer_core.
#pragma once
#include "core/status.h"
#include "dsinfer/diagnostics.h"
#include "perf/cost_model.h"
#include "runner/model_runner.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::perf {

// A plan of `seqs` sequences with `new_tokens` each after `context` positions, in slots 0.., their blocks laid
// out sequence after sequence (blocks_per_seq each); token ids are spread over the vocabulary. verify: a
// speculative verify step (the new tokens are an anchor + new_tokens - 1 drafts, logits for every token).
scheduler::BatchPlan make_bench_plan(int64_t seqs, int64_t new_tokens, int64_t context, int64_t blocks_per_seq,
                                     int64_t vocab, std::vector<std::vector<cache::BlockId>>& tables,
                                     bool verify = false);

// Maps the block tables of a make_bench_plan plan into [0, num_blocks) (sequences share blocks where the plan needs
// more than the cache has: timing and the engine's graph warm-up only, whose values nothing reads) and points the
// plan's sequences at them.
void share_blocks(scheduler::BatchPlan& plan, std::vector<std::vector<cache::BlockId>>& tables, int64_t num_blocks);

// Iterations >= 1, batch sizes >= 1, context and prefill >= 0, verify tokens in [1, 64]; the error names the value.
Status validate_bench_options(const BenchOptions& options);

// Runs every case of `options` (batches, context, prefill, iters) on `runner`, appending to report.cases and
// calling options.on_case after each; floors at `ceilings` (perf/ceilings.h) with the state format of
// options.state_profile. An error when the runner cannot be set up for timing (state binding, random state, per-op
// timing unsupported) or the state profile is unknown; a failing case records its error and the others still run.
Status run_bench(runner::ModelRunner& runner, const BenchOptions& options, const Ceilings& ceilings, BenchReport& report);

}  // namespace dsinfer::perf
