// Roofline cost model of one DeepSeek-V4 forward step: for every named op of a layer (the same names the CUDA
// runner times), the bytes that must move through HBM and the FLOPs that must run, given the config, the step
// shape (sequences x new tokens each, context per sequence) and the weight storage formats. floor =
// max(bytes / bandwidth, flops / peak) with the H200 ceilings measured here (shared/PERFORMANCE.md).
#pragma once
#include <string>
#include <vector>

#include "io/config.h"

namespace dsinfer::perf {

struct StepShape {
  int64_t seqs = 1;            // sequences in the step
  int64_t tokens_per_seq = 1;  // new tokens per sequence (1 = decode)
  int64_t context = 4096;      // positions already in the state per sequence (plus the new ones)
  int64_t logits_rows = -1;    // rows of the LM head; -1 = seqs
  // Expert parallelism over this many GPUs (docs/multi_gpu.md): the floors are per GPU (rank 0, which also runs
  // the shared expert): 1/N of the routed-expert reads and math, and the MoE all-reduce over NVLink.
  int64_t expert_parallel = 1;
};

struct Ceilings {
  double hbm_bytes_per_s = 4.2e12;   // device copy, read + write
  double bf16_flops = 780e12;        // dense bf16 GEMM 8192^3
  double fp8_flops = 1400e12;        // FP8 GEMM 8192^3
  double link_bytes_per_s = 450e9;   // NVLink 4 per GPU and direction (nominal; all-reduce bus bandwidth)
};

struct OpCost {
  std::string name;
  int64_t layer = -1;   // -1 = not per layer (embed, head)
  double bytes = 0, flops = 0;
  bool fp8_math = false;  // weights in FP8/FP4: the FP8 tensor-core peak bounds the math
  bool link = false;      // bytes cross NVLink (an all-reduce), bounded by Ceilings::link_bytes_per_s
  double floor_s(const Ceilings& c) const;
};

// Weight element sizes of the storage: FP8 = 1 byte + scales, FP4 = 0.5 byte + 1/32 byte scales, BF16 = 2.
struct WeightBytes {
  double dense = 1.0 + 1.0 / (128 * 128);  // attention projections, shared experts (FP8 block)
  double expert = 0.5 + 1.0 / 32;          // routed experts (FP4 + E8M0 per 32)
  double other = 2.0;                      // embeddings, head, gates, compressors (BF16)
  double state = 4.0;                      // per element of ring / compressed entries / indexer keys
};

std::vector<OpCost> step_costs(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers);
// DeepSeek-V4.1 (cost_model_v41.cpp; step_costs dispatches to it for a V4.1 config).
std::vector<OpCost> step_costs_v41(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers);

}  // namespace dsinfer::perf
