// DeepSeek-V4 weights for the CPU reference: every tensor dequantized to fp32 (row-major, PyTorch [out, in]).
// Loading walks the tensor table (model/tensor_table.h), maps checkpoint names (official
// `layers.N.attn.wq_a.weight`, the transformers-saved form with a `model.` prefix, `embed_tokens`, `hc_head.hc_fn`,
// `attn.norm`, `weight_scale_inv`, `e_score_correction_bias`) onto the table's canonical (official) names, checks every expected tensor's shape and storage format (F32 / BF16 /
// F16 / FP8 e4m3 + 128x128 block scales / FP4 e2m1 + 1x32 E8M0 scales / I64 or I32 tables), and rejects
// missing or unexpected tensors with the tensor name and expected vs found.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/tensor_table.h"

namespace dsinfer::model {

struct Mat {
  std::vector<float> data;
  int64_t rows = 0, cols = 0;
  const float* p() const { return data.data(); }
};
using Vec = std::vector<float>;

struct CompressorWeights {
  Mat wkv, wgate;  // [c*d, D]
  Mat ape;         // [m, c*d]
  Vec norm;        // [d]
};

struct ExpertWeights {
  Mat w1, w3;  // [I, D]
  Mat w2;      // [D, I]
};

struct HcWeights {
  Mat fn;   // [(2+n)*n, n*D] (hc_head: [n, n*D])
  Vec base, scale;
};

struct LayerWeights {
  Vec attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  Vec attn_sink;                  // [H]
  Mat wq_a;                       // [q_lora, D]
  Vec q_norm;                     // [q_lora]
  Mat wq_b;                       // [H*hd, q_lora]
  Mat wkv;                        // [hd, D]
  Vec kv_norm;                    // [hd]
  Mat wo_a;                       // [g*r, H*hd/g]
  Mat wo_b;                       // [D, g*r]
  std::optional<CompressorWeights> compressor;      // CSA / HCA
  std::optional<CompressorWeights> idx_compressor;  // CSA
  Mat idx_wq_b;                   // [Hi*di, q_lora] (CSA)
  Mat idx_weights_proj;           // [Hi, D] (CSA)
  Mat gate;                       // [E, D]
  Vec gate_bias;                  // [E] (score-routed layers)
  std::vector<int32_t> tid2eid;   // [vocab, k] (hash layers)
  std::vector<ExpertWeights> experts;
  std::optional<ExpertWeights> shared;
};

struct Weights {
  Mat embed;  // [V, D]
  Mat head;   // [V, D]
  Vec norm;   // [D]
  HcWeights hc_head;
  std::vector<LayerWeights> layers;
  bool fp32_storage = true;  // every float weight was stored as F32 (no bf16/f16/fp8/fp4 rounding)
};

// Canonical name of a checkpoint tensor name, or "" when the tensor is deliberately ignored (MTP layers).
std::string canonical_tensor_name(const std::string& name);

// A validated checkpoint tensor in its storage format (views into the memory-mapped files).
struct ResolvedTensor {
  TensorSpec spec;
  const io::TensorView* data = nullptr;
  const io::TensorView* scale = nullptr;  // FP8 block / FP4 group scales, else null
};
// Checks the checkpoint against weight_specs(cfg) exactly as load_weights does (all problems reported
// together) without converting anything; the CUDA backend uploads these as stored.
Result<std::vector<ResolvedTensor>> resolve_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

Result<Weights> load_weights(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

}  // namespace dsinfer::model
