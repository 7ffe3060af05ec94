// Multi-GPU plan of one process (docs/multi_gpu.md): the parallel sizes asked for (--gpus, --expert-parallel-size,
// --data-parallel-size, --tensor-parallel-size) checked against what is implemented (EP = N, DP = 1 or N, TP = 1
// or N, one node), the layout they select, each rank's expert and head range, the per-rank memory sizing that
// decides whether a model fits (the one source of truth of the CUDA runner's "does not fit" refusal), and the cost
// model `dsinfer plan` picks a layout with. Host code, no CUDA.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "model/tensor_table.h"
#include "parallel/bootstrap.h"

namespace dsinfer::parallel {

struct ParallelSizes {
  int32_t gpus = 1;
  int32_t expert_parallel = 0;  // 0: = gpus
  int32_t data_parallel = 1;
  int32_t tensor_parallel = 1;
};

// The sizes implemented: gpus >= 1, EP = gpus (0 = default), DP = 1 or gpus, TP = 1 or gpus, not DP and TP both;
// a clear error otherwise. env: the torchrun variables as read from the environment, checked by
// parallel::parse_launch_env (local_gpus: the visible devices, < 0 = unknown). A launch of one process per rank
// (WORLD_SIZE > 1) is taken only where the runner runs it (process_per_rank: the cpu backend), with --gpus equal to
// WORLD_SIZE and no DP attention; refused by name otherwise (the cuda backend). Returns the EP size.
Result<int32_t> validate_parallel(const ParallelSizes& s, const std::map<std::string, std::string>& env,
                                  int32_t local_gpus, bool process_per_rank = false);

// The layout of a validated plan, decided here only: kExpertParallel (DP = TP = 1: attention and state replicated,
// the MoE output all-reduced), kDataParallel (--data-parallel-size = --gpus > 1: each rank its own sequences and
// state, routed tokens dispatched to the experts' ranks and combined back) or kTensorParallel
// (--tensor-parallel-size = --gpus > 1: each rank 1/N of the query heads, the state replicated, the attention
// output all-reduced as well as the MoE's).
enum class Layout { kExpertParallel, kDataParallel, kTensorParallel };
Layout layout_of(const ParallelSizes& s);
const char* layout_name(Layout l);
const char* layout_flags(Layout l);  // what selects it: "default", "--data-parallel-size N", "--tensor-parallel-size N"

// Routed experts [lo, hi) of rank `rank` of `world`.
struct ExpertRange {
  int32_t lo = 0, hi = 0;
  int32_t count() const { return hi - lo; }
  bool contains(int64_t e) const { return e >= lo && e < hi; }
};
// experts % world == 0 is required (an even split; a clear error names both numbers otherwise).
Result<ExpertRange> expert_range(int64_t experts, int32_t rank, int32_t world);
// Query heads [lo, hi) of rank `rank` of `world` under tensor parallelism: contiguous, [r*H/N, (r+1)*H/N), so an
// even split when heads % world == 0 (every released model: 64 or 128 heads, 8 or 16 output groups); with more
// ranks than heads some ranks hold none (the small test models).
using HeadRange = ExpertRange;
Result<HeadRange> head_range(int64_t heads, int32_t rank, int32_t world);
// True when every rank's head_range holds whole output groups (heads / groups heads each; a rank may hold none):
// the exact TP output projection (--batch-invariant) then gathers the groups' wo_a outputs, else the heads' outputs.
bool heads_in_whole_groups(int64_t heads, int64_t groups, int32_t world);

// Bytes of one tensor in its official storage format (FP4 with E8M0 per 32, FP8 with one scale per 128x128 block,
// BF16, F32 vectors / tables).
double storage_bytes(const model::TensorSpec& spec);

// Per-rank memory of expert parallelism over `world` GPUs: every dense weight (attention, mHC, router, shared
// expert, embedding, head) replicated, 1/world of the routed experts, and the headroom kept for state and scratch.
// EPLB (parallel/eplb.h): `redundant` extra expert slots over all ranks, so a rank holds (E + redundant) / world
// experts' worth of every MoE layer.
struct RankMemory {
  double dense_bytes = 0;    // replicated weights
  double expert_bytes = 0;   // this rank's routed experts
  // Not weights (0 unless the caller counts them: rank_state_bytes, step_activation_bytes): the state cache this
  // rank holds and one step's activations on it.
  double state_bytes = 0;
  double activation_bytes = 0;
  double weight_bytes() const { return dense_bytes + expert_bytes; }
  double total_bytes() const { return weight_bytes() + state_bytes + activation_bytes; }
};
// `bytes`: a tensor's size (default: V4's storage_bytes; model::official_storage_bytes_v41 for V4.1).
RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, int32_t world, int32_t redundant = 0,
                       double (*bytes)(const model::TensorSpec&) = storage_bytes);
// The state one rank holds of a state budget of `budget_bytes` (the engine's StateCache: slots and blocks of every
// sequence): EP and TP replicate it (every rank runs attention for every sequence), DP splits it (each rank its own
// sequences: budget / world).
double rank_state_bytes(Layout layout, int32_t world, double budget_bytes);
// One step's activations on one rank (docs/multi_gpu.md "Fit check"): the forward's largest live buffers, fp32,
// for a step of `tokens` tokens (--max-num-batched-tokens) with `logit_rows` rows of logits: the residual streams,
// the sublayer input and output, then the larger of the attention buffers (queries and outputs of this rank's heads,
// the latent, compressor and indexer projections, the grouped output) and the MoE's (the partial output; the pair
// outputs with `exact`, EP / TP under --batch-invariant; DP: the dispatched pairs, a balanced share of every rank's),
// plus the logits. DP ranks run ceil(tokens / world) tokens' attention, TP ranks 1/world of the heads. An estimate
// of the reference forward's buffers, not a measured peak of a device allocator.
struct StepShape {
  int64_t tokens = 2048;
  int64_t logit_rows = 256;
  bool exact = false;
};
double step_activation_bytes(const io::ModelConfig& cfg, Layout layout, int32_t world, const StepShape& step);
// Fraction of a GPU's free memory the weights (and the state and activations, where counted) may take: the rest
// (8%) is left for the allocator, other scratch and the CUDA graphs (the single-GPU runner's rule since it first
// refused models).
inline constexpr double kWeightFraction = 0.92;
// ok when the rank's total (weights + state + activations) fits in kWeightFraction of free_bytes; else "needs X GiB
// of weights per GPU (and S GiB of state + A GiB of step activations), Y GiB free on GPU k" with the advice to use
// more GPUs or fewer layers (or a smaller state budget / step).
Status check_rank_fits(const RankMemory& m, int32_t world, int32_t gpu, int64_t free_bytes, const std::string& gpu_name);

// The layout choice of `dsinfer plan` (docs/multi_gpu.md "Choosing a layout"): for one decode step of `batch`
// sequences (one new token each) of `context` tokens over `gpus` GPUs, each layout's per-GPU communication, its
// attention work per rank (weights read, state read, FLOPs) and the sequences that fit; a step-time estimate of the
// parts that differ between layouts (the routed experts' work is the same in all three: EP over every GPU) picks
// the layout among those the batch fits in. The hardware figures are H200 + NVLink defaults.
struct Hardware {
  double hbm_bytes_per_s = 4.8e12;   // H200 HBM3e
  double flops_per_s = 989e12;       // dense bf16 tensor cores
  double link_bytes_per_s = 450e9;   // NVLink 4, per GPU and direction
  double collective_s = 10e-6;       // one small collective (latency floor, graph-captured)
};
struct LayoutEstimate {
  Layout layout = Layout::kExpertParallel;
  bool fits = false;             // the batch fits in the state (sequences_fit >= batch)
  int64_t sequences_fit = 0;     // all GPUs together
  int64_t seqs_per_rank = 0;     // the batch's sequences a rank runs attention for (DP: ceil(batch / N))
  int64_t collectives = 0;       // per step
  double comm_bytes = 0;         // sent per GPU per step
  double attn_weight_bytes = 0;  // attention weights one rank reads per step
  double attn_state_bytes = 0;   // state one rank reads per step (window, selected and indexed entries)
  double attn_flops = 0;         // one rank's attention FLOPs per step (projections + scores)
  double comm_ms = 0, attn_ms = 0;
  double step_ms() const { return comm_ms + attn_ms; }
};
struct LayoutChoice {
  std::vector<LayoutEstimate> options;  // EP, DP, TP (gpus > 1; only EP for one GPU)
  int32_t best = -1;                    // index into options; -1: the batch fits in no layout
  std::string reason;                   // one sentence: why best wins (or why nothing fits)
};
// seqs_per_gpu: sequences of `context` tokens one GPU's state holds (dsinfer plan's sizing; 0 = the weights do not
// fit); seqs_per_gpu_dp: the same for a DP rank (its share of the step's activations is smaller; < 0: seqs_per_gpu).
// specs / bytes: the model's tensors and their storage size (as rank_memory).
LayoutChoice choose_layout(const io::ModelConfig& cfg, const std::vector<model::TensorSpec>& specs,
                           double (*bytes)(const model::TensorSpec&), int32_t gpus, int64_t batch, int64_t context,
                           int64_t seqs_per_gpu, int64_t seqs_per_gpu_dp = -1, const Hardware& hw = {});

}  // namespace dsinfer::parallel
