// The per-step plan of the CUDA runner: a scheduler::BatchPlan checked and packed into one buffer of 16-byte
// aligned arrays (token ids, positions, sequence of each token, cu_seqlens, start positions, slots, block tables,
// logits rows) that reaches the device in one copy, and the ops::StepDevice view of the device copy.
// Host-only code without CUDA: it is built in every configuration, so the CPU unit tests cover it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/state_layout.h"
#include "core/status.h"
#include "cuda/device_buffer.h"
#include "ops/step_cuda.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::backends {

struct StepPlanLayout {
  int64_t T = 0, S = 0, R = 0;  // tokens, sequences, logits rows
  int64_t F = 0;                // token fills (asynchronous steps: inputs taken from the previous sampling)
  int64_t table_stride = 1;     // block-table row length
  int64_t max_pos = 0;          // largest position in the step (fixed-shape steps: max_model_len - 1)
  // Byte offsets of the arrays in the packed buffer, and its size.
  size_t tokens = 0, pos = 0, seq_of_token = 0, cu_seqlens = 0, start_pos = 0, slot = 0, block_tables = 0,
         logits_rows = 0, fills = 0, bytes = 0;
};

// Checks the plan (a fixed-shape step must fit max_model_len; token ids in [0, vocab), except the kPendingToken
// inputs of plan.token_fills, whose rows must be < prev_rows: the rows of the previous sampling) and lays it out.
// fixed_shape: a decode step replayed as a CUDA graph, so the table stride and max_pos are those of
// max_model_len and one graph serves every context length.
Result<StepPlanLayout> layout_step_plan(const scheduler::BatchPlan& plan, const cache::StateLayout& state,
                                        int64_t vocab, bool fixed_shape, int64_t max_model_len, int64_t prev_rows = 0);

// Whether the step replays a CUDA graph: a decode step (one token and one logits row per sequence) or a uniform
// speculative verify step (the same 1 + k <= 17 tokens for every sequence, a logits row for each token), whose
// positions and block tables fit max_model_len (the fixed-shape layout). Graphs are keyed by (tokens, sequences).
bool fixed_shape_step(const scheduler::BatchPlan& plan, const cache::StateLayout& state, int64_t max_model_len);
inline int64_t fixed_shape_key(int64_t T, int64_t S) { return T * (int64_t(1) << 24) + S; }

// Graph buckets: a fixed-shape step of `seqs` sequences runs padded to graph_bucket_seqs(seqs) sequences (1, 2, 4,
// 8, then multiples of 8 up to 256, then of 32), so one graph serves a bucket instead of one graph per batch size.
int64_t graph_bucket_seqs(int64_t seqs);

// Where padding sequences live: a slot and a block reserved beyond the engine's (bind_state), which no real
// sequence uses, and a token id every model accepts.
struct StepPadding {
  cache::SlotId slot = -1;
  cache::BlockId block = -1;
  int32_t token = 0;
};

// `plan` (a fixed_shape_step) with sequences appended up to `seqs`: each like the plan's (the same 1 + k tokens, a
// logits row per sequence or per token), at positions 0.., every block-table entry it reads the padding block, its
// state the padding slot. The real sequences, tokens, logits rows and token fills keep their indices, so the padded
// step's first rows are the plan's. `table` is out's storage for the padding block table (kept by the caller
// while out is used).
void pad_fixed_step(const scheduler::BatchPlan& plan, int64_t seqs, const StepPadding& pad, int64_t block_size,
                    std::vector<cache::BlockId>& table, scheduler::BatchPlan& out);

// Writes the plan into dst (layout.bytes bytes; padding and unused table entries zero). Pending tokens are written as
// 0 and the fills as [F, 2] int32 (token index, sample row) pairs for the device gather (fill_step_tokens).
void pack_step_plan(const scheduler::BatchPlan& plan, const StepPlanLayout& layout, uint8_t* dst);

// The step as the kernels see it, over the packed plan at `base` (a device copy of pack_step_plan's output).
ops::StepDevice step_device(const StepPlanLayout& layout, const uint8_t* base);
inline const int32_t* logits_rows(const StepPlanLayout& layout, const uint8_t* base) {
  return reinterpret_cast<const int32_t*>(base + layout.logits_rows);
}

// The per-step upload shared by the CUDA runners (step_plan_cuda.cpp, CUDA builds only): the plan is packed into
// page-locked staging (so the async copy overlaps and the source stays valid while it is in flight) and copied to
// a device buffer on the runner's stream. Both grow to the largest plan seen (at least 4 KiB).
class StepPlanUpload {
 public:
  StepPlanUpload() = default;
  StepPlanUpload(const StepPlanUpload&) = delete;
  StepPlanUpload& operator=(const StepPlanUpload&) = delete;
  ~StepPlanUpload();
  // Packs and queues the copy. The staging is rewritten only after the previous copy left it (an event: with
  // asynchronous steps the host packs step t+1 while step t's copy may still be queued). *moved (optional) is set
  // when the device buffer was reallocated (after the stream drained): graphs captured over it must be recaptured.
  Status upload(const scheduler::BatchPlan& plan, const StepPlanLayout& layout, void* stream, bool* moved = nullptr);
  const uint8_t* device() const { return dev_.data(); }
  uint8_t* device() { return dev_.data(); }  // the token fills of asynchronous steps are written in place

 private:
  uint8_t* host_ = nullptr;
  size_t host_bytes_ = 0;
  void* copied_ = nullptr;  // cudaEvent_t recorded after the last copy
  cuda::DeviceBuffer<uint8_t> dev_;
};

// CPU reference of the device gather (token_fill_cuda.h): tokens[fill.token_index] = sampled[fill.sample_row], an id
// outside [0, vocab) (a row that was not sampled) becoming 0, over the packed tokens / fills of pack_step_plan.
void fill_step_tokens_ref(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const int32_t* sampled,
                          int64_t num_sampled, int64_t vocab);
// CPU reference of the chained verify step's fill (token_fill_cuda.h fill_chained_step), same arguments.
void fill_chained_step_ref(int32_t* tokens, int64_t* pos, int64_t* start_pos, int64_t S, int64_t n,
                           const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int64_t block);

}  // namespace dsinfer::backends
