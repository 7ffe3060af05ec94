// Fuzz target: config.json text -> ModelConfig (both the transformers and the official layouts), then the
// derived shapes every loader computes from it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/config.h"
#include "model/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  auto c = io::parse_model_config_json(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  if (!c.is_ok()) return 0;
  const io::ModelConfig& m = *c;
  if (m.layer_types.size() != size_t(m.num_hidden_layers) || m.compress_ratios.size() != size_t(m.num_hidden_layers) ||
      m.mlp_layer_types.size() != size_t(m.num_hidden_layers))
    std::abort();
  if (m.eos_token_id < 0 || m.eos_token_id >= m.vocab_size) std::abort();
  // Tensor specs: every shape product must be computable without overflow.
  if (m.num_hidden_layers <= 64 && m.n_routed_experts <= 64) {
    for (const model::TensorSpec& t : model::weight_specs(m))
      if (t.rows < 0 || t.cols < 0) std::abort();
  }
  return 0;
}
