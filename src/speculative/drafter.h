// Drafter: proposes the next tokens of running sequences from the target's hidden states (speculative decoding,
// docs/engine_core.md "Speculative decoding"). The engine feeds it, after every step, the target hidden states
// of each sequence's newly *committed* positions (prefill chunks, decode tokens, the accepted part of a verify
// block) — never those of rejected drafts — then asks for a block of drafts anchored at each decoding sequence's
// last token. Per-sequence drafter state (context K=V rows, MTP ring) lives in the drafter, indexed by the
// sequence's state-cache slot and by position modulo its rows, so a slot reused by another sequence, a
// preempted and recomputed sequence, or a rollback needs no reset: every position is re-ingested before it is
// read.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "speculative/draft_config.h"
#include "speculative/speculative_config.h"

namespace dsinfer::speculative {

// Committed positions [start_pos, start_pos + count) of the sequence in `slot`; their target hidden states are
// rows [row, row + count) of the step's capture; next_tokens[i] is the token at position start_pos + i + 1.
struct IngestItem {
  int32_t slot = -1;
  int64_t start_pos = 0;
  int32_t count = 0;
  int32_t row = 0;
  std::span<const int32_t> next_tokens;
};

// Draft `num_drafts` tokens after `anchor_token` at `anchor_pos` (the sequence's last token, not yet computed by
// the target); every position in [context_start, anchor_pos) must have been ingested, and the proposal reads no
// context before context_start (positions the drafter never saw: skipped at rest, or before a prefix-cache hit;
// a drafter whose resume_positions() is its whole window never has such a position inside it).
// pick_argmax: the request draws greedily from unprocessed logits (no penalties, bias, min_tokens or grammar mask),
// so the drafter may take each draft's argmax itself (a device drafter: on the device, downloading only the ids)
// without calling the DrawFn for this item.
struct ProposeItem {
  int32_t slot = -1;
  int64_t anchor_pos = 0;
  int32_t anchor_token = 0;
  int32_t num_drafts = 0;
  bool pick_argmax = false;
  int64_t context_start = 0;
};

// DSpark's resume_positions(): a probe after rest (speculative/spec_gate.h) drafts from the 8 positions ingested
// since the gap instead of catching up a whole 64-row window (27 ms of catch-up steps per probe at batch 1 on the
// H200, session 13; a short context drafts worse, and the gate's rounds measure how much).
inline constexpr int64_t kDsparkResumePositions = 8;

// Chooses draft k of item i from its draft logits [vocab] (the sequential part of drafting: the next draft
// position's Markov bias / confidence depends on the token chosen here).
using DrawFn = std::function<int32_t(size_t item, int32_t k, std::span<const float> logits)>;

struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<float> confidence_logits;  // raw c_k per draft (empty without a confidence head)
};

// The one-wait round (Drafter::verify_and_propose): a decoding sequence of the verify step just launched, all of
// whose rows draw greedily from unprocessed logits. Its verify rows are logits rows logits_row .. logits_row +
// drafts.size() of that step; its committed positions start at start_pos, capture row `row` (SeqPlan::token_offset).
struct RoundItem {
  int32_t slot = -1;
  int64_t start_pos = 0;
  int32_t logits_row = 0;
  int32_t row = 0;
  std::span<const int32_t> drafts;  // the drafts the step verifies
  int64_t context_start = 0;        // of the next proposal (ProposeItem::context_start)
};

// What the round computed for one RoundItem: the greedy acceptance (tokens = the accepted drafts, then the target's
// token after them: Sampler::sample's greedy tokens of the rows), and a whole block of drafts (DSpark's block size,
// with the confidence logits) after the new anchor tokens.back() at position start_pos + tokens.size().
struct RoundResult {
  int32_t accepted = 0;
  std::vector<int32_t> tokens;
  Proposal proposal;
};

// A launched round's outputs on the device (device pointers; Drafter::round_outputs), read by the chained verify step
// queued after it (ModelRunner::begin_chained_step) for its tokens and positions.
struct RoundOutputs {
  const int32_t* accepted = nullptr;  // [items] drafts each item accepted
  const int32_t* verified = nullptr;  // [items, block + 1] the accepted drafts, then the target's token after them
  const int32_t* drafts = nullptr;    // [items, block] the next block's drafts
  int32_t block = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual SpecMethod method() const = 0;
  // Target layers whose residual streams the drafter reads; the runner captures them for every token of a step as
  // [num_tokens, layers.size(), hc_mult * hidden] floats: a DeepSeek-V4 layer's output streams, a DeepSeek-V4.1
  // layer's input streams after its Engram (the official forward_spec taps "before block L").
  virtual const std::vector<int64_t>& tapped_layers() const = 0;
  virtual int32_t max_drafts() const = 0;
  virtual bool has_confidence() const = 0;
  // Positions before the anchor that a proposal reads at most (its context ring).
  virtual int64_t context_window() const = 0;
  // After positions were skipped, a sequence drafts again once this many consecutive positions have been ingested
  // (ProposeItem::context_start then names the first of them): the whole window for a drafter whose ingest reads its
  // own earlier rows (MTP-1), fewer for one whose proposals read the ring only from context_start (DSpark).
  virtual int64_t resume_positions() const = 0;
  virtual Status ingest(std::span<const IngestItem> items, std::span<const float> hidden) = 0;
  virtual Status propose(std::span<const ProposeItem> items, const DrawFn& draw, std::vector<Proposal>& out) = 0;
  // Runs what ingest() deferred to fuse it with the next propose() (the CUDA DSpark drafter's ingest joins the
  // round's graph); propose() and another ingest() run it too. The speculator calls it at the end of each draft(),
  // since the next step overwrites the captured hidden states an ingest reads.
  virtual Status flush() { return Status::ok(); }
  // The one-wait round (docs/decisions.md, 2026-12-04): after the verify step was launched without a host wait
  // (ModelRunner::begin_sampled_step), the acceptance on the device, then the ingest of each item's committed positions
  // and the proposal after its new anchor, with one download and one host wait. Equal to sampling the rows greedily,
  // ingest() of the committed positions and propose() of whole blocks with pick_argmax. Only drafters that say so.
  virtual bool supports_round() const { return false; }
  Status verify_and_propose(std::span<const RoundItem> items, std::vector<RoundResult>& out) {
    DSI_RETURN_IF_ERROR(launch_round(items));
    return finish_round(items, out);
  }
  // The round in two halves, so that a chained verify step can be queued between them: launch_round() queues the
  // acceptance, the ingest, the proposal and their download; round_outputs() names that round's outputs on the
  // device until the next launch; finish_round() (the same items) waits for the download and returns the results.
  virtual Status launch_round(std::span<const RoundItem> items) {
    (void)items;
    return Status::error("drafter: no one-wait round");
  }
  virtual RoundOutputs round_outputs() const { return {}; }
  // CUDA graphs this drafter captured so far (its propose and round graphs); 0 for one without them.
  virtual int64_t graphs_captured() const { return 0; }
  virtual Status finish_round(std::span<const RoundItem> items, std::vector<RoundResult>& out) {
    (void)items;
    (void)out;
    return Status::error("drafter: no one-wait round");
  }
};

// CPU reference drafter of `cfg.method` for `num_slots` state-cache slots; weights from cfg.model_dir
// (speculative/draft_weights.h).
Result<std::unique_ptr<Drafter>> create_cpu_drafter(const SpeculativeConfig& cfg, const io::ModelConfig& target,
                                                    int32_t num_slots);

}  // namespace dsinfer::speculative
