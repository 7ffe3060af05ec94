// StructuredDecoding: the engine's structured-output state — the grammar cache of its tokenizer and one
// SequenceMatcher per constrained sequence. Per engine step:
//   fill_bitmask(plan, mask)  after schedule(), before sampling: one allowed-token row per logits row
//                             (sampling::TokenBitmask, the seam the CPU sampler and a GPU sampler take). It
//                             reads only the matchers and the plan, so it can run on another thread while the
//                             model step runs (the engine does that);
//   advance(updates)          after Scheduler::update(): every matcher takes the tokens its sequence
//                             accepted; finished sequences are dropped.
// rollback(seq, n) undoes a sequence's last n tokens (speculative decoding).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "dsinfer/request.h"
#include "sampling/sampler.h"
#include "scheduler/batch_plan.h"
#include "scheduler/step_output.h"
#include "structured/grammar_cache.h"
#include "structured/seq_matcher.h"

namespace xgrammar {
class BatchGrammarMatcher;
}

namespace dsinfer::structured {

using Grammar = std::shared_ptr<const xgrammar::CompiledGrammar>;

struct MaskStats {
  int64_t calls = 0;          // fill_bitmask calls with at least one constrained row
  int64_t rows = 0;           // constrained rows filled
  double seconds = 0;         // wall time inside those calls
};

class StructuredDecoding {
 public:
  // mask_threads: threads filling bitmasks of one step (0: half the hardware threads, at most 16); cache: a grammar
  // cache of this tokenizer to share (null: its own).
  static Result<std::unique_ptr<StructuredDecoding>> create(const tokenizer::Tokenizer& tok, int64_t vocab_size,
                                                            int32_t eos_token_id, int32_t mask_threads = 0,
                                                            std::shared_ptr<GrammarCache> cache = nullptr);
  ~StructuredDecoding();

  // The compiled grammar of `so` (cached); errors name so.field.
  Result<Grammar> compile(const StructuredOutput& so) { return cache_->get(so); }

  struct SeqOptions {
    bool wait_for_think_end = false;  // chat thinking mode: the grammar starts after "</think>"
    std::vector<int32_t> stop_tokens;  // besides EOS (the request's stop_token_ids)
  };
  void add(scheduler::SeqId id, const Grammar& grammar, const SeqOptions& opts);
  void remove(scheduler::SeqId id) { seqs_.erase(id); }
  bool empty() const { return seqs_.empty(); }
  size_t num_sequences() const { return seqs_.size(); }

  void fill_bitmask(const scheduler::BatchPlan& plan, sampling::TokenBitmask& mask);
  void advance(std::span<const scheduler::SeqUpdate> updates);
  Status rollback(scheduler::SeqId id, int64_t n);

  SequenceMatcher* matcher(scheduler::SeqId id);  // null when the sequence is not constrained
  const GrammarCache& cache() const { return *cache_; }
  const MaskStats& mask_stats() const { return stats_; }

 private:
  StructuredDecoding() = default;

  const tokenizer::Tokenizer* tok_ = nullptr;
  int64_t vocab_ = 0;
  int32_t eos_ = -1;
  std::shared_ptr<GrammarCache> cache_;
  std::unique_ptr<xgrammar::BatchGrammarMatcher> batch_;
  std::map<scheduler::SeqId, SequenceMatcher> seqs_;
  MaskStats stats_;
};

}  // namespace dsinfer::structured
