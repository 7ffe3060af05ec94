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
  return n;
}

Result<Numerics> Numerics::from_name(const std::string& name) {
  if (name == "official") return official();
  if (name == "hf") return hf();
  return Status::errorf("unknown numerics profile '{}' (expected 'official' or 'hf')", name);
}

}  // namespace dsinfer::model
