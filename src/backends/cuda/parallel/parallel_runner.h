// ParallelRunner: DeepSeek-V4 on several GPUs of one node (docs/multi_gpu.md). One process, one persistent worker
// thread per GPU (parallel::ShardPool), each driving a CudaRunner shard bound to its device. Expert parallelism
// over all N GPUs: shard r holds the routed experts [r*E/N, (r+1)*E/N) and a replica of every dense weight. Two
// layouts (parallel::layout_of): EP, the state replicated, step() hands the same BatchPlan to every shard, each
// layer's MoE output is summed over the shards by an all-reduce, shard 0's logits are returned; DP attention
// (--data-parallel-size N), each shard its own sequences and 1/N of the state, step() splits the plan by rank
// (runner/rank_split.h), each MoE layer exchanges routed pairs (expert_exchange_cuda.cpp), the logits are gathered.
// The engine, scheduler and sampling see one runner. engine/runner_factory.cpp makes it for gpus > 1.
#pragma once
#include <memory>
#include <vector>

#include "runner/model_runner.h"

namespace dsinfer::backends {

// opts.gpus shards of the model (its config from cuda_model_config: cut to opts.num_layers, sizes checked).
Result<std::unique_ptr<runner::ModelRunner>> create_parallel_runner(const runner::RunnerOptions& opts);

}  // namespace dsinfer::backends
