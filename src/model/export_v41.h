// Writing a DeepSeek-V4.1 checkpoint in the release's storage formats (storage_format_v41 in weights_v41.h: FP8
// e4m3 dense projections with E8M0 scales per 32x32 block, FP4 e2m1 routed experts with an E8M0 scale per 32 inputs,
// Engram tables as FP8 rows with an E8M0 scale per 32 channels, F32 / BF16 elsewhere), sharded with a
// model.safetensors.index.json, and its config.json carrying the release's quantization_config. Two sources of
// values: an existing V4.1 checkpoint (a fixture in any float format: the converter behind the real-format load
// tests, so the CPU runner on the written checkpoint is the reference) and random values at any shapes (a dummy
// checkpoint at V4.1-Flash shapes, for the memory check against `dsinfer plan`). The values are quantized with the
// official rule (io/quant.h), so what the writer stores is what both runners read back.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/tensor_table.h"

namespace dsinfer::model {

// Fills `out` (resized to rows * cols) with the fp32 values of one backbone tensor.
using TensorFillV41 = std::function<Status(const TensorSpec& spec, std::vector<float>& out)>;

// Values read by official name from a V4.1 checkpoint (any form load_weights_v41 accepts), decoded to fp32.
// The checkpoint must outlive the returned function.
TensorFillV41 checkpoint_fill_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);
// Random values: norm weights about 1, biases / sinks / mHC vectors small, matrices uniform with a spread of
// 1 / sqrt(cols) (activations stay O(1) through the layers); a tensor's values depend only on seed and its name.
TensorFillV41 random_fill_v41(uint64_t seed);

// Writes every tensor of weight_specs_v41(cfg) through `fill` into out_dir (created) in its official storage
// format, in shards of at most shard_bytes (a tensor larger than that gets a shard of its own), plus
// model.safetensors.index.json and config.json: config_json (the model's config as a JSON text) with the release's
// quantization_config set (fp8 e4m3, weight_block_size [32, 32], ue8m0 scales, expert_dtype fp4). cfg must be the
// config that text parses to. Tensors are filled and quantized on up to `threads` threads.
Status write_checkpoint_v41(const io::ModelConfig& cfg, const std::string& config_json, const TensorFillV41& fill,
                            const std::string& out_dir, int64_t shard_bytes = int64_t(1) << 30, int threads = 1);

// Converts the V4.1 model in model_dir (config.json, checkpoint, tokenizer files) into out_dir in the official
// storage formats: the tool behind the real-format load test.
Status convert_checkpoint_v41(const std::string& model_dir, const std::string& out_dir,
                              int64_t shard_bytes = int64_t(1) << 30, int threads = 1);

// A random-valued checkpoint (random_fill_v41(seed)) at the shapes of config_path (a config.json or the folder
// holding one) with `overrides` applied first: each "key=value" sets a field of the text config (the composite
// config's text_config, else the top level) to the JSON value (a bare word is taken as a string), e.g.
// num_hidden_layers=3 or engram_num_embeddings=[1048576]. The edited config is validated as any config.json is
// (io::load_model_config) before a tensor is written; an override that is not key=value is an error naming it.
Status write_random_checkpoint_v41(const std::string& config_path, const std::vector<std::string>& overrides,
                                   uint64_t seed, const std::string& out_dir, int64_t shard_bytes = int64_t(1) << 30,
                                   int threads = 1);

}  // namespace dsinfer::model
