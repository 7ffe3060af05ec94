// The one CUDA runner's split between what every model family shares and what each family supplies
// (docs/architecture.md "backends", docs/decisions.md 2026-12-02 "One CUDA runner"):
//   RunnerCore   the state the runner owns and every forward reads: config, numerics, device, stream, op timer,
//                the engine's state memory, the kernel modes, expert parallelism and the hidden-state capture;
//   CudaForward  one model family's part: its tensor table and weight upload, its checks of the state layout and
//                of a step's tokens, its scratch and its forward (capturable into a CUDA graph).
// CudaRunner (cuda_runner_impl.h) holds the core and one forward; setup, state binding, the step, graphs, device
// sampling, asynchronous steps, prefix copies, the host tier, hidden-state capture and EPLB are written once there.
// Families: CudaForwardV4 (forward_v4.h) and CudaForwardV41 (forward_v41.h); a later V4.x is one more forward.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/step/op_timer.h"
#include "backends/cuda/weights/device_weights.h"
#include "cache/state_layout.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "io/config.h"
#include "model/numerics.h"
#include "ops/kernel_mode.h"
#include "ops/moe/moe_cuda.h"
#include "ops/step_cuda.h"
#include "parallel/communicator.h"
#include "parallel/parallel_plan.h"
#include "runner/model_runner.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::backends {

// EPLB state of a shard: the placement table of every layer ([layers * table_len] int32, remap_expert_eplb) and
// the per-expert counters ([layers * experts] uint32, rank 0 only).
struct EplbDevice {
  bool on = false;
  int32_t redundant = 0, slots = 0;
  int64_t table_len = 0;
  cuda::DeviceBuffer<int32_t> tables;
  cuda::DeviceBuffer<uint32_t> counts;
};

struct RunnerCore {
  RunnerCore(io::ModelConfig cfg, model::Numerics num) : cfg_(std::move(cfg)), num_(std::move(num)) {}

  // hidden_capture_cuda.cpp: after layer l, the residual streams X [T, hc * D] into the capture (a no-op for a
  // layer not tapped; one strided copy on the stream, so a decode graph captures it).
  Status capture_hidden(int64_t l, const float* X, int64_t T);
  // parallel_runner_eplb_cuda.cpp: global top-k ids [T * k] -> this shard's local slots (range or placement).
  Status remap_experts(int32_t* ridx, int64_t l, int64_t T, int64_t k);

  io::ModelConfig cfg_;
  model::Numerics num_;
  cuda::DeviceInfo device_;
  int32_t ordinal_ = 0;                     // RunnerOptions::device
  int32_t ep_rank_ = 0, ep_size_ = 1;       // expert parallelism (RunnerOptions::ep_rank / ep_size)
  parallel::ExpertRange experts_;           // routed experts held here (global ids)
  parallel::Communicator* comm_ = nullptr;  // EP group (ep_size_ > 1), owned by the ParallelRunner
  // DP attention + EP (set by the ParallelRunner): this shard runs its own sequences only; each MoE layer sends
  // its tokens' routed pairs to the experts' ranks and combines what comes back (CudaForward::moe_exchange).
  bool dp_ = false;
  // DP attention on ranks sharing one GPU: every rank's token count in the step (the ParallelRunner's split), which
  // sizes the fixed-capacity exchange; empty: the exchange of counts through the host (expert_exchange_cuda.cpp).
  std::vector<int64_t> dp_rank_tokens_;
  // TP attention + EP (set by the ParallelRunner; ep_rank_ / ep_size_ are the TP rank / size): this shard runs the
  // query heads of its output groups (CudaForward::head_groups), the state and every other op replicated.
  bool tp_ = false;
  // Collective traffic since the bench last took it (payload bytes this shard sent, collectives).
  runner::RunnerDiagnostics::CommTraffic traffic_;
  EplbDevice eplb_;
  void* stream_ = nullptr;
  cache::StateLayout layout_;
  cuda::DeviceBuffer<uint8_t> slots_, blocks_;  // the engine's state memory (layout_: fp32 or FP8 rows)
  int64_t max_model_len_ = 0;
  // Bumped whenever a buffer a captured decode graph holds moves (scratch, plan, capture): the graphs are dropped.
  uint64_t scratch_gen_ = 0;
  bool exact_ = false;  // GEMMs / MoE only on the fp32 CUDA-core path (RunnerOptions::exact_gemm)
  // RunnerOptions::batch_invariant: every kernel choice independent of the step's batch (ops/kernel_mode.h).
  bool batch_invariant_ = false;
  // RunnerOptions::fp8_state (EngineOptions::state_format "auto"): the family may keep its state in the FP8 storage
  // format.
  bool fp8_state_ = false;
  OpTimer timer_;
  // Hidden-state capture: capture_index_[l] = position of layer l in the requested list, or -1.
  std::vector<int64_t> capture_layers_, capture_index_;
  cuda::DeviceBuffer<float> hidden_dev_;  // [tokens, layers, hc * D]
};

// One model family's forward on the runner's core. Everything it launches goes on the core's stream; run() does
// no host synchronisation and no allocation (prepare() sizes the scratch first), so a decode step replays it as a
// CUDA graph.
class CudaForward {
 public:
  explicit CudaForward(RunnerCore& core)
      : core_(core), cfg_(core.cfg_), num_(core.num_), device_(core.device_), stream_(core.stream_),
        layout_(core.layout_), slots_(core.slots_), blocks_(core.blocks_), scratch_gen_(core.scratch_gen_),
        exact_(core.exact_), batch_invariant_(core.batch_invariant_), ep_rank_(core.ep_rank_),
        ep_size_(core.ep_size_), comm_(core.comm_) {}
  CudaForward(const CudaForward&) = delete;
  CudaForward& operator=(const CudaForward&) = delete;
  virtual ~CudaForward() = default;

  // The family's short name ("v4", "v4.1") for the runner's name and errors.
  virtual const char* family() const = 0;
  // Weights (checkpoint or dummy, the routed experts of `slots` only) and the family's constant tables.
  virtual Status load(const runner::RunnerOptions& opts, ExpertSlots slots) = 0;
  virtual int64_t weight_bytes() const = 0;
  virtual bool fp32_storage() const = 0;
  // StateCacheConfig::kv_elem_bytes of the state this forward prefers (4: fp32 rows; cache::kFp8StateElem: the
  // storage format); bind_state also accepts fp32 rows (a ParallelRunner's shards).
  virtual int32_t state_elem_bytes() const { return 4; }
  // After the runner bound the engine's state memory: the family's checks of the layout and its state setup.
  virtual Status bind_state() { return Status::ok(); }
  // randomize_state: the family's state rows whose random contents would be invalid, reset.
  virtual Status reset_invalid_state() { return Status::ok(); }
  // Host-side checks of a step's token ids before anything is launched.
  virtual Status check_plan(const scheduler::BatchPlan& plan) const {
    (void)plan;
    return Status::ok();
  }
  // A token id check_plan accepts in any step: the input of graph buckets' padding sequences.
  virtual int32_t padding_token() const { return 0; }
  // Scratch for T tokens, R logits rows and positions up to max_pos (grown, never shrunk; growing waits for the
  // queued work and bumps the core's scratch generation).
  virtual Status prepare(int64_t T, int64_t R, int64_t max_pos) = 0;
  // The kernels of one step: logits of `rows` (R rows) into logits().
  virtual Status run(const ops::StepDevice& st, const int32_t* rows, int64_t R) = 0;
  virtual float* logits() const = 0;
  // EPLB: the routed experts of layer l's local slots replaced (slots whose expert changed reloaded).
  virtual Result<int32_t> reload_expert_slots(int64_t l, const std::vector<int32_t>& slots) = 0;
  // The speculative drafter's view of the target: its embedding and head (nullptr: no GPU drafter for this family).
  virtual const ops::cuda::DeviceWeight* embed_weight() const = 0;
  virtual const ops::cuda::DeviceWeight* head_weight() const = 0;

  // DP attention + EP, a shard without tokens in a step: every MoE layer's exchange with 0 tokens of its own (it
  // still computes the pairs the other ranks send to its experts). backends/cuda/parallel/expert_exchange_cuda.cpp.
  Status serve_experts();

 protected:
  // The kernel-choice plans' mode (ops/kernel_mode.h) of this family.
  virtual ops::KernelMode kernel_mode() const = 0;
  // Layer l's routed experts (this rank's) and shared expert (null: none), with their SwiGLU clamps.
  struct MoeLayerView {
    const ops::cuda::MoeExpertsDevice* experts = nullptr;
    const ops::cuda::MoeSharedDevice* shared = nullptr;
    float limit = 0, shared_limit = 0;
  };
  virtual MoeLayerView moe_layer(int64_t l) const = 0;
  // DP attention + EP (expert_exchange_cuda.cpp, docs/multi_gpu.md "DP attention"): the MoE of this shard's T
  // tokens x [T, D] with routing ridx (global ids) / rw [T, k] into out [T, D]. Every routed pair goes to its
  // expert's rank and its output comes back (all_to_all_v on the shard's communicator); the token's rank adds the
  // outputs in top-k order and its shared expert with moe_cuda's own combine, so with --batch-invariant the result
  // is the one-rank result bit for bit. Synchronises the stream (the pair counts go through the host), except at a
  // fixed capacity (RunnerCore::dp_rank_tokens_ set: ranks sharing one GPU), where nothing waits for the device.
  Status moe_exchange(int64_t l, const float* x, int64_t T, const int32_t* ridx, const float* rw, float* out);
  // Its first part: the pairs of the routing ridx [T, k] planned per destination rank into the scratch's plan
  // (send_token [P], send_expert [P], pos_of [T * k]), the pair rows sent to and received from each rank.
  Status plan_exchange(const int32_t* ridx, int64_t T, int64_t& P, std::vector<int64_t>& sent,
                       std::vector<int64_t>& got);
  // EP (replicated tokens) under --batch-invariant (expert_slots_cuda.cpp, docs/multi_gpu.md): each rank computes
  // its experts' outputs of the (token, top-k slot) pairs into a [T, k, D] buffer that is zero in the other ranks'
  // slots, the all-reduce sums it (x + 0 = x exactly), and every rank adds the slots in top-k order and the shared
  // expert with moe_cuda's own combine: the one-rank bits. ridx (global ids) is remapped in place.
  Status moe_slots(int64_t l, const float* x, int64_t T, int32_t* ridx, const float* rw, float* out);
  // Both of them end here (expert_exchange_cuda.cpp): the shared expert of the T tokens x and the sum of their
  // top-k pair outputs (row pos[t * k + j] of y, weight rw[t * k + j]) into out, in the chunks of own_chunk tokens
  // one rank's MoE uses, with moe_cuda's own kernels (moe_shared_cuda / moe_combine_cuda): one rank's bits.
  Status moe_shared_and_combine(int64_t l, const float* x, int64_t T, int64_t own_chunk, const float* y,
                                const int32_t* pos, const float* rw, cuda::DeviceBuffer<float>& shared_out,
                                ops::cuda::MoeWorkspace& ws, float* out);

  // TP attention (backends/cuda/parallel/tensor_parallel_cuda.cpp, docs/multi_gpu.md "TP attention"): this shard's
  // output groups [g0, g1) (parallel::head_range over cfg_.o_groups) and their query heads [h0, h1); every group
  // and head outside TP.
  struct HeadGroups {
    int64_t g0 = 0, g1 = 0, h0 = 0, h1 = 0;
  };
  HeadGroups head_groups() const;
  // TP: before wo_a, zero its output [T, width] (clear_head_groups); after wo_a wrote this shard's groups' columns,
  // sum the buffer over the ranks in place (gather_head_groups): every rank then holds every group's output, each
  // computed by one rank and added to zeros (exact), so wo_b, run whole on every rank, gives the one-rank bits.
  Status clear_head_groups(float* mid, int64_t T, int64_t width);
  Status gather_head_groups(float* mid, int64_t T, int64_t width, int64_t layer);
  // A rank's rows of wq_b and groups of wo_a: backends/cuda/runner/tensor_parallel_parts.h (tp::rows_part,
  // tp::groups_part).

  Status mark(const char* name, int64_t layer, bool begin) {
    return core_.timer_.mark(name, layer, begin, stream_);
  }
  // Grows a scratch buffer to n elements (64 at least) under the runner's rule (wait, then bump the generation).
  template <typename B>
  Status grow(B& b, size_t n, const char* what) {
    if (b.size() >= n) return Status::ok();
    DSI_RETURN_IF_ERROR(sync());  // asynchronous steps: the step launched before may still use the old buffer
    DSI_RETURN_IF_ERROR(b.alloc(n < 64 ? 64 : n, what));
    ++scratch_gen_;  // captured graphs hold the old pointers
    return Status::ok();
  }
  Status sync() const;  // cudaStreamSynchronize of the core's stream

  RunnerCore& core_;
  // The core's fields under the names the forwards use (references: the core may change them between steps).
  const io::ModelConfig& cfg_;
  const model::Numerics& num_;
  const cuda::DeviceInfo& device_;
  void* const& stream_;
  const cache::StateLayout& layout_;
  const cuda::DeviceBuffer<uint8_t>& slots_;
  const cuda::DeviceBuffer<uint8_t>& blocks_;
  uint64_t& scratch_gen_;
  const bool& exact_;
  const bool& batch_invariant_;
  const int32_t& ep_rank_;
  const int32_t& ep_size_;
  parallel::Communicator* const& comm_;

 private:
  struct ExchangeScratch;                    // expert_exchange_cuda.cpp
  std::shared_ptr<ExchangeScratch> xchg_;    // made on the first exchange
  struct SlotScratch;                        // expert_slots_cuda.cpp
  std::shared_ptr<SlotScratch> slot_;        // made on the first moe_slots
};

// The forward of the core's config: CudaForwardV41 for a DeepSeek-V4.1 config, else CudaForwardV4.
std::unique_ptr<CudaForward> make_cuda_forward(RunnerCore& core);

}  // namespace dsinfer::backends

// Runs one named op of a forward, bracketed by the op timer's events.
#define DSI_OP(name, layer, ...)                   \
  do {                                             \
    DSI_RETURN_IF_ERROR(mark(name, layer, true));  \
    DSI_RETURN_IF_ERROR(__VA_ARGS__);              \
    DSI_RETURN_IF_ERROR(mark(name, layer, false)); \
  } while (0)
