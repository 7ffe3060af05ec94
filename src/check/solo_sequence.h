// One sequence driven through a model runner with hand-built plans (no scheduler), on a one-sequence state
// cache: the reference check and the fidelity check (src/check) both feed tokens this way.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/state_cache.h"
#include "core/status.h"
#include "runner/model_runner.h"

namespace dsinfer::check {

// A state cache for one sequence of up to max_len tokens, bound to the runner (DP attention: room for one on each
// rank, split as the engine splits it; the sequence goes to the rank admission picks).
inline Result<cache::StateCache> bind_single_sequence_cache(runner::ModelRunner& runner, int64_t max_len) {
  const int32_t ranks = runner.state_ranks();
  cache::StateCacheConfig cc;
  cc.max_num_seqs = ranks;
  cc.max_model_len = max_len;
  cc.kv_elem_bytes = runner.kv_elem_bytes();
  DSI_ASSIGN_OR_RETURN(cache::StateLayout layout, cache::compute_state_layout(runner.config(), cc));
  cc.budget_bytes = layout.bytes_per_sequence(max_len) * ranks;
  DSI_ASSIGN_OR_RETURN(cache::StateCache cache, cache::StateCache::create(runner.config(), cc));
  if (ranks > 1) DSI_RETURN_IF_ERROR(cache.set_ranks(ranks));
  DSI_RETURN_IF_ERROR(runner.bind_state(cache.layout(), cache.num_slots(), cache.num_blocks(), max_len));
  return cache;
}

class SoloSequence {
 public:
  SoloSequence(runner::ModelRunner& r, cache::StateCache& c) : r_(r), c_(c) {}
  ~SoloSequence() {
    if (slot_ >= 0) c_.free(slot_);
  }
  SoloSequence(const SoloSequence&) = delete;
  SoloSequence& operator=(const SoloSequence&) = delete;

  // Runs `tokens` after the current position; logits [tokens, V] for every token (all) or [1, V] for the last.
  Status step(std::span<const int32_t> tokens, bool all, std::vector<float>& logits) {
    const int64_t end = pos_ + int64_t(tokens.size());
    if (slot_ < 0) slot_ = c_.admit(end);
    if (slot_ < 0 || !c_.allocate_for(slot_, end)) return Status::errorf("state cache cannot hold {} tokens", end);
    scheduler::BatchPlan p;
    p.clear();
    scheduler::SeqPlan sp;
    sp.seq_id = 1;
    sp.start_pos = pos_;
    sp.num_new_tokens = int32_t(tokens.size());
    sp.needs_logits = true;
    sp.logits_row = 0;
    sp.slot = slot_;
    sp.block_table = c_.table(slot_);
    p.token_ids.assign(tokens.begin(), tokens.end());
    for (int64_t i = 0; i < int64_t(tokens.size()); ++i) {
      p.positions.push_back(pos_ + i);
      if (all || i + 1 == int64_t(tokens.size())) p.logits_token_index.push_back(int32_t(i));
    }
    p.cu_seqlens.push_back(int32_t(tokens.size()));
    p.seqs.push_back(sp);
    DSI_RETURN_IF_ERROR(r_.step(p, logits));
    pos_ = end;
    return Status::ok();
  }

 private:
  runner::ModelRunner& r_;
  cache::StateCache& c_;
  cache::SlotId slot_ = -1;
  int64_t pos_ = 0;
};

}  // namespace dsinfer::check
