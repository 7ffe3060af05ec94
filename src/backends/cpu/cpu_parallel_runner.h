// N ranks of the CPU reference in one process (docs/multi_gpu.md "Several ranks without several GPUs"): the
// multi-rank code (expert split, collectives, fault handling) checked in CI without a GPU. Each rank is a
// CpuRunner on its own worker thread (parallel::ShardPool) with its own copy of the model, computing the routed
// experts [r*E/N, (r+1)*E/N) (rank 0 also the shared expert); each MoE layer's partial outputs are summed by the
// in-process communicator in a fixed rank order. Attention and state are replicated; rank 0's logits are returned.
// DP attention (--data-parallel-size N, docs/multi_gpu.md "DP attention + EP"): each rank holds 1/N of the state's
// slots and blocks (the scheduler's StateCache split by set_ranks) and runs its own sequences' part of each step;
// every MoE layer sends the routed pairs to the experts' ranks and combines them back (parallel/expert_dispatch.h),
// every rank computing the shared expert of its tokens. Snapshots and the host tier are one pool for all ranks.
// TP attention (--tensor-parallel-size N, docs/multi_gpu.md "TP attention"): as EP (state replicated, experts
// split), and each rank runs the query heads parallel::head_range gives it; the partial attention outputs are
// summed in rank order as the MoE's are.
// --batch-invariant (EP, TP): N ranks give one rank's bits. No rank rounds a partial sum: each MoE layer gathers
// every (token, top-k slot) pair's expert output exactly (parallel::gather_pair_outputs) and every rank combines
// them in the one-rank order; TP gathers the per-group wo_a outputs (model::HeadShard's exact way) and runs wo_b
// whole on every rank. DeepSeek-V4.1's TP always takes the exact way.
// A failure on any rank (load, step, an exception) aborts the group, so no rank hangs, and ends the runner: every
// later call returns "rank R failed: <cause>" (health()).
// One process per rank (docs/multi_gpu.md "Bootstrap", vLLM's external launcher): every process runs the same
// engine on the same requests and its runner holds one rank (EP or TP), its collectives going through the socket
// communicator. The head is replicated and every all-reduce gives every rank the same bits, so every process ends
// each step with the same logits and samples the same tokens; an all-gather of each step's plan hash checks that
// the processes agree (a rank that differs ends the group naming it and the step).
#pragma once
#include <memory>
#include <optional>

#include "parallel/bootstrap.h"

#include "runner/model_runner.h"

namespace dsinfer::backends {

// opts.gpus ranks (> 1) of opts.model_dir (n_routed_experts % ranks == 0): DeepSeek-V4 and V4.1 in every layout.
// With `launch` (torchrun variables, one process per rank; EP or TP): this process holds rank launch->rank only,
// joined to the other processes by the socket communicator (parallel/socket_comm.h).
Result<std::unique_ptr<runner::ModelRunner>> create_cpu_parallel_runner(
    const runner::RunnerOptions& opts, const std::optional<parallel::LaunchEnv>& launch = std::nullopt);

}  // namespace dsinfer::backends
