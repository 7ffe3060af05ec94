// Device sampling, host side: what each logits row needs, packed for one upload (ops/sampling/sampling.h). A row
// is described from exactly the inputs of the reference Sampler (SampleInput minus the logits): the params, the
// prompt / output histories (penalties become a sparse per-row list of (token, amount)), min_tokens (the ids to
// ban), the bitmask row and the RNG key (the Philox uniform of this draw is computed here, with the host's
// philox_uniform, so the device draws with bitwise the same number). Results come back as SampleRowOut and turn
// into the Sampler's SampleResult.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "ops/sampling/sampling.h"
#include "sampling/sampler.h"

namespace dsinfer::sampling {

struct RowRequest {
  int32_t logits_row = 0;
  std::span<const int32_t> token_bitmask;  // TokenBitmask row; empty = unconstrained
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
  RngKey rng;
  int64_t eos_token_id = -1;
};

class PackedRows {
 public:
  // Starts a new step over a vocabulary of `vocab` tokens.
  void clear(int64_t vocab);
  // Appends the description of one row (rows are sampled in the order added). Errors name the bad input.
  Status add(const RowRequest& r, LogprobsMode mode = LogprobsMode::Raw);

  int64_t vocab() const { return vocab_; }
  int32_t words_per_row() const { return bitmask_words(vocab_); }
  int32_t num_mask_rows() const { return words_per_row() > 0 ? int32_t(mask_words.size() / size_t(words_per_row())) : 0; }
  std::vector<ops::SampleRowDesc> rows;
  std::vector<ops::SampleEntry> entries;  // every row's bias, ban and penalty lists
  std::vector<int32_t> mask_words;        // [num_mask_rows, words_per_row]: only the constrained rows

 private:
  int64_t vocab_ = 0;
  std::vector<uint32_t> counts_;  // scratch, zero between calls (as Sampler::apply_penalties)
  std::vector<int32_t> touched_;
};

// The device result of one row as the Sampler returns it (logprob / top only when the row asked for logprobs).
SampleResult to_sample_result(const ops::SampleRowOut& o, bool logprobs);

}  // namespace dsinfer::sampling
