// DeepSeek-V4.1 weights for the CPU reference, dequantized to fp32 (research/dsv41-architecture.md §3). Names
// are the official ones; the transformers-saved form (`model.` prefix, `lm_head`, `weight_scale_inv`) maps onto
// them through model::canonical_tensor_name. Storage formats: F32 / BF16 / F16, FP8 e4m3 with UE8M0 block scales
// (quantization_config.weight_block_size, 32x32 for the release), FP4 e2m1 experts (packed [out, in/2], one
// scale per 32 inputs), and Engram tables in FP8 e4m3 rows with one scale per 32 channels. The DSpark (`mtp.*`)
// and vision (`vision.*`, `aligner.*`, `image_*`) tensors belong to other modules and are skipped. (Separate
// from model/weights.* for now; to be folded into its typed per-layer tensor table.)
#pragma once
#include <optional>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace dsinfer::model {

struct EngramWeights {
  Mat table;  // [rows, engram_head_dim]
  Mat wkv;    // [(n + 1) * D, cols * engram_head_dim]: n keys, then the value
  Vec qk;     // [n * D] = q_weight * k_weight (only the product is used)
};

struct LayerWeightsV41 {
  Vec attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  Vec attn_sink;         // [H]
  Mat wq_a, wq_b, wkv;   // [q_lora, D], [H*hd, q_lora], [hd, D]
  Vec q_norm, kv_norm;   // [q_lora], [hd]
  Mat wo_a, wo_b;        // [g*r, H*hd/g], [D, g*r]
  // KV source: compressor (wgate only for ratio > 1) and indexer keys.
  Mat comp_wkv, comp_wgate;  // [hd, D]
  Vec comp_norm;             // [hd]
  Mat idx_wk;                // [di, hd]
  Vec idx_k_norm;            // [di]
  // Index source: queries and head weights.
  Mat idx_wq_b;              // [Hi*di, q_lora]
  Mat idx_weights_proj;      // [Hi, D]
  Mat gate;                  // [E, D], divided by gate_temp
  Vec gate_bias, gate_bias_vl;  // [E]; bias_vl empty when the checkpoint has none
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
  std::optional<EngramWeights> engram;
};

struct WeightsV41 {
  Mat embed, head;  // [V, D]
  Vec norm;         // [D]
  std::vector<LayerWeightsV41> layers;
  bool fp32_storage = true;
};

// Every tensor of a V4.1 backbone (official names, logical [rows, cols]; layer and routed-expert ids set).
std::vector<TensorSpec> weight_specs_v41(const io::ModelConfig& cfg);
// The release's storage format of a V4.1 backbone tensor (research dsv41 section 3; the one decision behind
// official_storage_bytes_v41 and the checkpoint writer, model/export_v41.h): dense FP8 e4m3 with an E8M0 scale per
// 32x32 block (attention projections, indexer wq_b, shared experts, Engram wkv), routed experts packed FP4 with an
// E8M0 scale per 32 inputs, Engram tables FP8 rows with an E8M0 scale per 32 channels, mHC mixes / sinks / router
// biases F32, everything else BF16.
enum class StorageV41 { Fp8Block32, Fp4Row32, Fp8Row32, F32, BF16 };
StorageV41 storage_format_v41(const TensorSpec& spec);
// Bytes of a V4.1 backbone tensor in its official storage format (storage_format_v41).
double official_storage_bytes_v41(const TensorSpec& spec);
// Whether the tensor is an Engram table (`engram.embed.weight` / `.scale`): the rows a lookup gathers.
bool is_engram_table(const TensorSpec& spec);
struct StoredTensorV41;
// Validates the checkpoint against the config (all problems reported together) and dequantizes it. With
// stored_tables, the Engram tables are not decoded (their Mats keep the shape and no data) and their validated
// views are put there instead, in layer order (the host placement, model/engram_rows.h).
Result<WeightsV41> load_weights_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                    std::vector<StoredTensorV41>* stored_tables = nullptr);

// A validated V4.1 checkpoint tensor in its storage format: views into the memory-mapped files, nothing decoded.
// block: the FP8 scale block (rows x cols of one scale: quantization_config's for dense weights, 1 x 32 for an
// Engram table); FP4 experts always have one scale per 32 inputs of a row.
struct StoredTensorV41 {
  TensorSpec spec;  // official name, logical [rows, cols], layer / expert
  const io::TensorView* data = nullptr;
  const io::TensorView* scale = nullptr;  // FP8 / FP4 scales, else null
  int64_t block_n = 0, block_k = 0;
};
// Checks the checkpoint exactly as load_weights_v41 does (every problem reported together) without converting
// anything; the CUDA backend uploads these as stored, streamed from the mapping.
Result<std::vector<StoredTensorV41>> resolve_weights_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);
// The checkpoint of a V4.1 model folder: a single model.safetensors is opened by name (the fixtures keep reference
// logits beside it), else every shard named by model.safetensors.index.json / the folder's .safetensors files.
Result<io::Checkpoint> open_checkpoint_v41(const std::string& model_dir);

}  // namespace dsinfer::model
