// CUDA graphs of decode steps: a step with one new token (and one logits row) per sequence replays the graph
// captured for its shape (on one rank: its batch size padded to a bucket, step_plan.h graph_bucket_seqs). The
// forward's scratch buffers are sized for max_model_len, so the captured pointers and launch shapes stay valid for
// every context length; any scratch reallocation (a new scratch generation) drops the graphs.
// DSINFER_CUDA_GRAPHS=0 turns them off (CudaRunner). Plain header, no CUDA types.
#pragma once
#include <cstdint>
#include <functional>
#include <map>

#include "core/status.h"

namespace dsinfer::backends {

// The token count a step's scratch is sized for: its tokens rounded up to kScratchTokenQuantum. Every growth of a
// buffer a captured graph points at drops every graph, so scratch grown to exactly T recaptured the whole set
// whenever a prompt was longer than all before it (a b1 DSpark run of four ~83-token prompts: 10-16 captures where
// its shapes need 6). The quantum bounds the slack at 127 tokens of scratch.
inline constexpr int64_t kScratchTokenQuantum = 128;
inline int64_t scratch_tokens(int64_t T) {
  return (T + kScratchTokenQuantum - 1) / kScratchTokenQuantum * kScratchTokenQuantum;
}

class DecodeGraphs {
 public:
  DecodeGraphs() = default;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  ~DecodeGraphs() { clear(); }

  // Launches the graph of `batch` on `stream`, first capturing `forward` (kernels only: no host synchronisation,
  // no allocation) when there is none for this batch size and scratch generation.
  Status launch(int64_t batch, uint64_t scratch_gen, void* stream, const std::function<Status()>& forward);
  void clear();
  // Graphs captured since construction (recaptures after a scratch move included).
  int64_t captures() const { return captures_; }

 private:
  std::map<int64_t, void*> graphs_;  // batch size -> cudaGraphExec_t
  uint64_t gen_ = 0;                 // scratch generation the graphs were captured with
  int64_t captures_ = 0;
};

}  // namespace dsinfer::backends
