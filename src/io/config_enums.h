// The enums that config.json strings are parsed into (once, in io/config.cpp). Dependency-free so that op
// parameter headers (ops/moe/moe.h) and CUDA launch code can use them too.
#pragma once

namespace dsinfer::io {

enum class AttnType { Sliding, CSA, HCA, CSA2 };  // compress ratio 0 / compress_rates.csa / compress_rates.hca /
                                                 // DeepSeek-V4.1 ratio > 0 (CSA2: shared compressed KV)
enum class MlpType { HashMoE, MoE };
enum class ScoringFunc { SqrtSoftplus, Softmax, Sigmoid };  // config "sqrtsoftplus" / "softmax" / "sigmoid"
enum class ExpertDtype { Same, FP4, FP8, BF16 };             // config expert_dtype absent / "fp4" / "fp8" / "bf16"
enum class Arch { DeepseekV4, DeepseekV41 };                 // model_type deepseek_v4 / deepseek_v41(_text)

}  // namespace dsinfer::io
