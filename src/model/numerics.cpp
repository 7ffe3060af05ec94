// Numerics profiles (see numerics.h).
#include "model/numerics.h"

namespace dsinfer::model {

Numerics Numerics::official() { return Numerics{}; }

Numerics Numerics::hf() {
  Numerics n;
  n.name = "hf";
  n.kv_fp8_sim = false;
  n.indexer_fp4_sim = false;
  n.shared_expert_clamp = true;  // transformers 5.17 DeepseekV4MLP clamps (the older revision did not)
  n.router_norm_eps = 1e-20f;
  n.bf16_activations = false;
  return n;
}

Numerics Numerics::hf_noqat() {
  Numerics n = hf();
  n.name = "hf-noqat";
  n.qat_sim = false;
  return n;
}

Result<Numerics> Numerics::from_name(const std::string& name) {
  if (name == "official") return official();
  if (name == "hf") return hf();
  if (name == "hf-noqat") return hf_noqat();
  return Status::errorf("unknown numerics profile '{}' (expected 'official', 'hf' or 'hf-noqat')", name);
}

}  // namespace dsinfer::model
