// Drafter weights for the CPU reference, dequantized to fp32 (model/weights.h structs): the DSpark drafter
// (`mtp.{0..N-1}.*` of the main checkpoint) and the MTP-1 baseline (`mtp.0.*` of mtp1/model.safetensors), plus
// the target's embedding and head which both drafters share. Names and storage formats: docs/small_model.md.
// The main model loader skips `mtp.*`; this is their one loader. Every expected tensor is checked (shape, a weight
// storage format) and every unexpected `mtp.*` tensor of the file is reported, all problems together.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "model/weights.h"
#include "speculative/draft_config.h"

namespace dsinfer::speculative {

struct DsparkWeights {
  std::vector<model::LayerWeights> layers;  // sliding-window, score-routed MoE decoder layers
  model::Mat main_proj;                     // [D, m*D] context combiner (m = number of target layers)
  model::Vec main_norm;                     // [D]
  model::HcWeights hc_head;                 // of the last drafter layer
  model::Vec norm;                          // [D]
  model::Mat markov_embed;                  // W1 [V, r]
  model::Mat markov_head;                   // W2 as a linear r -> V: [V, r]
  model::Vec confidence_w;                  // [D + r]
  float confidence_b = 0.0f;
  bool v41 = false;                         // DeepSeek-V4.1 layout: no hc_head (hb = the last ffn pre's collapse)
};

struct Mtp1Weights {
  model::LayerWeights layer;
  model::Mat e_proj, h_proj;  // [D, D]
  model::Vec enorm, hnorm, norm;
  model::HcWeights hc_head;
};

struct SharedWeights {
  model::Mat embed, head;  // [V, D], the target's
};

// The drafters' layer config: the target's dimensions with the DSpark expert count and window.
io::ModelConfig draft_layer_config(const io::ModelConfig& target, const DraftConfig& dc);

Result<SharedWeights> load_shared_weights(const io::ModelConfig& target, const std::string& model_dir);
// The V4 drafter (`mtp.N.hc_head_*`, confidence_head weight + bias); refuses a V4.1 target.
Result<DsparkWeights> load_dspark_weights(const io::ModelConfig& target, const DraftConfig& dc,
                                          const std::string& model_dir);
// DeepSeek-V4.1's drafter (research/dsv41-architecture.md §2.9): the same sliding-window MoE layers (128 experts,
// top-3, router logits / gate_temp, an optional unused `ffn.gate.bias_vl`), stage 0's main_proj / main_norm, the
// last stage's norm, markov_head.{embed,head} and a bias-free confidence_head.proj [1, D + r]; no hc_head.
Result<DsparkWeights> load_dspark_weights_v41(const io::ModelConfig& target, const DraftConfig& dc,
                                              const std::string& model_dir);
// Reads model_dir/<dc.mtp1_file> (default mtp1/model.safetensors).
Result<Mtp1Weights> load_mtp1_weights(const io::ModelConfig& target, const DraftConfig& dc, const std::string& model_dir);

}  // namespace dsinfer::speculative
