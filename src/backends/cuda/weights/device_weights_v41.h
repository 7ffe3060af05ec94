// DeepSeek-V4.1 weights on the GPU for CudaForwardV41 (separate from the V4 DeviceWeights: V4.1 has its own tensor
// list, model/weights_v41.h). Two sources: a checkpoint uploaded in its storage formats (FP8 block-scaled dense
// projections, FP4 experts, FP8 Engram rows, BF16 / F32 as stored; a float fixture stays float, so check-reference's
// exact path is unchanged), streamed from the memory-mapped shards with no fp32 host copy; or dummy weights generated
// on the GPU in the official storage formats for benchmarks.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/weights/device_weights.h"  // HcDevice
#include "core/status.h"
#include "cuda/device_buffer.h"
#include "cuda/pinned_buffer.h"
#include "io/config.h"
#include "model/weights_v41.h"
#include "ops/engram/engram_launch.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"

namespace dsinfer::backends {

struct DeviceLayerV41 {
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *sink = nullptr, *q_norm = nullptr, *kv_norm = nullptr;
  HcDevice hc_attn, hc_ffn;
  ops::cuda::DeviceWeight wq_a, wq_b, wkv, wo_a, wo_b;
  // KV source: compressor (wgate for ratio > 1) and indexer keys; index source: queries and head weights.
  ops::cuda::DeviceWeight comp_wkv, comp_wgate, idx_wk, idx_wq_b, idx_wproj;
  const float *comp_norm = nullptr, *idx_k_norm = nullptr;
  ops::cuda::DeviceWeight gate;  // [E, D], already divided by gate_temp
  const float* gate_bias = nullptr;
  ops::cuda::MoeExpertsDevice experts;
  ops::cuda::MoeSharedDevice shared;
  // Engram (engram_layer_ids): the table, wkv, q_weight * k_weight [n * D].
  bool engram = false;
  ops::cuda::EngramTableDevice engram_table;
  ops::cuda::DeviceWeight engram_wkv;
  const float* engram_qk = nullptr;
};

class DeviceWeightsV41 {
 public:
  // Uploads the checkpoint in model_dir (validated by model::resolve_weights_v41: every problem reported together)
  // in its storage formats, read from the mapping in file order; the mapping is closed afterwards.
  // slots: the routed experts this rank holds, per layer (global ids; expert parallelism, device_weights.h
  // range_slots); the MoE's local expert i is slots[l][i]. Other ranks' experts are never read.
  // tables_on_host: the Engram tables go to pinned host memory instead (the host placement, model/engram_rows.h;
  // the gather kernel reads their rows over PCIe), as stored.
  Status load_checkpoint(const io::ModelConfig& cfg, const std::string& model_dir, const ExpertSlots& slots,
                         bool tables_on_host = false);
  // Random weights: FP8 (128x128 blocks, E8M0 scales) dense projections, FP4 experts, fp32 vectors / Engram tables;
  // fails clearly when they would not fit in free_bytes.
  // (Every expert's seeds are drawn whether held or not, so a rank's experts equal the one-GPU model's.)
  Status generate_dummy(const io::ModelConfig& cfg, int64_t free_bytes, const std::string& gpu_name, void* stream,
                        const ExpertSlots& slots, bool tables_on_host = false);

  const ops::cuda::DeviceWeight& embed() const { return embed_; }
  const ops::cuda::DeviceWeight& head() const { return head_; }
  const float* final_norm() const { return final_norm_; }
  const DeviceLayerV41& layer(int64_t l) const { return layers_[size_t(l)]; }
  int64_t bytes() const { return bytes_; }        // device memory
  int64_t host_bytes() const { return host_bytes_; }  // pinned host memory (the Engram tables when placed there)
  bool fp32_storage() const { return fp32_storage_; }

 private:
  // device_weights_v41_cuda.cpp: the checkpoint upload.
  struct ExpertViews {
    std::vector<ops::cuda::DeviceWeight> w[3];  // w1, w3, w2 per local slot
  };
  // Device memory of a checkpoint upload: one arena, sized by a dry run of the same code (dry: take() hands out
  // stand-in addresses and put() copies nothing). Without an arena, take() allocates a buffer of its own.
  struct Arena {
    uint8_t* base = nullptr;
    size_t used = 0, size = 0;
    bool dry = false;
    bool host = false;  // pinned host memory: put() is a plain copy
  };
  Result<uint8_t*> take(size_t bytes, const char* what);  // 256-byte aligned
  Status put(void* dst, const void* src, size_t bytes);
  Status upload_all(const io::ModelConfig& cfg, const std::vector<model::StoredTensorV41>& tensors,
                    const ExpertSlots& slots);
  // n float values (F32 / BF16 / F16) divided by div as an fp32 device array, converted in bounded host chunks.
  Result<const float*> floats(const io::TensorView& v, int64_t n, double div, const char* what);
  // A matrix as stored (F16 widened to fp32; BF16 scales to fp32).
  Result<ops::cuda::DeviceWeight> stored(const model::StoredTensorV41& t);
  Status bind(const io::ModelConfig& cfg, const model::StoredTensorV41& t, const ExpertSlots& slots,
              std::vector<ExpertViews>& experts, std::map<int64_t, const io::TensorView*>& engram_q);
  Status expert(const io::ModelConfig& cfg, const model::StoredTensorV41& t, const std::vector<int32_t>& held,
                ExpertViews& X);
  Status expert_arrays(const io::ModelConfig& cfg, int64_t l, const std::vector<int32_t>& held, const ExpertViews& X,
                       DeviceLayerV41& D);
  Status engram_table(const model::StoredTensorV41& t, DeviceLayerV41& D);
  Status engram_table_on_device(const model::StoredTensorV41& t, DeviceLayerV41& D);
  // dummy weights with tables_on_host: the generated table moved to pinned host memory, its device memory freed.
  Status table_to_host(ops::cuda::EngramTableDevice& t, void* stream);
  Status engram_qk(const io::TensorView& q, const io::TensorView& k, int64_t n, DeviceLayerV41& D);
  Status check_layer(const io::ModelConfig& cfg, int64_t l) const;
  Status pointer_array(const std::vector<const void*>& ptrs, const void* const*& out);
  // dummy_weights_v41_cuda.cpp
  // FP8 scales per block x block (block_rows > 0: per block_rows x block, e.g. one per 32 channels of a row).
  Result<ops::cuda::DeviceWeight> dummy_mat(int64_t rows, int64_t cols, ops::cuda::WeightFormat fmt, int64_t block,
                                            uint64_t seed, void* stream, int64_t block_rows = 0);
  Result<const float*> dummy_vec(int64_t n, float center, float spread, uint64_t seed, void* stream);
  Status dummy_layer(const io::ModelConfig& cfg, int64_t l, const std::vector<int32_t>& held, uint64_t& seed,
                     void* stream);
  Status dummy_experts(const io::ModelConfig& cfg, const std::vector<int32_t>& held, DeviceLayerV41& D, uint64_t& seed,
                       void* stream);

  std::vector<cuda::DeviceBuffer<uint8_t>> buffers_;
  Arena arena_;
  // The Engram tables' pinned host memory (tables_on_host): laid out by the same dry run as the device arena.
  bool tables_on_host_ = false;
  Arena host_arena_;
  std::vector<cuda::PinnedHostBuffer> host_buffers_;
  int64_t host_bytes_ = 0;
  ops::cuda::DeviceWeight embed_, head_;
  const float* final_norm_ = nullptr;
  std::vector<DeviceLayerV41> layers_;
  int64_t bytes_ = 0;
  bool fp32_storage_ = true;
};

}  // namespace dsinfer::backends
