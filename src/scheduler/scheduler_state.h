// The scheduler's per-request and per-sequence records (private to src/scheduler/scheduler*.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "scheduler/scheduler.h"

namespace dsinfer::scheduler {

struct Scheduler::Request {
  RequestId id = 0;
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  uint64_t seed = 0;
  int64_t max_tokens = 0;  // effective: min(params.max_tokens, max_model_len - prompt)
  std::vector<SeqId> seqs;
  int32_t live = 0;        // sequences not finished / aborted
};

struct Scheduler::Sequence {
  Sequence(Request* r, SeqId i, uint32_t k, int64_t eos)
      : id(i), req(r), sample_index(k), stop(&r->params, eos, r->max_tokens) {}
  SeqId id;
  Request* req;
  uint32_t sample_index;
  std::vector<int32_t> output;
  int64_t num_computed = 0;  // tokens whose state is in the cache
  SeqState state = SeqState::Waiting;
  cache::SlotId slot = -1;
  sampling::StopChecker stop;
  std::vector<int32_t> draft;       // speculative decoding: drafts after the last token (see set_draft)
  std::vector<float> survival;      //   and their cumulative survival estimates
  int32_t spec_len = 0;             //   drafts verified in the step being planned
  // Prefix caching (scheduler_prefix.cpp):
  std::vector<uint64_t> keys;       // chain keys of its complete token blocks
  std::vector<uint64_t> gens;       // cache node of each of its first blocks (0: not cached, chain broken)
  bool approx = false;              // resumed by bounded replay: its later state is inexact and never cached
  int64_t replay_until = 0;         // > num_computed while it recomputes the window before a bounded hit
  int64_t replay_first = 0;         // first table index holding a scratch copy during the replay
  std::vector<cache::BlockId> replay_shared;  // the cached blocks those scratch copies stand in for
  // Asynchronous steps (scheduler_async.cpp): output.back() is kPendingToken, sampled in logits row pending_row
  // of step pending_step and not yet resolved (0: no placeholder); last_step: the last step that computed it
  // (its slot is freed only once that step has been consumed).
  uint64_t pending_step = 0;
  int32_t pending_row = -1;
  uint64_t last_step = 0;
  int64_t total_len() const { return int64_t(req->prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    const int64_t p = int64_t(req->prompt.size());
    return i < p ? req->prompt[size_t(i)] : output[size_t(i - p)];
  }
};

}  // namespace dsinfer::scheduler
