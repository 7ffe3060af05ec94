// Roofline cost model of one DeepSeek-V4 forward step: for every named op of a layer (the same names the CUDA
// runner times), the minimum bytes that must move through HBM and the FLOPs that must run, given the config, the
// step shape (sequences x new tokens each, context per sequence) and the storage formats. floor =
// max(bytes / bandwidth, flops / peak) with the ceilings measured in the same process (perf/ceilings.h).
// What counts (docs/kernels.md, "Roofline floors"): weights touched read once, state rows in their storage format,
// the bf16 residual stream in and out of each layer, the logits out, causal FLOPs of the keys attended; never the
// traffic of our own intermediates.
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

// Device ceilings. The defaults are the H200 datasheet (dense, no sparsity); `dsinfer bench` measures them at start
// (perf/ceilings.h) unless asked for the nominal ones.
struct Ceilings {
  double hbm_bytes_per_s = 4.8e12;   // HBM3e (measured: device-to-device copy, read + write)
  double bf16_flops = 989e12;        // dense bf16 (measured: cuBLASLt GEMM 8192^3, random data)
  double fp8_flops = 1979e12;        // dense FP8 (measured: cuBLASLt per-tensor-scaled GEMM 8192^3)
  double link_bytes_per_s = 450e9;   // NVLink 4 per GPU and direction (nominal; all-reduce bus bandwidth)
  std::string source = "nominal";    // "nominal" or "measured"
};

struct OpCost {
  std::string name;
  int64_t layer = -1;   // -1 = not per layer (embed, head)
  double bytes = 0, flops = 0;
  bool fp8_math = false;  // weights in FP8/FP4: the FP8 tensor-core peak bounds the math
  bool link = false;      // bytes cross NVLink (an all-reduce), bounded by Ceilings::link_bytes_per_s
  double floor_s(const Ceilings& c) const;
};

// Storage sizes. Weights per element: FP8 = 1 byte + a 1-byte scale per 128x128 block, FP4 = 0.5 byte + an E8M0 scale per
// 32, BF16 = 2. State per stored row (V4): the main KV row (compressed entries and window ring alike) and the
// indexer key row; the defaults are the official FP8 profile (fp8_ds_mla: 448 e4m3 NoPE + 64 bf16 RoPE dims +
// 7 UE8M0 scales padded to 8 = 584 B; indexer keys 128 e4m3 + an fp32 scale = 132 B); state_rows() gives them for
// the bf16 / fp32 rows of the runners.
struct WeightBytes {
  double dense = 1.0 + 1.0 / (128 * 128);  // attention projections, shared experts (FP8 block)
  double expert = 0.5 + 1.0 / 32;          // routed experts (FP4 + E8M0 per 32)
  double other = 2.0;                      // embeddings, head, gates, compressors (BF16)
  double kv_row = 584;                     // V4: bytes per main KV row (head_dim 512)
  double index_row = 132;                  // V4: bytes per indexer key row (index_head_dim 128)
  double state = 4.0;                      // V4.1 (cost_model_v41.cpp): bytes per state element
};

// The state profiles a floor can assume: "fp8" (official, the defaults above), "bf16" or "fp32" rows of
// head_dim / index_head_dim elements (the runners' kv_elem_bytes). An error names an unknown profile.
Result<WeightBytes> state_profile(const io::ModelConfig& cfg, const std::string& profile);

// The expected number of distinct routed experts that T tokens hit when each picks k of E distinct experts
// uniformly: E * (1 - (1 - k/E)^T).
double expected_experts_hit(double E, double k, double T);

std::vector<OpCost> step_costs(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers);
// DeepSeek-V4.1 (cost_model_v41.cpp; step_costs dispatches to it for a V4.1 config).
std::vector<OpCost> step_costs_v41(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers);

}  // namespace dsinfer::perf
