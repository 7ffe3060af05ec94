// Multi-GPU plan of one process (docs/multi_gpu.md): the parallel sizes asked for (--gpus, --expert-parallel-size,
// --data-parallel-size, --tensor-parallel-size) checked against what is implemented (EP = N, DP = 1 or N, TP = 1,
// one node), each rank's expert range, and the per-rank memory sizing that decides whether a model fits (the one
// source of truth of the CUDA runner's "does not fit" refusal). Host code, no CUDA.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "model/tensor_table.h"

namespace dsinfer::parallel {

struct ParallelSizes {
  int32_t gpus = 1;
  int32_t expert_parallel = 0;  // 0: = gpus
  int32_t data_parallel = 1;
  int32_t tensor_parallel = 1;
};

// The sizes implemented: gpus >= 1, EP = gpus (0 = default), DP = 1 or gpus, TP = 1; a clear error otherwise.
// env: the torchrun variables (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) as read from the
// environment; a WORLD_SIZE larger than local_gpus (the visible devices; < 0 = unknown) is a multi-node launch,
// which is not implemented yet. Returns the EP size.
Result<int32_t> validate_parallel(const ParallelSizes& s, const std::map<std::string, std::string>& env,
                                  int32_t local_gpus);
// The torchrun variables of the current process environment (only those set).
std::map<std::string, std::string> torchrun_env();

// The layout of a validated plan, decided here only: kExpertParallel (--data-parallel-size 1: attention and state
// replicated, the MoE output all-reduced) or kDataParallel (--data-parallel-size = --gpus > 1: each rank its own
// sequences and state, routed tokens dispatched to the experts' ranks and combined back).
enum class Layout { kExpertParallel, kDataParallel };
Layout layout_of(const ParallelSizes& s);
const char* layout_name(Layout l);

// Routed experts [lo, hi) of rank `rank` of `world`.
struct ExpertRange {
  int32_t lo = 0, hi = 0;
  int32_t count() const { return hi - lo; }
  bool contains(int64_t e) const { return e >= lo && e < hi; }
};
// experts % world == 0 is required (an even split; a clear error names both numbers otherwise).
Result<ExpertRange> expert_range(int64_t experts, int32_t rank, int32_t world);

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
  double weight_bytes() const { return dense_bytes + expert_bytes; }
};
// `bytes`: a tensor's size (default: V4's storage_bytes; model::official_storage_bytes_v41 for V4.1).
RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, int32_t world, int32_t redundant = 0,
                       double (*bytes)(const model::TensorSpec&) = storage_bytes);
// Fraction of a GPU's free memory the weights may take: the rest (8%) is left for the state cache, the step's
// scratch and the CUDA graphs (the single-GPU runner's rule since it first refused models).
inline constexpr double kWeightFraction = 0.92;
// ok when the rank's weights fit in kWeightFraction of free_bytes; else "needs X GiB per GPU, Y GiB free on GPU k"
// with the advice to use more GPUs or fewer layers.
Status check_rank_fits(const RankMemory& m, int32_t world, int32_t gpu, int64_t free_bytes, const std::string& gpu_name);

}  // namespace dsinfer::parallel
