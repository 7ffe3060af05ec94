// Host-side decisions of the one CUDA runner about the config it runs (plain C++, unit-tested on the CPU:
// tests/unit/test_cuda_config.cpp): which numerics profile a family's GPU forward refuses, and the cut of a config to
// its first layers (--layers with dummy weights). cuda_model_config (cuda_runner_cuda.cpp) applies both.
#pragma once
#include <cstdint>
#include <string>

#include "io/config.h"
#include "model/numerics.h"

namespace dsinfer::backends {

// Empty when the config's family can run `num` on `gpus` GPUs; otherwise the refusal, naming the profile and the
// reason (a profile is never swapped for another). DeepSeek-V4.1 official numerics (bf16 rounding points, exact
// kernels): refused on several GPUs (the official MoE sums all experts of a token in one fp32 accumulator in expert-id
// order, which expert-parallel ranks split).
std::string cuda_numerics_refusal(const io::ModelConfig& cfg, const model::Numerics& num, int64_t gpus = 1);

// The first n layers (1 <= n <= num_hidden_layers): per-layer lists cut; V4.1's layer-id lists filtered (a role whose
// layer is cut is gone; the Engram tables of cut layers too).
void keep_first_layers(io::ModelConfig& cfg, int64_t n);

}  // namespace dsinfer::backends
