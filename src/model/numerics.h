// Numerics profiles: where official DeepSeek inference and transformers differ. Backend-neutral: the CPU
// reference and the CUDA backend both read it.
#pragma once
#include <string>

#include "core/status.h"

namespace dsinfer::model {

// Where official DeepSeek inference and transformers differ (architecture notes §13). `official` is the
// default; `hf` reproduces transformers 5.17 (the fixtures' reference).
struct Numerics {
  std::string name = "official";
  bool kv_fp8_sim = true;           // FP8 e4m3 1x64 simulation of the stored KV's non-RoPE dims
  bool indexer_fp4_sim = true;      // Hadamard + FP4 e2m1 1x32 simulation of indexer queries and keys
  bool shared_expert_clamp = true;  // SwiGLU clamp on the shared expert (current official, transformers 5.17)
  float router_norm_eps = 0.0f;     // routing-weight renormalization epsilon (transformers: 1e-20)
  static Numerics official();
  static Numerics hf();
  static Result<Numerics> from_name(const std::string& name);
};

}  // namespace dsinfer::model
