// BatchPlan: everything one engine step needs, as plain data — which sequences run, their new tokens and
// positions (ragged: a prefill chunk, one decode token, or later 1 + k verify tokens), where their state
// lives (slot + block table), which rows need logits, and what the sampler needs for each of those rows.
// Produced by Scheduler::schedule(); read by the model runner and the sampler; no hidden globals.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/state_cache.h"
#include "sampling/philox.h"
#include "sampling/sampling_params.h"

namespace dsinfer::scheduler {

using RequestId = uint64_t;
using SeqId = uint64_t;

// Asynchronous steps: a new token whose id is still on the device (sampled by the step before, not yet read
// back) is planned as kPendingToken, and BatchPlan::token_fills says where the runner takes it from.
inline constexpr int32_t kPendingToken = -1;
struct TokenFill {
  int32_t token_index = 0;  // flat index into BatchPlan::token_ids (holds kPendingToken)
  int32_t sample_row = 0;   // the row of the runner's previous sampling (launch_sample_rows) whose id goes there
};

struct SeqPlan {
  SeqId seq_id = 0;
  RequestId request_id = 0;
  int64_t start_pos = 0;          // position of the first new token (= tokens already in the state cache)
  int32_t num_new_tokens = 0;     // tokens computed this step
  int32_t token_offset = 0;       // where they start in BatchPlan::token_ids / positions
  bool is_prefill = false;        // computing tokens it did not just sample (prompt, or recompute)
  bool needs_logits = false;      // last new token's logits are sampled (last prefill chunk, or decode)
  int32_t logits_row = -1;        // row in the logits output ([num_logits, vocab]); -1 when !needs_logits
  int32_t num_spec_tokens = 0;    // speculative decoding: the last num_spec_tokens new tokens are drafts to verify;
                                  // the anchor and every draft get logits, rows logits_row .. + num_spec_tokens
  cache::SlotId slot = -1;        // fixed state: rings + compressor frontiers
  std::span<const cache::BlockId> block_table;  // token blocks covering >= start_pos + num_new_tokens
  // For the sampler (valid until the next Scheduler::update or schedule call):
  const sampling::SamplingParams* params = nullptr;
  sampling::RngKey rng;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
};

struct BatchPlan {
  uint64_t step = 0;
  std::vector<SeqPlan> seqs;
  // Flattened for a GPU runner: [num_tokens] token ids and positions in seqs order, cu_seqlens
  // [num_seqs + 1] prefix sums of num_new_tokens, logits_token_index [num_logits] = flat index of the token
  // whose logits each logits row holds.
  std::vector<int32_t> token_ids;
  std::vector<int64_t> positions;
  std::vector<int32_t> cu_seqlens;
  std::vector<int32_t> logits_token_index;
  // Sequences whose state was freed this step to make room (they will recompute from scratch).
  std::vector<SeqId> preempted;
  // Prefix caching: state copies the runner does before this step (restore a snapshot into an admitted
  // sequence's slot; bounded replay: zero its slot, copy shared blocks into its scratch blocks).
  std::vector<cache::StateCopy> state_copies;
  // Asynchronous steps: the kPendingToken entries of token_ids, in token order (empty in synchronous steps).
  std::vector<TokenFill> token_fills;

  int32_t num_seqs() const { return int32_t(seqs.size()); }
  int32_t num_tokens() const { return int32_t(token_ids.size()); }
  int32_t num_logits() const { return int32_t(logits_token_index.size()); }
  bool empty() const { return seqs.empty(); }
  void clear() {
    seqs.clear();
    token_ids.clear();
    positions.clear();
    cu_seqlens.assign(1, 0);
    logits_token_index.clear();
    preempted.clear();
    state_copies.clear();
    token_fills.clear();
  }
};

}  // namespace dsinfer::scheduler
