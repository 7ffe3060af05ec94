// The model's weights on the GPU, kept in their storage formats and bound to typed per-layer slots by the roles of
// the tensor table (model/tensor_table.h): uploaded from a checkpoint validated by model::resolve_weights, or
// generated as dummy weights in the official formats (dummy_weights_cuda.h). Nothing here looks a tensor up by
// name; a slot left empty is an error naming the layer and role, never a null pointer at run time.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/device_buffer.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/tensor_table.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "parallel/parallel_plan.h"

namespace dsinfer::backends {

// One uploaded tensor: its device memory and, for matrices, the GEMM view of it.
struct DevTensor {
  cuda::DeviceBuffer<uint8_t> data, scale;
  ops::cuda::DeviceWeight w;
};

struct HcDevice {
  const float *fn = nullptr, *base = nullptr, *scale = nullptr;
};

struct DeviceLayer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *sink = nullptr, *q_norm = nullptr, *kv_norm = nullptr;
  HcDevice hc_attn, hc_ffn;
  ops::cuda::DeviceWeight wq_a, wq_b, wkv, wo_a, wo_b;
  ops::cuda::DeviceWeight comp_wkv, comp_wgate, idx_wq_b, idx_wproj, idx_wkv, idx_wgate;
  const float *comp_ape = nullptr, *comp_norm = nullptr, *idx_ape = nullptr, *idx_norm = nullptr;
  ops::cuda::DeviceWeight gate;
  const float* gate_bias = nullptr;
  const int32_t* tid2eid = nullptr;
  ops::cuda::MoeExpertsDevice experts;
  bool has_shared = false;
  ops::cuda::MoeSharedDevice shared;
};

// Routed-expert slots of one GPU per layer: slots[l][s] is the logical expert local slot s of layer l holds (plain
// expert parallelism: the range [lo, hi) in every layer; EPLB: parallel::Placement::rank_slots, docs/multi_gpu.md).
using ExpertSlots = std::vector<std::vector<int32_t>>;
ExpertSlots range_slots(int64_t layers, parallel::ExpertRange experts);

class DeviceWeights {
 public:
  // Expert parallelism: only the routed experts named in `slots` are uploaded / generated (the others are never
  // read from the mmapped checkpoint), each slot bound as local expert s of its layer (its own copy of the
  // tensors, even when a rank holds an expert twice). Uploads the checkpoint in model_dir (validated against the
  // tensor table first; kept mapped for EPLB's reloads).
  Status load_checkpoint(const io::ModelConfig& cfg, const std::string& model_dir, ExpertSlots slots);
  // Random weights in the official storage formats (the caller checked they fit: parallel::check_rank_fits).
  Status generate_dummy(const io::ModelConfig& cfg, ExpertSlots slots, void* stream);
  // EPLB rebalance: layer l's local slots now hold `slots` (same count). Each slot whose expert changed gets that
  // expert's tensors regenerated (dummy: the tensor's own seed, so replicas are identical) or re-uploaded from the
  // mapped checkpoint, then the layer's expert pointer arrays are rewritten. Call between steps with the stream
  // idle (the old tensors are freed). Returns the number of slots reloaded.
  Result<int32_t> reload_slots(const io::ModelConfig& cfg, int64_t layer, const std::vector<int32_t>& slots, void* stream);
  const std::vector<int32_t>& slots(int64_t layer) const { return slots_[size_t(layer)]; }

  const ops::cuda::DeviceWeight& embed() const { return embed_; }  // F32 or BF16 table [vocab, dim]
  const ops::cuda::DeviceWeight& head() const { return head_; }
  const float* final_norm() const { return final_norm_; }
  const HcDevice& hc_head() const { return hc_head_; }
  const DeviceLayer& layer(int64_t l) const { return layers_[size_t(l)]; }
  int64_t bytes() const { return bytes_; }
  bool fp32_storage() const { return fp32_storage_; }  // every float weight was stored as F32

 private:
  // Routed-expert views of one layer, by local slot, turned into device pointer arrays by expert_arrays().
  struct ExpertViews {
    std::vector<ops::cuda::DeviceWeight> w1, w3, w2;
  };
  // Where a routed expert's tensor comes from (for EPLB's reloads): the checkpoint's views, or a dummy seed.
  struct ExpertSource {
    model::TensorSpec spec;
    uint64_t seed = 0;
    const io::TensorView *data = nullptr, *scale = nullptr;
  };
  void start(const io::ModelConfig& cfg, ExpertSlots slots);
  Status add(const model::TensorSpec& spec, DevTensor t);
  Status bind(const model::TensorSpec& spec, const DevTensor& t);
  // A routed expert's tensor: recorded as the source of (layer, expert, role) and made for every slot holding it.
  Status add_expert(const io::ModelConfig& cfg, ExpertSource src, void* stream);
  Result<DevTensor> make_expert(const io::ModelConfig& cfg, const ExpertSource& src, void* stream) const;
  Status finish(const io::ModelConfig& cfg);
  Status expert_arrays(int64_t layer);
  Status expert_array(const std::vector<ops::cuda::DeviceWeight>& views, int64_t layer, model::TensorRole role,
                      cuda::DeviceBuffer<uint8_t>& buf, ops::cuda::DeviceExpertWeights& out);

  std::vector<DevTensor> tensors_;
  std::unique_ptr<io::Checkpoint> ckpt_;          // kept mapped: EPLB re-uploads experts from it
  std::vector<ExpertSource> sources_;             // [(layer * experts + expert) * 3 + w1/w3/w2]
  std::vector<DevTensor> expert_tensors_;         // [(layer * slots + slot) * 3 + w1/w3/w2]
  std::vector<cuda::DeviceBuffer<uint8_t>> pointer_arrays_;  // [layer * 3 + w1/w3/w2]
  std::vector<ExpertViews> expert_views_;
  ExpertSlots slots_;  // the logical expert of each local slot, per layer
  int64_t num_experts_ = 0;
  ops::cuda::DeviceWeight embed_, head_;
  const float* final_norm_ = nullptr;
  HcDevice hc_head_;
  std::vector<DeviceLayer> layers_;
  int64_t bytes_ = 0;
  bool fp32_storage_ = true;
};

}  // namespace dsinfer::backends
