// Graph warm-up (see graph_warmup.h).
#include "engine/graph_warmup.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "perf/bench.h"

namespace dsinfer::engine {

std::vector<WarmupStep> graph_warmup_steps(const GraphWarmup& w) {
  std::vector<WarmupStep> steps;
  if (w.batch_sizes.empty() || w.max_seqs < 1 || w.max_model_len < 1) return steps;
  // The prompt step: max_batched_tokens tokens in the fewest sequences of at most max_model_len tokens (of equal
  // length, a few tokens more where they do not divide), each ending at max_model_len.
  const int64_t len_cap = std::min(w.max_batched_tokens, w.max_model_len);
  const int64_t seqs = std::min((w.max_batched_tokens + len_cap - 1) / len_cap, w.max_seqs);
  const int64_t len = std::min((w.max_batched_tokens + seqs - 1) / seqs, w.max_model_len);
  const bool speculative = w.max_drafts > 0;
  steps.push_back({WarmupStep::Kind::kPrompt, seqs, len, speculative});
  std::vector<int64_t> sizes = w.batch_sizes;
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  for (int64_t b : sizes) {
    const int64_t n = std::min(b, w.max_seqs);
    for (int64_t k = std::min<int64_t>(w.max_drafts, w.max_model_len - 1); k >= 1; --k)
      steps.push_back({WarmupStep::Kind::kVerify, n, 1 + k, true});
    if (speculative) steps.push_back({WarmupStep::Kind::kDecode, n, 1, true});  // a drafting step without drafts
    steps.push_back({WarmupStep::Kind::kDecode, n, 1, false});
  }
  return steps;
}

namespace {

// The drafter's graphs of a batch: its one-wait round after `plan` (a verify step of every draft, just launched with
// its logits left on the device), then a proposal with no ingest pending, as the steps after a prompt make.
Status warm_up_drafter(speculative::Drafter& d, const scheduler::BatchPlan& plan) {
  std::vector<speculative::RoundItem> items;
  std::vector<speculative::ProposeItem> props_in;
  for (const scheduler::SeqPlan& sp : plan.seqs) {
    const int32_t L = sp.num_spec_tokens;
    const auto drafts =
        std::span<const int32_t>(plan.token_ids.data() + sp.token_offset + sp.num_new_tokens - L, size_t(L));
    items.push_back({sp.slot, sp.start_pos, sp.logits_row, sp.token_offset, drafts, 0});
    props_in.push_back({sp.slot, sp.start_pos + L, drafts.empty() ? 0 : drafts.back(), L, true, 0});
  }
  std::vector<speculative::RoundResult> res;
  DSI_RETURN_IF_ERROR(d.verify_and_propose(items, res));
  auto argmax = [](size_t, int32_t, std::span<const float> lg) {
    return int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  };
  std::vector<speculative::Proposal> props;
  return d.propose(props_in, argmax, props);
}

}  // namespace

Status warm_up_graphs(runner::ModelRunner& runner, const cache::StateCache& sc, const GraphWarmup& w,
                      const std::vector<int64_t>& tapped, speculative::Drafter* drafter) {
  const std::vector<WarmupStep> steps = graph_warmup_steps(w);
  bool drafter_graphs = drafter && drafter->supports_round() && runner.supports_device_sampling();
  const cache::StateLayout& layout = sc.layout();
  bool capture = !tapped.empty();
  std::vector<std::vector<cache::BlockId>> tables;
  std::vector<float> logits;
  for (const WarmupStep& s : steps) {
    const bool want = s.capture && !tapped.empty();
    if (want != capture) {
      DSI_RETURN_IF_ERROR(runner.set_hidden_capture(want ? tapped : std::vector<int64_t>{}));
      capture = want;
    }
    // A prompt ends at max_model_len; a decode or verify step starts at position 0 (a fixed-shape step is laid out
    // for max_model_len wherever it starts).
    const int64_t start = s.kind == WarmupStep::Kind::kPrompt ? w.max_model_len - s.tokens : 0;
    const int64_t bps = layout.blocks_per_sequence(start + s.tokens);
    scheduler::BatchPlan plan = perf::make_bench_plan(s.seqs, s.tokens, start, bps, runner.config().vocab_size,
                                                      tables, s.kind == WarmupStep::Kind::kVerify);
    perf::share_blocks(plan, tables, sc.num_blocks());
    // Logits stay on the device where the runner samples there (a verify step's rows are large on the host).
    const Status st = runner.supports_device_sampling() ? runner.begin_sampled_step(plan) : runner.step(plan, logits);
    if (!st) {
      static const char* const kNames[] = {"prompt", "verify", "decode"};
      return st.with_context(fmt::format("graph warm-up, {} step of {} sequences x {} tokens",
                                         kNames[int(s.kind)], s.seqs, s.tokens));
    }
    if (drafter_graphs && s.kind == WarmupStep::Kind::kVerify && s.tokens == 1 + w.max_drafts) {
      if (Status d = warm_up_drafter(*drafter, plan); !d) {
        std::fprintf(stderr, "graph warm-up: the drafter's graphs not captured (%s)\n", d.message().c_str());
        drafter_graphs = false;
      }
    }
  }
  if (capture != !tapped.empty()) DSI_RETURN_IF_ERROR(runner.set_hidden_capture(tapped));
  return Status::ok();
}

}  // namespace dsinfer::engine
