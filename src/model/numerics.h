// Numerics profiles: where official DeepSeek inference and transformers differ. Backend-neutral: the CPU
// reference and the CUDA backend both read it.
#pragma once
#include <string>

#include "core/status.h"

namespace dsinfer::model {

// Where official DeepSeek inference and transformers differ (architecture notes §13). `official` is the
// default; `hf` reproduces transformers 5.17 (the fixtures' reference); `hf-noqat` is `hf` with DeepSeek-V4.1's
// QAT quantizers switched off (the fixtures' reference_noqat.safetensors).
struct Numerics {
  std::string name = "official";
  bool kv_fp8_sim = true;           // FP8 e4m3 1x64 simulation of the stored KV's non-RoPE dims
  bool indexer_fp4_sim = true;      // Hadamard + FP4 e2m1 1x32 simulation of indexer queries and keys
  bool shared_expert_clamp = true;  // SwiGLU clamp on the shared expert (current official, transformers 5.17)
  float router_norm_eps = 0.0f;     // routing-weight renormalization epsilon (transformers: 1e-20)
  // DeepSeek-V4.1 (its QAT quantizers are part of the model in both official code and transformers):
  bool qat_sim = true;              // window-KV FP8/32, compressed-KV FP4/16 and indexer FP4/32 quantizers (off: hf-noqat)
  bool bf16_activations = true;     // official numerics: bf16 activations, FP8 1x32 activation quant, bf16 indexer
  static Numerics official();
  static Numerics hf();
  static Numerics hf_noqat();
  static Result<Numerics> from_name(const std::string& name);
};

}  // namespace dsinfer::model
