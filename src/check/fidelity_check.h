// Fidelity of a fast runner (CUDA tensor-core GEMMs, bf16 operands) against an exact one (fp32 GEMMs), issue 10:
// teacher-forced next-token distributions over a deterministic token stream, compared position by position
// (top-1 agreement, KL(exact || fast), max |logit difference|).
//
// The stream: sequences of seq_len tokens until `positions` are reached. Sequence i starts with the ids of
// fixture prompt i % P (its input_ids then its greedy_ids) and continues with tokens sampled from the EXACT
// runner's own distribution (temperature 1, splitmix64 seeded with `seed` and i). Sampling instead of greedy:
// a small model's greedy continuation falls into loops where every path agrees trivially; samples from the
// model itself are in-distribution text with the model's real mix of confident and uncertain positions. Then
// both runners process every sequence teacher-forced (prefill in chunks of `chunk` tokens, logits at every
// position), so the comparison sees the same kernels in both; positions = all tokens of all sequences.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "runner/model_runner.h"

namespace dsinfer::check {

struct FidelityOptions {
  int64_t positions = 2048;  // compared positions (>= 1)
  int64_t seq_len = 512;     // tokens per sequence (<= the model's max_position_embeddings)
  int64_t chunk = 256;       // teacher-forced prefill chunk
  uint64_t seed = 1;
};

struct Fidelity {
  int64_t positions = 0, sequences = 0, top1_matches = 0;
  double mean_kl = 0, max_kl = 0;  // KL(exact || fast) in nats; +inf when the fast logits are not finite
  double max_logit_diff = 0;       // max |exact - fast| over every logit
  double top1() const { return positions > 0 ? double(top1_matches) / double(positions) : 0.0; }
};

// Seeds of the stream: per prompt of a fixture-format file, prompt.N.input_ids followed by prompt.N.greedy_ids.
Result<std::vector<std::vector<int32_t>>> fidelity_seeds(const io::SafetensorsFile& ids);

// KL(p || q) of softmax(a) and softmax(b) over n logits (double; +inf when either holds a non-finite value).
double kl_from_logits(const float* a, const float* b, int64_t n);

Result<Fidelity> check_fidelity(runner::ModelRunner& exact, runner::ModelRunner& fast,
                                const std::vector<std::vector<int32_t>>& seeds, const FidelityOptions& options);

}  // namespace dsinfer::check
