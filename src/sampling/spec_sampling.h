// Speculative decoding on the sampling side: the distribution the reference Sampler draws from (so drafts can be
// drawn from the same processing of the draft logits), draft draws, and verification of a block of drafts
// against the target's logits — greedy: accept the longest prefix equal to the Sampler's own greedy tokens;
// sampling: lossless rejection sampling (Leviathan et al. 2023, Chen et al. 2023): accept d_k with probability
// min(1, p_k(d_k) / q_k(d_k)), on rejection emit a token from norm(max(0, p_k - q_k)) (p_k if that is empty),
// after all accepted a bonus token from p. p_k is the request's processed target distribution with history
// output + d_<k (penalties and min_tokens see the drafts as generated tokens), q_k the processed draft one.
// Structured outputs: VerifyInput::row_mask gives row k's allowed tokens once drafts[0..k) are accepted; p_k is
// then the masked, renormalised distribution (as Sampler::sample draws from), so a draft outside the grammar
// has p_k(d_k) = 0 and is rejected, and the correction / bonus token is drawn inside the grammar.
// Randomness: the request's Philox stream keyed by output index, on lanes no other draw uses (see below), so a
// seeded run is reproducible and every uniform is consumed at most once in the kept output.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace dsinfer::sampling {

// Philox lanes (philox_uniform's `lane`) of speculative decoding. Lane 0 is the Sampler's token draw (bonus
// tokens, residual draws). kLaneAccept at output index j: the acceptance test of the draft at j. Drafts of the
// round whose anchor is output token a use (step a, lane kLaneDraftBase + k): every round has its own anchor.
inline constexpr uint32_t kLaneAccept = 1;
inline constexpr uint32_t kLaneDraftBase = 16;

// Sampler::sample's distribution for `in` (token_bitmask -> logit_bias -> min_tokens -> penalties -> temperature
// -> min_p -> top_k -> top_p), normalized, masked tokens 0. Greedy (or everything masked): one-hot at the
// Sampler's token.
void target_distribution(const SampleInput& in, std::vector<double>& probs);
// Inverse-CDF draw over ascending ids: the first id whose cumulative probability exceeds u in [0, 1).
int32_t draw_inverse_cdf(std::span<const double> probs, double u);

// Draws draft k of a round anchored at output index `anchor_index` from the processed draft logits `in.logits`
// (in.output_tokens = output + earlier drafts of the round). Fills q (the distribution drawn from) unless greedy.
int32_t draw_draft(const SampleInput& in, uint64_t anchor_index, int32_t k, std::vector<double>* q);

struct VerifyInput {
  std::span<const float> logits;        // [drafts.size() + 1, vocab]: row k scores the token after drafts[0..k)
  std::span<const int32_t> drafts;
  std::span<const double> draft_probs;  // [drafts.size(), vocab] q of each draft (ignored for greedy requests)
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // generated before this step (the anchor is the last)
  RngKey rng;
  int64_t eos_token_id = -1;
  // Structured outputs (empty function = unconstrained): row k's token bitmask (SampleInput::token_bitmask;
  // an empty span = row unconstrained), called for k = 0, 1, ... in order, k only after drafts[k - 1] was
  // accepted — so a grammar matcher can advance over the accepted drafts as it goes.
  std::function<std::span<const int32_t>(size_t k)> row_mask;
};

// Accepted drafts followed by the correction / bonus token (1 .. drafts + 1 results), with logprobs as
// Sampler::sample gives them (Raw: of the target logits row; Processed: of p).
void verify_drafts(const VerifyInput& in, Sampler& sampler, LogprobsMode mode, std::vector<SampleResult>& out);

}  // namespace dsinfer::sampling
