// Packing of device-sampled rows (see row_pack.h). Every rule here mirrors a step of Sampler::sample
// (sampler.cpp); the GPU test compares the device against the Sampler row by row.
#include "sampling/row_pack.h"

#include <algorithm>

namespace dsinfer::sampling {

namespace {
constexpr uint32_t kInPrompt = 0x80000000u;  // counts_ high bit: token occurs in the prompt (as sampler.cpp)
}

void PackedRows::clear(int64_t vocab) {
  vocab_ = vocab;
  rows.clear();
  entries.clear();
  mask_words.clear();
}

Status PackedRows::add(const RowRequest& r, LogprobsMode mode) {
  if (!r.params) return Status::error("device sampling: a row without sampling params");
  const SamplingParams& p = *r.params;
  if (vocab_ <= 0 || vocab_ > 0x7fffffff) return Status::errorf("device sampling: bad vocabulary size {}", vocab_);
  if (r.logits_row < 0) return Status::errorf("device sampling: bad logits row {}", r.logits_row);
  if (p.top_logprobs < 0 || p.top_logprobs > ops::kSampleMaxTop)
    return Status::errorf("device sampling: top_logprobs {} outside [0, {}]", p.top_logprobs, ops::kSampleMaxTop);
  if (!p.greedy() && !(p.temperature > 0)) return Status::errorf("device sampling: bad temperature {}", p.temperature);
  if (!r.token_bitmask.empty() && int64_t(r.token_bitmask.size()) != words_per_row())
    return Status::errorf("device sampling: a bitmask row of {} words, expected {}", r.token_bitmask.size(), words_per_row());
  ops::SampleRowDesc d;
  d.logits_row = r.logits_row;
  d.flags = (p.greedy() ? ops::kSampleGreedy : 0) | (p.logprobs ? ops::kSampleLogprobs : 0) |
            (mode == LogprobsMode::Processed ? ops::kSampleProcessed : 0);
  d.top_k = p.top_k_enabled() ? p.top_k : 0;
  d.top_logprobs = p.logprobs ? p.top_logprobs : 0;
  if (!p.greedy()) {
    d.inv_temperature = 1.0 / p.temperature;
    d.inv_temperature_f = float(1.0 / p.temperature);
  }
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.repetition_penalty = p.repetition_penalty;
  d.uniform = philox_uniform(r.rng, uint64_t(r.output_tokens.size()));
  if (!r.token_bitmask.empty()) {
    d.mask_row = num_mask_rows();
    mask_words.insert(mask_words.end(), r.token_bitmask.begin(), r.token_bitmask.end());
  }
  const size_t vocab = size_t(vocab_);
  // logit_bias: a std::map, so ids are unique; ids outside the vocabulary are skipped, as by the Sampler.
  d.bias_begin = int32_t(entries.size());
  for (const auto& [tok, bias] : p.logit_bias)
    if (size_t(tok) < vocab) entries.push_back({tok, float(bias)});
  d.bias_count = int32_t(entries.size()) - d.bias_begin;
  // min_tokens: the ids that would end the sequence early (deduplicated: the kernel writes them in parallel).
  d.ban_begin = int32_t(entries.size());
  if (int64_t(r.output_tokens.size()) < p.min_tokens) {
    std::vector<int32_t> ban;
    for (int32_t t : p.stop_token_ids)
      if (size_t(t) < vocab) ban.push_back(t);
    if (!p.ignore_eos && r.eos_token_id >= 0 && size_t(r.eos_token_id) < vocab) ban.push_back(int32_t(r.eos_token_id));
    std::sort(ban.begin(), ban.end());
    ban.erase(std::unique(ban.begin(), ban.end()), ban.end());
    for (int32_t t : ban) entries.push_back({t, 0.0f});
  }
  d.ban_count = int32_t(entries.size()) - d.ban_begin;
  // Penalties (Sampler::apply_penalties): repetition over prompt + output, frequency / presence over the output.
  d.penalty_begin = int32_t(entries.size());
  const bool rep = p.repetition_penalty != 1.0;
  if (rep || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    if (rep) d.flags |= ops::kSampleRepetition;
    counts_.resize(vocab, 0);
    touched_.clear();
    auto touch = [&](int32_t t) { if (counts_[size_t(t)] == 0) touched_.push_back(t); };
    if (rep)
      for (int32_t t : r.prompt_tokens)
        if (size_t(t) < vocab) { touch(t); counts_[size_t(t)] |= kInPrompt; }
    for (int32_t t : r.output_tokens)
      if (size_t(t) < vocab) { touch(t); counts_[size_t(t)] += 1; }
    for (int32_t t : touched_) {
      const uint32_t c = counts_[size_t(t)] & ~kInPrompt;
      entries.push_back({t, float(p.frequency_penalty * double(c) + p.presence_penalty * (c > 0 ? 1.0 : 0.0))});
      counts_[size_t(t)] = 0;
    }
  }
  d.penalty_count = int32_t(entries.size()) - d.penalty_begin;
  if (entries.size() > size_t(0x7fffffff)) return Status::error("device sampling: too many sparse entries in one step");
  rows.push_back(d);
  return Status::ok();
}

SampleResult to_sample_result(const ops::SampleRowOut& o, bool logprobs) {
  SampleResult r;
  r.token = o.token;
  if (!logprobs) return r;
  r.logprob = o.logprob;
  const int32_t n = std::clamp(o.num_top, 0, ops::kSampleMaxTop);
  r.top.reserve(size_t(n));
  for (int32_t j = 0; j < n; ++j) r.top.push_back({o.top_token[j], o.top_logprob[j]});
  return r;
}

}  // namespace dsinfer::sampling
