// Step cost profiling (see step_profile.h).
#include "perf/step_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "perf/bench.h"
#include "sampling/sampler.h"
#include "scheduler/step_sampling.h"

namespace dsinfer::perf {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One warm-up and `iters` timed drafting rounds of n sequences in slots 0..n-1: the ingest of two committed
// positions each (an anchor and one accepted draft: rows s * rows_per_seq of the last step's capture `hidden`),
// then the proposal of `drafts` greedy drafts each.
Status time_drafting(speculative::Drafter& d, int64_t n, int64_t ctx, int32_t drafts, int64_t iters, int64_t vocab,
                     std::span<const float> hidden, int32_t rows_per_seq, std::vector<double>& out) {
  std::vector<speculative::ProposeItem> items;
  for (int64_t s = 0; s < n; ++s)
    items.push_back({int32_t(s), ctx, int32_t((s * 7919 + 13) % vocab), std::min(drafts, d.max_drafts()), true});
  const int32_t committed = std::min(2, rows_per_seq);
  const std::vector<int32_t> next(size_t(committed), 0);
  std::vector<speculative::IngestItem> ingest;
  for (int64_t s = 0; s < n; ++s)
    ingest.push_back({int32_t(s), std::max<int64_t>(0, ctx - committed), committed, int32_t(s) * rows_per_seq, next});
  auto argmax = [](size_t, int32_t, std::span<const float> lg) {
    return int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  };
  std::vector<speculative::Proposal> props;
  for (int64_t it = 0; it <= iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = d.ingest(ingest, hidden); !s)
      return s.with_context(fmt::format("step profile, ingest for {} sequences", n));
    if (Status s = d.propose(items, argmax, props); !s)
      return s.with_context(fmt::format("step profile, drafting for {} sequences", n));
    if (it > 0) out.push_back(ms_since(t0));
  }
  return Status::ok();
}

// The host's verification of one logits row (greedy: the Sampler's argmax and the token's logprob, as
// sampling::verify_drafts does per row): `iters` passes over the rows of `logits`, ms per row each.
void time_host_rows(std::span<const float> logits, int64_t vocab, int64_t iters, std::vector<double>& out) {
  const size_t rows = vocab > 0 ? logits.size() / size_t(vocab) : 0;
  if (rows == 0) return;
  SamplingParams p;
  p.temperature = 0.0;
  sampling::Sampler sampler;
  for (int64_t it = 0; it < iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t r = 0; r < rows; ++r) {
      sampling::SampleInput in;
      in.logits = logits.subspan(r * size_t(vocab), size_t(vocab));
      in.params = &p;
      sampler.sample(in);
    }
    out.push_back(ms_since(t0) / double(rows));
  }
}

// The engine's plain decode step (Engine::step_async, what a step at rest costs): sampled on the device, and where
// the runner has asynchronous steps each step is launched before the samples of the one before are read, so the
// host's work between steps overlaps the device's. One warm-up, then `iters` steps; ms between consecutive reads.
// Nothing without device sampling (the engine's plain step is then the synchronous one step_ms times).
Status time_plain_steps(runner::ModelRunner& r, scheduler::BatchPlan plan, int64_t iters, std::vector<double>& out) {
  if (!r.supports_device_sampling()) return Status::ok();
  SamplingParams greedy;
  greedy.temperature = 0.0;
  for (scheduler::SeqPlan& sp : plan.seqs) sp.params = &greedy;
  sampling::PackedRows rows;
  DSI_RETURN_IF_ERROR(scheduler::pack_step_rows(plan, r.config().vocab_size, -1, nullptr, rows));
  std::vector<ops::SampleRowOut> res;
  auto launch = [&]() -> Status {
    DSI_RETURN_IF_ERROR(r.begin_sampled_step(plan));
    return r.launch_sample_rows(rows);
  };
  const bool async = r.supports_async_steps();
  DSI_RETURN_IF_ERROR(launch());  // warm-up (captures the shape's graph)
  DSI_RETURN_IF_ERROR(r.wait_sample_rows(res));
  if (async) DSI_RETURN_IF_ERROR(launch());
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
    DSI_RETURN_IF_ERROR(launch());
    DSI_RETURN_IF_ERROR(r.wait_sample_rows(res));
    out.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
  }
  if (async) DSI_RETURN_IF_ERROR(r.wait_sample_rows(res));
  return Status::ok();
}

// The one-wait round as the engine runs it (Engine::step_sync -> Speculator::round): the verify step of `plan` (its
// rows: an anchor and drafts) launched without a download, then the drafter's acceptance on the device, the ingest
// of the committed positions and the next proposal, one download and one host wait. One warm-up (it captures the
// graphs), then `iters` rounds, ms each. Only drafters with the round (Drafter::supports_round).
Status time_rounds(runner::ModelRunner& r, speculative::Drafter& d, const scheduler::BatchPlan& plan, int64_t iters,
                   std::vector<double>& out) {
  std::vector<speculative::RoundItem> items;
  for (const scheduler::SeqPlan& sp : plan.seqs) {
    const int32_t L = sp.num_spec_tokens;
    const auto drafts =
        std::span<const int32_t>(plan.token_ids.data() + sp.token_offset + sp.num_new_tokens - L, size_t(L));
    items.push_back({int32_t(sp.slot), sp.start_pos, sp.logits_row, sp.token_offset, drafts, 0});
  }
  std::vector<speculative::RoundResult> res;
  for (int64_t it = 0; it <= iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    DSI_RETURN_IF_ERROR(r.begin_sampled_step(plan));
    DSI_RETURN_IF_ERROR(d.verify_and_propose(items, res));
    if (it > 0) out.push_back(ms_since(t0));
  }
  return Status::ok();
}

}  // namespace

Result<speculative::StepCostModel> profile_step_cost(runner::ModelRunner& r, const cache::StateLayout& layout,
                                                     int32_t num_blocks, int64_t max_model_len,
                                                     const StepProfileOptions& o, speculative::Drafter* drafter) {
  if (o.max_seqs < 1 || o.max_rows < 1 || o.iters < 1 || num_blocks < 1)
    return Status::errorf("step profile: needs sequences, rows, iterations and blocks >= 1 (found {}, {}, {}, {})",
                          o.max_seqs, o.max_rows, o.iters, num_blocks);
  std::vector<int64_t> seqs;
  for (int64_t n = 1; n < o.max_seqs; n *= 2) seqs.push_back(n);
  seqs.push_back(o.max_seqs);
  const int64_t ctx = std::clamp<int64_t>(o.context, 0, std::max<int64_t>(0, max_model_len - o.max_rows - 1));
  const int64_t bps = layout.blocks_per_sequence(ctx + o.max_rows);
  std::vector<std::vector<double>> samples, draft_samples, plain_samples, round_samples;
  bool rounds = drafter && drafter->supports_round() && r.supports_device_sampling() && o.max_rows > 1;
  std::vector<double> host_rows;
  std::vector<float> logits;
  std::vector<std::vector<cache::BlockId>> tables;
  for (int64_t n : seqs) {
    for (int32_t rows = 1; rows <= o.max_rows; ++rows) {
      scheduler::BatchPlan plan =
          make_bench_plan(n, rows, ctx, bps, r.config().vocab_size, tables, /*verify=*/rows > 1);
      share_blocks(plan, tables, num_blocks);
      std::vector<double> t;
      for (int64_t it = 0; it <= o.iters; ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        if (Status s = r.step(plan, logits); !s)
          return s.with_context(fmt::format("step profile, {} sequences x {} rows", n, rows));
        if (it > 0) t.push_back(ms_since(t0));
      }
      samples.push_back(std::move(t));
      if (rounds && rows == o.max_rows) {
        // As with drafting: a round on state rows no sequence wrote may fail the drafter's own checks; then the
        // model has no round times (the round's parts timed apart stand for it).
        std::vector<double> rt;
        if (Status s = time_rounds(r, *drafter, plan, o.iters, rt); !s) {
          std::fprintf(stderr, "step profile: one-wait round not timed (%s)\n", s.message().c_str());
          rounds = false;
          round_samples.clear();
        } else {
          round_samples.push_back(std::move(rt));
        }
      }
      if (rows == 1) {
        std::vector<double> p;
        if (Status s = time_plain_steps(r, plan, o.iters, p); !s)
          return s.with_context(fmt::format("step profile, plain steps of {} sequences", n));
        if (!p.empty()) plain_samples.push_back(std::move(p));
      }
    }
    if (o.max_rows > 1 && n == seqs.back()) time_host_rows(logits, r.config().vocab_size, o.iters, host_rows);
    if (drafter && o.max_rows > 1) {
      std::vector<double> t;
      // Drafting on state rows no sequence wrote may fail a drafter's own checks (a non-finite pick): then the
      // model has no draft times (drafting counted free) rather than no model.
      if (Status s = time_drafting(*drafter, n, ctx, o.max_rows - 1, o.iters, r.config().vocab_size,
                                   r.captured_hidden(), o.max_rows, t);
          !s) {
        std::fprintf(stderr, "step profile: drafting not timed (%s)\n", s.message().c_str());
        drafter = nullptr;
        draft_samples.clear();
      } else {
        draft_samples.push_back(std::move(t));
      }
    }
  }
  return speculative::StepCostModel::fit(o.key, seqs, o.max_rows, samples, draft_samples, host_rows, plain_samples,
                                        round_samples);
}

}  // namespace dsinfer::perf
