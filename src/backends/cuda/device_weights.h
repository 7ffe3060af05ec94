// The model's weights on the GPU, kept in their storage formats and bound to typed per-layer slots by the roles of
// the tensor table (model/tensor_table.h): uploaded from a checkpoint validated by model::resolve_weights, or
// generated as dummy weights in the official formats (dummy_weights_cuda.h). Nothing here looks a tensor up by
// name; a slot left empty is an error naming the layer and role, never a null pointer at run time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/device_buffer.h"
#include "io/config.h"
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

class DeviceWeights {
 public:
  // Expert parallelism: only the routed experts in `experts` are uploaded / generated (the others are never read
  // from the mmapped checkpoint), bound as local experts 0 .. experts.count() - 1; the default range is all.
  // Uploads the checkpoint in model_dir (validated against the tensor table first).
  Status load_checkpoint(const io::ModelConfig& cfg, const std::string& model_dir, parallel::ExpertRange experts);
  // Random weights in the official storage formats (the caller checked they fit: parallel::check_rank_fits).
  Status generate_dummy(const io::ModelConfig& cfg, parallel::ExpertRange experts, void* stream);

  const ops::cuda::DeviceWeight& embed() const { return embed_; }  // F32 or BF16 table [vocab, dim]
  const ops::cuda::DeviceWeight& head() const { return head_; }
  const float* final_norm() const { return final_norm_; }
  const HcDevice& hc_head() const { return hc_head_; }
  const DeviceLayer& layer(int64_t l) const { return layers_[size_t(l)]; }
  int64_t bytes() const { return bytes_; }
  bool fp32_storage() const { return fp32_storage_; }  // every float weight was stored as F32

 private:
  // Routed-expert views of one layer, gathered while binding and turned into device pointer arrays by finish().
  struct ExpertViews {
    std::vector<ops::cuda::DeviceWeight> w1, w3, w2;
  };
  void start(const io::ModelConfig& cfg, parallel::ExpertRange experts);
  Status add(const model::TensorSpec& spec, DevTensor t);
  Status bind(const model::TensorSpec& spec, const DevTensor& t);
  Status finish(const io::ModelConfig& cfg);
  Status expert_array(const std::vector<ops::cuda::DeviceWeight>& views, int64_t layer, model::TensorRole role,
                      ops::cuda::DeviceExpertWeights& out);

  std::vector<DevTensor> tensors_;
  std::vector<cuda::DeviceBuffer<uint8_t>> pointer_arrays_;
  std::vector<ExpertViews> expert_views_;
  parallel::ExpertRange experts_;  // the routed experts held here (global ids)
  ops::cuda::DeviceWeight embed_, head_;
  const float* final_norm_ = nullptr;
  HcDevice hc_head_;
  std::vector<DeviceLayer> layers_;
  int64_t bytes_ = 0;
  bool fp32_storage_ = true;
};

}  // namespace dsinfer::backends
