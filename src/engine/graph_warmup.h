// Engine::create's graph warm-up (EngineOptions::graph_warmup, docs/engine_core.md "Graph warm-up"): before the
// first request, the steps whose CUDA graphs a run would otherwise capture while requests wait, run through the
// ModelRunner interface on the bound state (no sequence holds a slot yet; every position a later sequence reads is
// written by it first, as for the step cost profile).
//   1. One prompt step of max_num_batched_tokens tokens (sequences of at most max_model_len tokens, each ending at
//      max_model_len): the runner's scratch, step-plan and capture buffers grow to what any later step needs. A
//      buffer that grows later moves and drops every captured graph.
//   2. For each of the runner's graph batch sizes, largest first: with speculation the verify step of every draft
//      count the engine may verify and the decode step (a drafting step whose sequences have no drafts yet), the
//      hidden-state capture on as in drafting steps; then the decode step with the capture off (the step at rest,
//      or of an engine without speculation). Graphs are keyed by the capture too. Largest first, so the first
//      fixed-shape step grows what they need and the graphs after it stay valid.
//   3. With a drafter that has the one-wait round (Drafter::supports_round: the CUDA DSpark drafter), after each
//      bucket's verify step of every draft the round itself (its graph per padded batch, which the drafting steps
//      replay too) and a proposal without a pending ingest (the graph the steps after a prompt replay). A drafter
//      step that fails on the state's values (a non-finite pick) only ends this part, as in the step cost profile.
// A runner without graph batch sizes (cpu, several ranks, graphs off) runs nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "cache/state_cache.h"
#include "core/status.h"
#include "runner/model_runner.h"
#include "speculative/drafter.h"

namespace dsinfer::engine {

struct GraphWarmup {
  std::vector<int64_t> batch_sizes;  // the runner's graph_batch_sizes(max_seqs)
  int64_t max_seqs = 1;              // sequences a step may hold (max_num_seqs, at most the slots)
  int64_t max_batched_tokens = 1;    // tokens a step may hold (max_num_batched_tokens)
  int64_t max_model_len = 1;
  int32_t max_drafts = 0;            // drafts a sequence may verify (0: no speculation)
};

struct WarmupStep {
  enum class Kind { kPrompt, kVerify, kDecode };
  Kind kind = Kind::kDecode;
  int64_t seqs = 0;
  int64_t tokens = 0;    // tokens per sequence: the prompt's length, 1 + drafts, or 1
  bool capture = false;  // the hidden-state capture on (speculation's tapped layers)
};

// The steps in the order they run; empty without batch sizes.
std::vector<WarmupStep> graph_warmup_steps(const GraphWarmup& w);

// Runs them on `runner`, whose state `sc` lays out (bound), with `tapped` the speculator's tapped layers (empty
// without speculation) and its drafter (nullptr without). The capture is left as it was found: on where `tapped` is
// not empty. An error names the step that failed.
Status warm_up_graphs(runner::ModelRunner& runner, const cache::StateCache& sc, const GraphWarmup& w,
                      const std::vector<int64_t>& tapped, speculative::Drafter* drafter = nullptr);

}  // namespace dsinfer::engine
